//! utrace: an eBPF user-space function tracer. The library holds every part; `main.rs` only
//! parses arguments and dispatches. See DESIGN.md for how the parts fit.

pub mod data;
pub mod diagnostics;
pub mod elf;
pub mod event;
mod fast_hash;
pub mod filter;
#[cfg(test)]
mod fuzz_cases;
pub mod info;
pub mod live;
pub mod plan;
pub mod probe;
pub mod probe_cost;
pub mod record;
pub mod replay;
pub mod report;
pub mod table;
pub mod user_stack;
pub mod value;
