//! The probe layer: the BPF side of a recording, in the stages a reader can name, each in its
//! own file:
//!
//! 0. `features.rs` and `strategy.rs`: what the kernel offers, probed once, and how probes are
//!    attached on it (`uprobe_multi`, or one uprobe per probe site);
//! 1. `load.rs`: open the skeleton, write its configuration, load the programs;
//! 2. `attach.rs`: attach the planned functions' probes and the watches, filtered to a process;
//!    `events.rs`: the kernel events and USDT probes (`-E`); `kernel_functions.rs`: the kernel
//!    functions (`-k`);
//! 3. `globals.rs`: while they run, switch recording on and off and read their counters;
//! 4. `release.rs`: detach every link, in the order the kernel needs; `link_keeper.rs`: a second
//!    reference to each, held by the guardian, so that a killed recorder's close is not the last.
//!
//! `interface.rs` is where Rust meets the C definitions of the event, the cookie bits and the
//! configuration (`src/bpf/interface.h`).

mod attach;
mod error;
mod events;
mod features;
mod generations;
mod globals;
pub use globals::{replaced_return_addresses, GuardianMaps};
mod interface;
mod kernel_functions;
mod libbpf_log;
mod link_keeper;
mod load;
mod release;
mod strategy;
mod string_places;
mod user_stacks;

pub use attach::{ExitSites, Watch};
pub use error::ProbeError;
pub use events::{check_kernel_functions, preemption_recordable, EventLinks, EventPrograms};
pub use features::{KernelFeatures, Support};
pub use libbpf_log::forward_libbpf_messages;
pub use link_keeper::{dismiss, keep_links_in, stop_keeping, HeldLinks, Kept, Releasing, Said};
pub use load::{allow_many_probes, ring_buffer_size, LoadedProbes, ObjectStorage, ProbeConfig};
pub use release::{release_handed_links, AttachedProbes};
pub use strategy::ATTACH_MODE_VARIABLE;
pub use strategy::{strategy, AttachMode, AttachStrategy, KernelAttach, Programs, Signals};
pub use string_places::{StringPlace, StringPlaces};
pub use user_stacks::{RawCaller, RawFrame, RawStack};
