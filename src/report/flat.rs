//! `--flat`: one line per entry and per exit, as they come, for following a live trace event by
//! event rather than as a tree.
//!
//! ```text
//!       1234.567890123 [  1234] ==> fib
//!       1234.567890612 [  1234] <== fib 489 ns
//! ```
//!
//! A duration below what the probe-cost correction resolves for its function shows as the
//! summary's bound (`<== fib <90 ns`, see [`CorrectedDuration`]).

use std::borrow::Cow;
use std::io::{self, Write};

use super::summary::CorrectedDuration;
use crate::probe_cost::Resolutions;
use crate::replay::{CallEntry, CallSink, FinishedCall};
use crate::table::{FunctionId, FunctionTable};

/// Prints each call's entry and exit on a line of its own. Write errors are kept and returned by
/// [`flush`](Self::flush), since a sink cannot return them.
pub struct FlatPrinter<'t, W: Write> {
    /// Owned once functions are added (live mode under `--follow`).
    table: Cow<'t, FunctionTable>,
    out: W,
    /// Below what each function's durations show as a bound: 0 for all until
    /// [`show_bounds`](Self::show_bounds).
    resolutions: Resolutions,
    error: Option<io::Error>,
}

impl<'t, W: Write> FlatPrinter<'t, W> {
    pub fn new(table: &'t FunctionTable, mut out: W) -> io::Result<Self> {
        writeln!(out, "# {:>18} {:^8}     FUNCTION", "TIMESTAMP", "TID")?;
        Ok(FlatPrinter {
            table: Cow::Borrowed(table),
            out,
            resolutions: Resolutions::default(),
            error: None,
        })
    }

    /// Takes in functions planned during the recording (a program a followed process exec'ed),
    /// numbered on from the table's.
    pub fn add_functions(&mut self, more: &FunctionTable) {
        self.table.to_mut().extend(more.clone());
    }

    /// Shows a duration below its function's resolution as a bound (probe costs taken out).
    pub fn show_bounds(&mut self, resolutions: Resolutions) {
        self.resolutions = resolutions;
    }

    /// A line of its own that says something of the trace at this point (`# text`).
    pub fn note(&mut self, text: &str) -> io::Result<()> {
        writeln!(self.out, "# {text}")
    }

    pub fn flush(&mut self) -> io::Result<()> {
        match self.error.take() {
            Some(error) => Err(error),
            None => self.out.flush(),
        }
    }

    fn line(&mut self, timestamp_ns: u64, tid: u32, arrow: &str, function: FunctionId, tail: &str) {
        if self.error.is_some() {
            return;
        }
        let name = self.table.name_of(function);
        let result = writeln!(
            self.out,
            "{:>10}.{:09} [{tid:>6}] {arrow} {name}{tail}",
            timestamp_ns / 1_000_000_000,
            timestamp_ns % 1_000_000_000
        );
        if let Err(error) = result {
            self.error = Some(error);
        }
    }
}

impl<W: Write> CallSink for FlatPrinter<'_, W> {
    fn call_entered(&mut self, entry: &CallEntry, _stack: &[FunctionId]) {
        self.line(entry.start_ns, entry.tid, "==>", entry.function, "");
    }

    fn call_finished(&mut self, call: &FinishedCall, _stack: &[FunctionId]) {
        let tail = match (call.complete, call.time_known) {
            (true, _) => {
                let resolution_ns = self.resolutions.of(call.function);
                let duration = CorrectedDuration::of_call(call, resolution_ns);
                format!(" {duration}")
            }
            (false, true) => " (no exit)".to_string(),
            (false, false) => " (time unknown)".to_string(),
        };
        self.line(call.end_ns, call.tid, "<==", call.function, &tail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;
    use crate::probe_cost::{ProbeCost, ProbeCosts};
    use crate::replay::Replayer;

    #[test]
    fn one_line_per_event() {
        let table = FunctionTable::of_names(&["main", "fib"]);
        let mut out = Vec::new();
        let mut printer = FlatPrinter::new(&table, &mut out).unwrap();
        let mut replayer = Replayer::new(2);
        let events = [
            Event::entry(1_000_000_000, 7, 0),
            Event::entry(1_000_000_500, 7, 1),
            Event::exit(1_000_001_000, 7, 1),
        ];
        replayer.push_all(&events, &mut printer);
        replayer.finish(1_000_002_000, &mut printer);
        printer.flush().unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "#          TIMESTAMP   TID        FUNCTION",
                "         1.000000000 [     7] ==> main",
                "         1.000000500 [     7] ==> fib",
                "         1.000001000 [     7] <== fib 500 ns",
                "         1.000002000 [     7] <== main (no exit)",
            ]
        );
    }

    #[test]
    fn durations_below_the_resolution_show_as_a_bound() {
        let table = FunctionTable::of_names(&["main", "fib"]);
        let mut out = Vec::new();
        let mut printer = FlatPrinter::new(&table, &mut out).unwrap();
        let cost = ProbeCost {
            inside_ns: 0,
            full_ns: 0,
            inside_spread_ns: Some(600),
        };
        let costs = ProbeCosts {
            classes: vec![(Default::default(), cost)],
        };
        printer.show_bounds(Resolutions::new(&table, Some(&costs)));
        let events = [
            Event::entry(0, 7, 0),
            Event::entry(100, 7, 1),
            Event::exit(600, 7, 1),
            Event::exit(1_000, 7, 0),
        ];
        Replayer::new(2).push_all(&events, &mut printer);
        printer.flush().unwrap();
        let text = String::from_utf8(out).unwrap();
        let exits: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split("<== ").nth(1))
            .collect();
        // fib is below the 600 ns resolved; it measured 500 ns, which bounds it.
        assert_eq!(exits, ["fib <500 ns", "main 1.000 us"], "{text}");
    }
}
