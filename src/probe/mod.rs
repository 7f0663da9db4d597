//! The probe layer: the BPF side of a recording, in the stages a reader can name, each in its
//! own file:
//!
//! 1. [`load`]: open the skeleton, write its configuration, load the programs;
//! 2. [`attach`]: attach the planned functions' probes and the watches, filtered to a process;
//! 3. [`globals`]: while they run, switch recording on and off and read their counters;
//! 4. [`release`]: detach every link, in the order the kernel needs.
//!
//! [`interface`] is where Rust meets the C definitions of the event, the cookie bits and the
//! configuration (`src/bpf/interface.h`).

mod attach;
mod error;
mod globals;
mod interface;
mod landings;
mod load;
mod release;

pub use error::ProbeError;
pub use landings::Landings;
pub use load::{
    forward_libbpf_messages, ring_buffer_size, LoadedProbes, ObjectStorage, ProbeConfig,
};
pub use release::AttachedProbes;
