//! Reports: each consumes the calls of the replayer ([`crate::replay`]) and writes one format.
//! One file per report; [`write_report`] is the one entry point the CLI calls. The filters
//! ([`crate::filter`]) sit between the replayer and the report, so every report honours them
//! the same way.
//!
//! The events come from an [`EventSource`], which the `utrace.data` reader implements: blocks
//! are borrowed from the reader one at a time, so reports stream a trace of any length.

pub mod chrome;
pub mod diff;
pub mod distribution;
pub mod dot;
pub mod flame_graph;
pub mod flat;
pub mod graph;
pub mod json;
mod no_calls;
mod output;
pub mod progress;
mod run;
pub mod stacks;
pub mod summary;
pub mod svg;
pub mod tree;

use std::fmt;
use std::io::{self, Write};
use std::str::FromStr;

use thiserror::Error;

use crate::event::Event;
use crate::event::EventSource;
use crate::fast_hash::FastHashMap;
use crate::filter::{FilterSpec, FilteredSink};
use crate::probe_cost::{ProbeCosts, Resolutions};
use crate::replay::{CallEntry, CallSink, FinishedCall, ReplayStats, Replayer};
use crate::table::{FunctionId, FunctionTable, TracedFunction};

use crate::user_stack::UserStacks;
use chrome::ChromeTrace;
use distribution::{Both, Distributions};
use dot::CallGraph;
use flame_graph::{FoldedStacks, Weight};
use graph::CalleeGraphs;
pub use run::{run, ReportRequest};
use stacks::CallPaths;
use summary::{GroupedSummaries, Grouping, OffCpu, SortKey, Summary, TableLayout};
use tree::{Columns, TreePrinter};

/// What the data file says about the recording, for reports that show it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceInfo {
    /// The recorded command line.
    pub command: String,
    pub pid: u32,
    /// CLOCK_MONOTONIC when recording started, ns: the origin of Chrome timestamps.
    pub start_monotonic_ns: u64,
    /// How long the recording lasted.
    pub duration_ns: u64,
    /// Events recorded.
    pub events: u64,
    /// Events lost because the ring buffer was full.
    pub lost_events: u64,
    /// The same per thread: (thread id, events lost), by thread id.
    pub lost_by_thread: Vec<(u32, u64)>,
    /// Chunks of the data file skipped because they were damaged; `events` leaves their events
    /// out.
    pub damaged_chunks: u64,
}

/// The report formats, as the CLI names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A text table of calls and times per function (`summary`).
    Summary,
    /// Folded stacks weighted by self time, for flamegraph.pl and inferno (`flame-graph`).
    FlameGraph,
    /// An SVG flame graph (`svg`).
    Svg,
    /// The summary as JSON, for scripts (`json`).
    Json,
    /// The call tree, uftrace-style (`replay`).
    Replay,
    /// Chrome trace-event JSON, for Perfetto (`chrome`).
    Chrome,
    /// The distinct call paths to each shown function (`stacks`).
    Stacks,
    /// The call graph in graphviz's language (`dot`).
    Dot,
    /// uftrace's text call graph of each shown function's callees (`graph`).
    Graph,
    /// A log2 histogram of each function's durations, as bcc's funclatency (`histogram`).
    Histogram,
}

impl Format {
    pub const ALL: [Format; 10] = [
        Format::Summary,
        Format::FlameGraph,
        Format::Svg,
        Format::Json,
        Format::Replay,
        Format::Chrome,
        Format::Stacks,
        Format::Dot,
        Format::Graph,
        Format::Histogram,
    ];

    /// The name the CLI uses.
    pub fn name(self) -> &'static str {
        match self {
            Format::Summary => "summary",
            Format::FlameGraph => "flame-graph",
            Format::Svg => "svg",
            Format::Json => "json",
            Format::Replay => "replay",
            Format::Chrome => "chrome",
            Format::Stacks => "stacks",
            Format::Dot => "dot",
            Format::Graph => "graph",
            Format::Histogram => "histogram",
        }
    }
}

impl Format {
    /// Whether the report is written as the events are read (the others are written at the end).
    pub fn writes_while_reading(self) -> bool {
        matches!(self, Format::Replay | Format::Chrome)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A report format name that is not one of [`Format::ALL`].
#[derive(Debug, Error, PartialEq, Eq)]
#[error("unknown report format `{0}`: use one of summary, flame-graph, svg, json, replay, chrome, stacks, dot, graph, histogram")]
pub struct UnknownFormat(pub String);

impl FromStr for Format {
    type Err = UnknownFormat;

    fn from_str(name: &str) -> Result<Format, UnknownFormat> {
        Format::ALL
            .into_iter()
            .find(|format| format.name() == name)
            .ok_or_else(|| UnknownFormat(name.to_owned()))
    }
}

/// Why a report could not be made.
#[derive(Debug, Error)]
pub enum ReportError {
    #[error("cannot read the recorded events")]
    Read(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("cannot write the report")]
    Write(#[from] io::Error),
    #[error(
        "nothing to draw: no call with a non-zero self time was recorded \
         (check that the traced functions ran, or use --format=summary)"
    )]
    NothingToDraw,
    #[error(transparent)]
    TooManyFunctions(#[from] stacks::TooManyFunctions),
}

/// What replaying the events for a report found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportOutcome {
    /// Events read from the source (including ignored ones).
    pub events: u64,
    pub replay: ReplayStats,
    /// Calls that reached the report, past the filters. With none, the summary and the call
    /// tree write nothing at all rather than a bare header.
    pub calls: u64,
}

/// How a report is made, beyond its format. [`ReportOptions::default`] is the plain report.
#[derive(Clone, Debug, Default)]
pub struct ReportOptions {
    /// Summary and JSON: the order of the rows.
    pub sort: SortKey,
    /// Summary: one table per thread.
    pub per_thread: bool,
    /// Summary: average, minimum and maximum of self times (`--avg-self`).
    pub avg_self: bool,
    /// Flame graphs: what a call weighs.
    pub weight: Weight,
    /// Every format: which calls are shown.
    pub filter: FilterSpec,
    /// Replay: show the thread id column. Set it when the trace, as filtered, has more than one
    /// thread ([`scan_threads`] finds out); a stream cannot know before its end.
    pub show_thread_ids: bool,
    /// Replay: show the process id column; set it when the trace has more than one process.
    pub show_process_ids: bool,
    /// Replay: show when each line's event happened (`--timestamp`).
    pub show_timestamps: bool,
    /// Replay: show the CPU of each line's event (`--cpuid`).
    pub show_cpus: bool,
    /// Every format: the probe costs to take out of durations; `None` shows them raw.
    pub probe_costs: Option<ProbeCosts>,
    /// Stacks: folded stacks weighted by calls rather than the text report (`--folded`).
    pub folded: bool,
    /// Summary: p50, p90 and p99 columns (`--percentiles`).
    pub percentiles: bool,
    /// Replay and Chrome: leave out the captured arguments and return values (`--no-args`).
    pub hide_values: bool,
    /// Replay: end each call's first line with its function's source line; chrome: give it in
    /// each call's `B` event (`--srcline`).
    pub show_source_lines: bool,
    /// Stacks: the user stacks unwound at record time (`record --stack`), from the data file.
    pub user_stacks: Option<std::sync::Arc<UserStacks>>,
}

impl ReportOptions {
    fn table_layout<'d>(
        &self,
        table: &FunctionTable,
        distributions: &'d Distributions,
        resolutions: &'d Resolutions,
    ) -> TableLayout<'d> {
        TableLayout {
            sort: self.sort,
            avg_self: self.avg_self,
            percentiles: self.percentiles.then_some(distributions),
            resolutions: Some(resolutions),
            off_cpu: self.off_cpu(table),
        }
    }

    /// What is known of the time off the CPU: all of it recorded (`-E offcpu`), the time
    /// preempted (by default), or none, and taken out of the calls when times are corrected
    /// (`--raw-times` shows them as measured).
    pub fn off_cpu(&self, table: &FunctionTable) -> OffCpu {
        let functions = &table.functions;
        let corrected = self.probe_costs.is_some();
        let all = functions.iter().any(TracedFunction::is_off_cpu);
        match (
            all,
            functions.iter().any(TracedFunction::is_preemption),
            corrected,
        ) {
            (false, false, _) => OffCpu::Unknown,
            (true, _, true) => OffCpu::TakenOut,
            (false, true, true) => OffCpu::PreemptedTakenOut,
            (_, _, false) => OffCpu::Recorded,
        }
    }
}

/// Replays every block of `source` into `sink`, then closes the calls still open at the latest
/// timestamp seen (the data file has no later one to offer).
pub fn replay_source<E, S>(
    source: &mut E,
    mut replayer: Replayer,
    sink: &mut S,
) -> Result<ReportOutcome, ReportError>
where
    E: EventSource + ?Sized,
    S: CallSink,
{
    let mut events = 0u64;
    while let Some(block) = source
        .next_block()
        .map_err(|e| ReportError::Read(Box::new(e)))?
    {
        events += block.len() as u64;
        replayer.push_all(block, sink);
    }
    let end_ns = replayer.stats().last_timestamp_ns;
    let replay = replayer.finish(end_ns, sink);
    Ok(ReportOutcome {
        events: events - replay.value_pieces,
        replay,
        calls: 0,
    })
}

/// Counts the calls on their way to a report.
struct Counted<'s, S> {
    inner: &'s mut S,
    calls: u64,
}

impl<S: CallSink> CallSink for Counted<'_, S> {
    fn call_finished(&mut self, call: &FinishedCall, stack: &[FunctionId]) {
        self.calls += 1;
        self.inner.call_finished(call, stack);
    }

    fn call_entered(&mut self, entry: &CallEntry, stack: &[FunctionId]) {
        self.inner.call_entered(entry, stack);
    }

    fn process_execed(&mut self, note: &Event) {
        self.inner.process_execed(note);
    }
}

/// [`replay_source`] through `filter`, with the probe costs taken out when `probe_costs` has
/// them, counting the calls that get through: the filtering layer is only put in when it hides
/// something, so unfiltered reports pay nothing for it.
pub fn replay_filtered<E, S>(
    source: &mut E,
    table: &FunctionTable,
    filter: &FilterSpec,
    probe_costs: Option<&ProbeCosts>,
    sink: &mut S,
) -> Result<ReportOutcome, ReportError>
where
    E: EventSource + ?Sized,
    S: CallSink,
{
    let mut replayer = Replayer::for_table(table);
    if let Some(costs) = probe_costs {
        replayer.correct_probe_costs(table, costs);
    }
    let mut counted = Counted {
        inner: sink,
        calls: 0,
    };
    let outcome = if filter.shows_everything() {
        replay_source(source, replayer, &mut counted)
    } else {
        replay_source(
            source,
            replayer,
            &mut FilteredSink::new(filter, table, &mut counted),
        )
    }?;
    Ok(ReportOutcome {
        calls: counted.calls,
        ..outcome
    })
}

/// [`replay_filtered`] into `sink`, and into `spread` too when it is wanted.
fn replay_spread<E, S>(
    source: &mut E,
    table: &FunctionTable,
    filter: &FilterSpec,
    probe_costs: Option<&ProbeCosts>,
    sink: &mut S,
    spread: Option<&mut Distributions>,
) -> Result<ReportOutcome, ReportError>
where
    E: EventSource + ?Sized,
    S: CallSink,
{
    match spread {
        Some(spread) => {
            replay_filtered(source, table, filter, probe_costs, &mut Both(sink, spread))
        }
        None => replay_filtered(source, table, filter, probe_costs, sink),
    }
}

/// What one pass over the events found: their number and the threads they ran on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadScan {
    pub events: u64,
    /// Thread ids, ascending.
    pub tids: Vec<u32>,
    /// The processes of those threads, ascending.
    pub pids: Vec<u32>,
}

/// Reads every event of `source` once, counting events and the threads that `filter`'s
/// `--tid-filter` lets through.
pub fn scan_threads<E>(source: &mut E, filter: &FilterSpec) -> Result<ThreadScan, ReportError>
where
    E: EventSource + ?Sized,
{
    let mut seen: FastHashMap<u32, u32> = FastHashMap::default();
    let mut events = 0u64;
    let mut last_tid = None;
    while let Some(block) = source
        .next_block()
        .map_err(|e| ReportError::Read(Box::new(e)))?
    {
        events += block.len() as u64;
        for event in block {
            if event.function == Event::VALUES {
                events -= 1;
                continue;
            }
            // Events come in runs from one thread: skip the lookup within a run.
            let tid = event.tid();
            if last_tid != Some(tid) {
                last_tid = Some(tid);
                if filter.shows_thread(tid) {
                    seen.insert(tid, event.pid);
                }
            }
        }
    }
    let mut pids: Vec<u32> = seen.values().copied().collect();
    pids.sort_unstable();
    pids.dedup();
    let mut tids: Vec<u32> = seen.into_keys().collect();
    tids.sort_unstable();
    Ok(ThreadScan { events, tids, pids })
}

/// Replays `source` against `table` and writes the report in `format` to `out`; when no call
/// gets through, the summary and the call tree write nothing (the caller says why). `info` is asked
/// for what the data file says: Chrome traces ask before the events are read (and use only the
/// metadata then: command, pid, start), and every format that shows totals asks again after,
/// because a data file keeps its totals at the end.
pub fn write_report<E>(
    format: Format,
    options: &ReportOptions,
    info: impl Fn(&E) -> TraceInfo,
    table: &FunctionTable,
    source: &mut E,
    out: &mut dyn Write,
) -> Result<ReportOutcome, ReportError>
where
    E: EventSource + ?Sized,
{
    let function_count = table.functions.len();
    let filter = &options.filter;
    let costs = options.probe_costs.as_ref();
    let resolutions = || Resolutions::new(table, costs);
    match format {
        Format::Summary if options.per_thread => {
            let mut summaries = GroupedSummaries::new(Grouping::Thread, function_count);
            let mut spread = Distributions::new(Some(Grouping::Thread));
            let wanted = options.percentiles.then_some(&mut spread);
            let outcome = replay_spread(source, table, filter, costs, &mut summaries, wanted)?;
            let lost = info(source).lost_by_thread;
            if outcome.calls > 0 {
                let resolutions = resolutions();
                let layout = options.table_layout(table, &spread, &resolutions);
                summaries.write_text(table, &outcome.replay, &lost, layout, out)?;
            }
            Ok(outcome)
        }
        Format::Summary => {
            let mut summary = Summary::new(function_count);
            let mut spread = Distributions::new(None);
            let wanted = options.percentiles.then_some(&mut spread);
            let outcome = replay_spread(source, table, filter, costs, &mut summary, wanted)?;
            if outcome.calls > 0 {
                let resolutions = resolutions();
                let layout = options.table_layout(table, &spread, &resolutions);
                summary.write_text(table, &outcome.replay, layout, out)?;
            }
            Ok(outcome)
        }
        Format::Json => {
            let mut processes = GroupedSummaries::new(Grouping::Process, function_count);
            let mut spread = Distributions::new(Some(Grouping::Process));
            let sink = &mut Both(&mut processes, &mut spread);
            let outcome = replay_filtered(source, table, filter, costs, sink)?;
            let resolutions = &resolutions();
            let info = &info(source);
            json::write_json(info, table, &processes, &spread, resolutions, options, out)?;
            Ok(outcome)
        }
        Format::Histogram => {
            let mut spread = Distributions::new(Some(Grouping::Process));
            let outcome = replay_filtered(source, table, filter, costs, &mut spread)?;
            spread.write_histograms(table, &resolutions(), out)?;
            Ok(outcome)
        }
        Format::FlameGraph => {
            let mut stacks = FoldedStacks::new(options.weight);
            let outcome = replay_filtered(source, table, filter, costs, &mut stacks)?;
            stacks.write_folded(table, out)?;
            Ok(outcome)
        }
        Format::Svg => {
            let mut stacks = FoldedStacks::new(options.weight);
            let outcome = replay_filtered(source, table, filter, costs, &mut stacks)?;
            let lines = stacks.lines(table);
            svg::write_svg(&info(source).command, options.weight.unit(), &lines, out)?;
            Ok(outcome)
        }
        Format::Replay => {
            let columns = Columns {
                process_ids: options.show_process_ids,
                thread_ids: options.show_thread_ids,
                timestamps: options.show_timestamps,
                cpus: options.show_cpus,
            };
            let mut printer = TreePrinter::new(table, columns, &mut *out)?;
            if options.hide_values {
                printer.hide_values();
            }
            if options.show_source_lines {
                printer.show_source_lines();
            }
            printer.show_bounds(resolutions());
            let outcome = replay_filtered(source, table, filter, costs, &mut printer)?;
            printer.finish(&outcome.replay)?;
            Ok(outcome)
        }
        Format::Chrome => {
            let mut trace = ChromeTrace::new(table, &info(source), &mut *out)?;
            if options.hide_values {
                trace.hide_values();
            }
            if options.show_source_lines {
                trace.show_source_lines(table);
            }
            let outcome = replay_filtered(source, table, filter, costs, &mut trace)?;
            trace.finish(&info(source), &outcome.replay)?;
            Ok(outcome)
        }
        Format::Stacks => {
            stacks::check_selection(format, filter, table)?;
            let mut paths = CallPaths::new(filter, table);
            if let Some(stacks) = &options.user_stacks {
                paths.add_user_stacks(stacks.clone());
            }
            let replay_filter = stacks::without_function_globs(filter);
            let outcome = replay_filtered(source, table, &replay_filter, costs, &mut paths)?;
            if options.folded {
                paths.write_folded(table, out)?;
            } else {
                paths.write_text(table, out)?;
            }
            // The callers' calls went through too; only those shown count for the warning
            // that nothing was.
            let calls = paths.shown_calls();
            Ok(ReportOutcome { calls, ..outcome })
        }
        Format::Dot => {
            let mut graph = CallGraph::new(function_count);
            let outcome = replay_filtered(source, table, filter, costs, &mut graph)?;
            graph.write_dot(table, &info(source).command, out)?;
            Ok(outcome)
        }
        Format::Graph => {
            stacks::check_selection(format, filter, table)?;
            let mut graphs = CalleeGraphs::new(filter, table);
            let replay_filter = stacks::without_function_globs(filter);
            let outcome = replay_filtered(source, table, &replay_filter, costs, &mut graphs)?;
            graphs.write_text(table, out)?;
            let calls = graphs.shown_calls();
            Ok(ReportOutcome { calls, ..outcome })
        }
    }
}

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;
