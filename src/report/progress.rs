//! The progress bar of a long report on stderr: how much of the data file has been read. Drawn
//! only on a terminal, only once a report has run for a while, at most ten times a second, and
//! cleared when the report ends, so quick reports, scripts and redirected output never see it.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use crate::event::Event;

use crate::event::EventSource;

/// Reports quicker than this never show a bar.
const FIRST_AFTER: Duration = Duration::from_millis(500);
/// The least time between two redraws.
const EVERY: Duration = Duration::from_millis(100);
/// Cells of the bar itself.
const WIDTH: usize = 30;

/// A progress bar over `total` bytes, drawn to `out`.
pub struct ProgressBar<W: Write> {
    /// `None` when nothing is drawn (stderr is not a terminal).
    out: Option<W>,
    /// What is being done: `reading`.
    label: &'static str,
    total: u64,
    started: Instant,
    last_drawn: Option<Instant>,
}

impl ProgressBar<std::io::Stderr> {
    /// A bar on stderr if `wanted` and stderr is a terminal; one that draws nothing otherwise.
    pub fn on_stderr(
        wanted: bool,
        label: &'static str,
        total: u64,
    ) -> ProgressBar<std::io::Stderr> {
        let stderr = std::io::stderr();
        let out = (wanted && stderr.is_terminal()).then_some(stderr);
        ProgressBar::new(out, label, total, Instant::now())
    }
}

impl<W: Write> ProgressBar<W> {
    pub fn new(
        out: Option<W>,
        label: &'static str,
        total: u64,
        started: Instant,
    ) -> ProgressBar<W> {
        ProgressBar {
            out,
            label,
            total,
            started,
            last_drawn: None,
        }
    }

    /// Redraws the bar for `done` bytes out of the total, if it is time to at `now`.
    pub fn update(&mut self, done: u64, now: Instant) {
        let Some(out) = &mut self.out else {
            return;
        };
        let due = match self.last_drawn {
            None => now.saturating_duration_since(self.started) >= FIRST_AFTER,
            Some(last) => now.saturating_duration_since(last) >= EVERY,
        };
        if due {
            // A bar that cannot be drawn is no reason to stop the report.
            let _ = write!(out, "\r{}\x1b[K", bar_line(self.label, done, self.total))
                .and_then(|()| out.flush());
            self.last_drawn = Some(now);
        }
    }

    /// Erases the bar, if it was drawn, so what follows starts on a clean line.
    pub fn clear(&mut self) {
        if let (Some(out), Some(_)) = (&mut self.out, self.last_drawn.take()) {
            let _ = out.write_all(b"\r\x1b[K").and_then(|()| out.flush());
        }
    }
}

impl<W: Write> Drop for ProgressBar<W> {
    fn drop(&mut self) {
        self.clear();
    }
}

/// The text of the bar: `utrace: reading [#####.....]  50%  1.2 of 2.4 MB`.
fn bar_line(label: &str, done: u64, total: u64) -> String {
    let done = done.min(total);
    let fraction = if total == 0 {
        1.0
    } else {
        done as f64 / total as f64
    };
    let filled = ((fraction * WIDTH as f64) as usize).min(WIDTH);
    format!(
        "utrace: {label} [{}{}] {:3.0}%  {:.1} of {:.1} MB",
        "#".repeat(filled),
        ".".repeat(WIDTH - filled),
        fraction * 100.0,
        done as f64 / 1e6,
        total as f64 / 1e6
    )
}

/// An [`EventSource`] that moves a progress bar as its blocks are read: `position` says how many
/// bytes of the file `source` has read.
pub struct WithProgress<E, W: Write> {
    source: E,
    position: fn(&E) -> u64,
    bar: ProgressBar<W>,
}

impl<E, W: Write> WithProgress<E, W> {
    pub fn new(source: E, position: fn(&E) -> u64, bar: ProgressBar<W>) -> WithProgress<E, W> {
        WithProgress {
            source,
            position,
            bar,
        }
    }

    pub fn source(&self) -> &E {
        &self.source
    }
}

impl<E: EventSource, W: Write> EventSource for WithProgress<E, W> {
    type Error = E::Error;

    fn next_block(&mut self) -> Result<Option<&[Event]>, E::Error> {
        // Drawn before the block is lent out: the borrow of the source lasts until the next call.
        self.bar
            .update((self.position)(&self.source), Instant::now());
        let block = self.source.next_block();
        if matches!(block, Ok(None) | Err(_)) {
            self.bar.clear();
        }
        block
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(started: Instant, ms: u64) -> Instant {
        started + Duration::from_millis(ms)
    }

    #[test]
    fn the_line_shows_the_share_read() {
        assert_eq!(
            bar_line("reading", 1_200_000, 2_400_000),
            "utrace: reading [###############...............]  50%  1.2 of 2.4 MB"
        );
        assert_eq!(
            bar_line("finding threads", 0, 10),
            "utrace: finding threads [..............................]   0%  0.0 of 0.0 MB"
        );
        // More than the file (it grew) and an empty file read as all done.
        assert!(bar_line("reading", 20, 10).contains("] 100%"));
        assert!(bar_line("reading", 0, 0).contains("] 100%"));
    }

    #[test]
    fn drawn_after_half_a_second_at_most_ten_times_a_second_then_cleared() {
        let started = Instant::now();
        let mut out = Vec::new();
        let mut bar = ProgressBar::new(Some(&mut out), "reading", 1000, started);
        bar.update(100, at(started, 499)); // too early
        bar.update(200, at(started, 500)); // drawn
        bar.update(300, at(started, 599)); // too soon after
        bar.update(400, at(started, 600)); // drawn
        bar.clear();
        bar.clear(); // nothing left to clear
        drop(bar); // nor when dropped
        let text = String::from_utf8(out).unwrap();
        let draws: Vec<&str> = text.split('\r').filter(|s| !s.is_empty()).collect();
        assert_eq!(draws.len(), 3, "{text:?}");
        assert!(draws[0].contains(" 20%  0.0 of 0.0 MB\x1b[K"), "{text:?}");
        assert!(draws[1].contains(" 40%"), "{text:?}");
        assert_eq!(draws[2], "\x1b[K");
    }

    #[test]
    fn without_a_terminal_nothing_is_drawn() {
        let started = Instant::now();
        let mut bar = ProgressBar::<Vec<u8>>::new(None, "reading", 1000, started);
        bar.update(500, at(started, 5000));
        assert!(bar.last_drawn.is_none());
    }

    /// Blocks of one event each, 100 bytes apiece.
    struct Blocks {
        events: [Event; 1],
        left: u64,
        read: u64,
    }

    impl EventSource for Blocks {
        type Error = std::convert::Infallible;

        fn next_block(&mut self) -> Result<Option<&[Event]>, Self::Error> {
            if self.left == 0 {
                return Ok(None);
            }
            self.left -= 1;
            self.read += 100;
            Ok(Some(&self.events))
        }
    }

    #[test]
    fn a_source_moves_the_bar_and_clears_it_at_its_end() {
        let blocks = Blocks {
            events: [Event::entry(1, 2, 3)],
            left: 2,
            read: 0,
        };
        let mut out = Vec::new();
        // Started long ago: drawn at once.
        let started = Instant::now() - Duration::from_secs(1);
        let bar = ProgressBar::new(Some(&mut out), "reading", 200, started);
        let mut source = WithProgress::new(blocks, |blocks| blocks.read, bar);
        assert_eq!(source.next_block(), Ok(Some(&[Event::entry(1, 2, 3)][..])));
        assert_eq!(source.source().read, 100);
        assert!(source.next_block().unwrap().is_some());
        assert!(source.next_block().unwrap().is_none());
        drop(source);
        let text = String::from_utf8(out).unwrap();
        // Drawn before the first block (0%), then cleared at the end, once.
        assert!(text.starts_with("\rutrace: reading [...."), "{text:?}");
        assert!(text.contains("  0%"), "{text:?}");
        assert!(text.ends_with("\x1b[K\r\x1b[K"), "{text:?}");
        assert_eq!(text.matches("\r\x1b[K").count(), 1, "{text:?}");
    }

    #[test]
    fn a_dropped_bar_is_cleared_if_it_was_drawn() {
        let started = Instant::now();
        // A quick report draws nothing, so has nothing to clear.
        for (ms, left) in [(100, ""), (600, "\x1b[K\r\x1b[K")] {
            let mut out = Vec::new();
            let mut bar = ProgressBar::new(Some(&mut out), "reading", 1000, started);
            bar.update(500, at(started, ms));
            drop(bar);
            assert!(String::from_utf8(out).unwrap().ends_with(left), "{ms} ms");
        }
    }
}
