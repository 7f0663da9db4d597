//! The `utrace.data` file: format, writer and reader.
//!
//! A recording is one file: a header, then self-describing chunks (metadata, the function table,
//! blocks of events, statistics). Each chunk is complete on its own, so a file cut short by a
//! crash reads up to its last whole chunk, and a damaged chunk costs only its own events. The
//! byte layout lives in [`format`] alone.

mod chunks;
mod error;
pub mod format;
mod reader;
mod writer;

#[cfg(test)]
pub(crate) mod fuzz;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

use crate::probe_cost::ProbeCosts;

pub use chunks::{DamagedChunk, OnDamage};
pub use error::DataError;
pub use reader::DataReader;
pub use writer::DataWriter;

/// What was recorded, where and when.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Metadata {
    /// The traced command and its arguments (for `-p`, the process's command line).
    pub command: Vec<String>,
    pub pid: u32,
    /// CLOCK_MONOTONIC at the start, in nanoseconds: the clock of event timestamps.
    pub start_monotonic_ns: u64,
    /// CLOCK_REALTIME at the start, in nanoseconds since the Unix epoch.
    pub start_realtime_ns: u64,
    pub hostname: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// The version of utrace that recorded the file.
    pub utrace_version: String,
    /// What utrace's probes cost on the machine, measured before recording; `None` when the
    /// measurement failed (reports then show raw times).
    pub probe_costs: Option<ProbeCosts>,
}

impl Metadata {
    /// The command as a shell would take it: arguments joined by spaces, quoted where needed.
    /// A process that rewrote its command line into one string with spaces (`setproctitle`, as
    /// redis and nginx do: `redis-server 127.0.0.1:6379`), recorded with `-p`, shows it as `ps`
    /// does, unquoted: the quotes would name a command that never ran.
    pub fn command_line(&self) -> String {
        match self.command.as_slice() {
            [title] if title.contains(' ') => title.clone(),
            words => shell_words::join(words),
        }
    }
}

/// How the recording went, written last when it ended cleanly.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Statistics {
    /// Events written to the file.
    pub events: u64,
    /// Events the ring buffer had no room for.
    pub lost_events: u64,
    /// From the start of recording to its end.
    pub duration_ns: u64,
    /// `lost_events` per thread: (thread id, events lost), by thread id, threads that lost none
    /// left out.
    pub lost_by_thread: Vec<(u32, u64)>,
}
