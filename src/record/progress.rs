//! The progress line on stderr while recording, shown only when stderr is a terminal that the
//! traced program does not write to: its own output would land in the middle of the line.

use std::io::{IsTerminal, Write};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

const EVERY: Duration = Duration::from_millis(500);

pub struct Progress {
    enabled: bool,
    /// The traced process, whose output is looked at once, when the line is first due: by
    /// then a command has exec'ed (a shell may have redirected it).
    pid: Option<u32>,
    last_shown: Instant,
    last_events: u64,
    shown: bool,
}

impl Progress {
    /// A progress line, if `wanted` (live mode prints its tree on stderr), stderr is a terminal,
    /// and process `pid` writes neither its output nor its errors there (see `pid`).
    pub fn new(wanted: bool, pid: u32) -> Progress {
        Progress {
            enabled: wanted && std::io::stderr().is_terminal(),
            pid: Some(pid),
            last_shown: Instant::now(),
            last_events: 0,
            shown: false,
        }
    }

    pub fn update(&mut self, events: u64, lost: u64) {
        let elapsed = self.last_shown.elapsed();
        if !self.enabled || elapsed < EVERY {
            return;
        }
        if let Some(pid) = self.pid.take() {
            self.enabled = !writes_to_our_terminal(pid);
            if !self.enabled {
                return;
            }
        }
        let rate = (events - self.last_events) as f64 / elapsed.as_secs_f64();
        eprint!("\rutrace: {events} events, {rate:.0} events/s, {lost} lost\x1b[K");
        let _ = std::io::stderr().flush();
        self.last_shown = Instant::now();
        self.last_events = events;
        self.shown = true;
    }

    /// Clears the line so the final report starts on a clean one.
    pub fn clear(&mut self) {
        if self.shown {
            eprint!("\r\x1b[K");
            self.shown = false;
        }
    }
}

/// Whether process `pid`'s standard output or error is the terminal of our stderr (or cannot be
/// told apart from it).
fn writes_to_our_terminal(pid: u32) -> bool {
    let Ok(ours) = std::fs::metadata("/dev/stderr") else {
        return true;
    };
    [1, 2].iter().any(|fd| {
        std::fs::metadata(format!("/proc/{pid}/fd/{fd}")).map_or(true, |theirs| {
            theirs.rdev() == ours.rdev() && theirs.dev() == ours.dev()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_writes_elsewhere_leaves_the_terminal_to_the_line() {
        // Our own fds: whatever they are, ours are ours.
        assert!(writes_to_our_terminal(std::process::id()));
        // A process whose output and errors go to /dev/null.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let quiet = writes_to_our_terminal(child.id());
        child.kill().unwrap();
        child.wait().unwrap();
        // Unless our stderr is /dev/null too (a test harness may make it so).
        let ours = std::fs::metadata("/dev/stderr").unwrap();
        let null = std::fs::metadata("/dev/null").unwrap();
        assert_eq!(quiet, ours.rdev() == null.rdev());
    }
}
