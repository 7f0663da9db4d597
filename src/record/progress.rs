//! The progress line on stderr while recording, shown only when stderr is a terminal.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

const EVERY: Duration = Duration::from_millis(500);

pub struct Progress {
    enabled: bool,
    last_shown: Instant,
    last_events: u64,
    shown: bool,
}

impl Progress {
    /// A progress line, if `wanted` and stderr is a terminal (live mode prints its tree there).
    pub fn new(wanted: bool) -> Progress {
        Progress {
            enabled: wanted && std::io::stderr().is_terminal(),
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
