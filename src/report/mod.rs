//! Reports: each consumes the finished calls of the replayer ([`crate::replay`]) and writes one
//! format. One file per report; [`write_report`] is the one entry point the CLI calls.
//!
//! The events come from an [`EventSource`], which the `utrace.data` reader implements: blocks
//! are borrowed from the reader one at a time, so reports stream a trace of any length.

pub mod flame_graph;
pub mod json;
pub mod summary;
pub mod svg;

use std::fmt;
use std::io::{self, Write};
use std::marker::PhantomData;
use std::str::FromStr;

use thiserror::Error;

use crate::event::Event;
use crate::plan::FunctionTable;
use crate::replay::{CallSink, ReplayStats, Replayer};

use flame_graph::FoldedStacks;
use summary::Summary;

/// What the data file says about the recording, for reports that show it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceInfo {
    /// The recorded command line.
    pub command: String,
    pub pid: u32,
    /// How long the recording lasted.
    pub duration_ns: u64,
    /// Events recorded.
    pub events: u64,
    /// Events lost because the ring buffer was full.
    pub lost_events: u64,
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
}

impl Format {
    pub const ALL: [Format; 4] = [
        Format::Summary,
        Format::FlameGraph,
        Format::Svg,
        Format::Json,
    ];

    /// The name the CLI uses.
    pub fn name(self) -> &'static str {
        match self {
            Format::Summary => "summary",
            Format::FlameGraph => "flame-graph",
            Format::Svg => "svg",
            Format::Json => "json",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A report format name that is not one of [`Format::ALL`].
#[derive(Debug, Error, PartialEq, Eq)]
#[error("unknown report format `{0}`: use one of summary, flame-graph, svg, json")]
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

/// Blocks of events in time order per thread, lent one at a time (a reader returns a slice of
/// its own buffer, which is why this is not an [`Iterator`]).
pub trait EventSource {
    type Error: std::error::Error + Send + Sync + 'static;

    /// The next block, or `None` at the end.
    fn next_block(&mut self) -> Result<Option<&[Event]>, Self::Error>;
}

/// Blocks already in memory (tests, live mode's batches) as an [`EventSource`].
pub struct IterBlocks<'a, I> {
    blocks: I,
    // Ties `'a` to the source, so a block lent by `next_block` is known to outlive the borrow.
    _events: PhantomData<&'a [Event]>,
}

impl<'a, I: Iterator<Item = &'a [Event]>> IterBlocks<'a, I> {
    pub fn new(blocks: impl IntoIterator<IntoIter = I>) -> IterBlocks<'a, I> {
        IterBlocks {
            blocks: blocks.into_iter(),
            _events: PhantomData,
        }
    }
}

impl<'a, I: Iterator<Item = &'a [Event]>> EventSource for IterBlocks<'a, I> {
    type Error = std::convert::Infallible;

    fn next_block(&mut self) -> Result<Option<&[Event]>, Self::Error> {
        Ok(self.blocks.next())
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
}

/// What replaying the events for a report found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportOutcome {
    /// Events read from the source (including ignored ones).
    pub events: u64,
    pub replay: ReplayStats,
}

/// Replays every block of `source` into `sink`, then closes the calls still open at the latest
/// timestamp seen (the data file has no later one to offer).
pub fn replay_source<E, S>(
    source: &mut E,
    function_count: usize,
    sink: &mut S,
) -> Result<ReportOutcome, ReportError>
where
    E: EventSource + ?Sized,
    S: CallSink,
{
    let mut replayer = Replayer::new(function_count);
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
    Ok(ReportOutcome { events, replay })
}

/// Replays `source` against `table` and writes the report in `format` to `out`. `info` is asked
/// for once every block has been read, because a data file keeps its totals at the end.
pub fn write_report<E>(
    format: Format,
    info: impl FnOnce(&E) -> TraceInfo,
    table: &FunctionTable,
    source: &mut E,
    out: &mut dyn Write,
) -> Result<ReportOutcome, ReportError>
where
    E: EventSource + ?Sized,
{
    let function_count = table.functions.len();
    match format {
        Format::Summary => {
            let mut summary = Summary::new(function_count);
            let outcome = replay_source(source, function_count, &mut summary)?;
            summary.write_text(table, &outcome.replay, out)?;
            Ok(outcome)
        }
        Format::Json => {
            let mut summary = Summary::new(function_count);
            let outcome = replay_source(source, function_count, &mut summary)?;
            json::write_json(&info(source), table, &summary, out)?;
            Ok(outcome)
        }
        Format::FlameGraph => {
            let mut stacks = FoldedStacks::new();
            let outcome = replay_source(source, function_count, &mut stacks)?;
            stacks.write_folded(table, out)?;
            Ok(outcome)
        }
        Format::Svg => {
            let mut stacks = FoldedStacks::new();
            let outcome = replay_source(source, function_count, &mut stacks)?;
            svg::write_svg(&info(source).command, &stacks.lines(table), out)?;
            Ok(outcome)
        }
    }
}

#[cfg(test)]
mod tests;
