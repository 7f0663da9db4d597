//! `summary`: calls and times per function, as a text table like uftrace's `report`.
//!
//! Per function:
//! - **calls**: every call, complete or not;
//! - **total**: the durations of the calls that are not recursive (no call of the same function
//!   below them on the stack), so recursion is counted once, as uftrace does;
//! - **self**: the self times of every call (they never overlap, so this is exact);
//! - **min / max**: over the durations of every call, recursive ones included, as uftrace does
//!   (for `fib` the minimum is the leaf call, the maximum the outermost one);
//! - **average**: total / calls (so it is below the per-call cost under recursion, as in uftrace).
//!
//! Calls without an exit (closed at the end of the trace or by unwinding) count like the others;
//! the table ends with a note when there were any.

use std::fmt;
use std::io::{self, Write};

use crate::plan::{FunctionId, FunctionTable, TracedFunction};
use crate::replay::{CallSink, FinishedCall, ReplayStats};

/// The figures of one function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FunctionStats {
    pub calls: u64,
    pub total_ns: u64,
    pub self_ns: u64,
    /// 0 when there were no calls.
    pub min_ns: u64,
    pub max_ns: u64,
}

impl FunctionStats {
    /// total / calls, 0 when there were no calls.
    pub fn avg_ns(&self) -> u64 {
        self.total_ns.checked_div(self.calls).unwrap_or(0)
    }

    fn add(&mut self, call: &FinishedCall) {
        if self.calls == 0 {
            self.min_ns = call.duration_ns;
            self.max_ns = call.duration_ns;
        } else {
            self.min_ns = self.min_ns.min(call.duration_ns);
            self.max_ns = self.max_ns.max(call.duration_ns);
        }
        self.calls += 1;
        if !call.recursive {
            self.total_ns = self.total_ns.saturating_add(call.duration_ns);
        }
        self.self_ns = self.self_ns.saturating_add(call.self_ns);
    }
}

/// Collects [`FunctionStats`] per function id; a [`CallSink`].
#[derive(Clone, Debug)]
pub struct Summary {
    functions: Vec<FunctionStats>,
}

/// One line of the summary: a function that was called.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SummaryRow<'t> {
    pub id: FunctionId,
    pub function: &'t TracedFunction,
    pub stats: FunctionStats,
}

impl Summary {
    pub fn new(function_count: usize) -> Summary {
        Summary {
            functions: vec![FunctionStats::default(); function_count],
        }
    }

    pub fn stats(&self, id: FunctionId) -> Option<&FunctionStats> {
        self.functions.get(id as usize)
    }

    /// The functions that were called, by total time (longest first), then by name, then by id.
    pub fn rows<'t>(&self, table: &'t FunctionTable) -> Vec<SummaryRow<'t>> {
        let mut rows: Vec<SummaryRow<'t>> = table
            .functions
            .iter()
            .zip(&self.functions)
            .enumerate()
            .filter(|(_, (_, stats))| stats.calls > 0)
            .map(|(id, (function, stats))| SummaryRow {
                id: id as FunctionId,
                function,
                stats: *stats,
            })
            .collect();
        // Stable: ties in total and name stay in id order.
        rows.sort_by(|a, b| {
            b.stats
                .total_ns
                .cmp(&a.stats.total_ns)
                .then_with(|| a.function.name.cmp(&b.function.name))
        });
        rows
    }

    /// Writes the table, then a note on unmatched exits, unfinished calls and unknown function
    /// ids when there were any.
    pub fn write_text(
        &self,
        table: &FunctionTable,
        replay: &ReplayStats,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        writeln!(
            out,
            "  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  Function",
            "Total time", "Self time", "Calls", "Average", "Minimum", "Maximum"
        )?;
        let rule = "==========";
        writeln!(
            out,
            "  {rule}  {rule}  {rule}  {rule}  {rule}  {rule}  ===================="
        )?;
        for row in self.rows(table) {
            let s = &row.stats;
            writeln!(
                out,
                "  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {}",
                HumanDuration(s.total_ns),
                HumanDuration(s.self_ns),
                s.calls,
                HumanDuration(s.avg_ns()),
                HumanDuration(s.min_ns),
                HumanDuration(s.max_ns),
                row.function.name
            )?;
        }
        if let Some(note) = replay_note(replay) {
            writeln!(out)?;
            writeln!(out, "  note: {note}")?;
        }
        Ok(())
    }
}

impl CallSink for Summary {
    fn call_finished(&mut self, call: &FinishedCall, _stack: &[FunctionId]) {
        if let Some(stats) = self.functions.get_mut(call.function as usize) {
            stats.add(call);
        }
    }
}

/// What the replayer had to work around, in words; `None` when nothing.
fn replay_note(replay: &ReplayStats) -> Option<String> {
    let mut parts = Vec::new();
    if replay.unmatched_exits > 0 {
        parts.push(format!(
            "{} ignored (calls already running when tracing started)",
            plural(replay.unmatched_exits, "unmatched exit", "unmatched exits")
        ));
    }
    if replay.unfinished_calls > 0 {
        parts.push(format!(
            "{} (no exit seen: timed up to the end of the trace or to an outer return)",
            plural(
                replay.unfinished_calls,
                "unfinished call",
                "unfinished calls"
            )
        ));
    }
    if replay.unknown_function_events > 0 {
        parts.push(format!(
            "{} ignored (the data file may be damaged)",
            plural(
                replay.unknown_function_events,
                "event with an unknown function id",
                "events with an unknown function id"
            )
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A duration in nanoseconds, shown in the largest unit it reaches: below 1 µs as whole
/// nanoseconds (`512 ns`), then microseconds, milliseconds or seconds with three decimals
/// (`12.345 us`, `1.234 ms`, `2.500 s`). Decimals are truncated, not rounded, so a value never
/// shows as `1000.000` of a unit; seconds are the largest unit (`3600.000 s`). Width and
/// alignment flags apply to the whole text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HumanDuration(pub u64);

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0;
        let text = match ns {
            0..=999 => format!("{ns} ns"),
            1_000..=999_999 => format!("{}.{:03} us", ns / 1_000, ns % 1_000),
            1_000_000..=999_999_999 => {
                format!("{}.{:03} ms", ns / 1_000_000, ns % 1_000_000 / 1_000)
            }
            _ => format!(
                "{}.{:03} s",
                ns / 1_000_000_000,
                ns % 1_000_000_000 / 1_000_000
            ),
        };
        f.pad(&text)
    }
}
