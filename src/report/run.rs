//! `utrace report`: a data file in, one report out. The binary maps its flags to a
//! [`ReportRequest`] and calls [`run`].

use std::io::{BufWriter, IsTerminal, Stderr, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::diff::{self, DiffSide};
use super::no_calls::NoCalls;
use super::output::PendingFile;
use super::progress::{ProgressBar, WithProgress};
use super::summary::Summary;
use super::{
    replay_filtered, scan_threads, write_report, Format, ReportError, ReportOptions, ReportOutcome,
    ThreadScan, TraceInfo,
};
use crate::data::{DataReader, OnDamage, Statistics};
use crate::filter::FilterSpec;
use crate::probe_cost::Resolutions;
use crate::table::FunctionTable;

/// What `utrace report` was asked for.
pub struct ReportRequest {
    /// The data file.
    pub input: PathBuf,
    /// Where the report goes: standard output when `None`.
    pub output: Option<PathBuf>,
    pub format: Format,
    /// The format's options; the thread and process columns of the call tree are decided here,
    /// from the file.
    pub options: ReportOptions,
    /// Leave the recorded probe costs in the durations.
    pub raw_times: bool,
    /// Skip a damaged chunk with a warning, or fail (`--strict`).
    pub on_damage: OnDamage,
    /// Compare with this recording, the base (`--diff FILE`): summary and json only.
    pub diff: Option<PathBuf>,
}

/// Writes the report `request` asks for, with a progress bar on a terminal while the file is read.
pub fn run(request: ReportRequest) -> Result<()> {
    if let Some(base) = &request.diff {
        return run_diff(&request, base);
    }
    let mut options = request.options;
    // The call tree's thread column needs the threads before its first line: a first pass.
    if request.format == Format::Replay {
        let scan = find_threads(&request.input, request.on_damage, &options)?;
        options.show_thread_ids = scan.tids.len() > 1;
        options.show_process_ids = scan.pids.len() > 1;
    }
    let reader = DataReader::open(&request.input)?.on_damage(request.on_damage);
    if !request.raw_times {
        options.probe_costs = reader.metadata().probe_costs.clone();
    }
    options.user_stacks = reader.user_stacks().cloned().map(std::sync::Arc::new);
    // The table is borrowed while the reader streams its events, so it is taken out first.
    let table = reader.functions().clone();
    // A report written to the terminal as it is read would be torn by the bar's redraws.
    let bar_wanted = !(request.output.is_none()
        && request.format.writes_while_reading()
        && std::io::stdout().is_terminal());
    let mut source = with_progress(&request.input, bar_wanted, "reading", reader);
    let mut outcome = ReportOutcome::default();
    write_output(request.output.as_deref(), &request.input, |out| {
        outcome = write_report(
            request.format,
            &options,
            |source: &WithProgress<DataReader, _>| trace_info(source.source()),
            &table,
            &mut source,
            out,
        )?;
        Ok(())
    })?;
    warn_after_report(&request.input, source.source(), &options.filter, &outcome);
    Ok(())
}

/// One recording replayed into a summary, for a diff.
struct Summarized {
    table: FunctionTable,
    command: String,
    summary: Summary,
    resolutions: Resolutions,
}

impl Summarized {
    fn side<'a>(&'a self, file: &'a str) -> DiffSide<'a> {
        DiffSide {
            file,
            command: &self.command,
            table: &self.table,
            summary: &self.summary,
            resolutions: &self.resolutions,
        }
    }
}

/// `report --diff BASE`: the input against `base`, with a warning when they traced different
/// programs.
fn run_diff(request: &ReportRequest, base: &Path) -> Result<()> {
    let new_file = request.input.display().to_string();
    let base_file = base.display().to_string();
    let new = summarize(&request.input, request)?;
    let base = summarize(base, request)?;
    let (base_side, new_side) = (base.side(&base_file), new.side(&new_file));
    if diff::different_programs(&base_side, &new_side) {
        log::warn!(
            "{base_file} recorded `{}` and {new_file} `{}`: another program, so the functions \
             are matched by name only",
            base.command,
            new.command
        );
    }
    write_output(request.output.as_deref(), &request.input, |out| {
        match request.format {
            Format::Json => diff::write_json(&base_side, &new_side, out),
            _ => diff::write_text(&base_side, &new_side, out),
        }
        .map_err(ReportError::from)
    })
}

/// Replays the recording at `input` into a summary, with the request's filters and, unless it
/// asks for raw times, the recording's own probe costs.
fn summarize(input: &Path, request: &ReportRequest) -> Result<Summarized> {
    let reader = DataReader::open(input)?.on_damage(request.on_damage);
    let costs = match request.raw_times {
        true => None,
        false => reader.metadata().probe_costs.clone(),
    };
    let table = reader.functions().clone();
    let command = reader.metadata().command_line();
    let mut source = with_progress(input, true, "reading", reader);
    let mut summary = Summary::new(table.functions.len());
    let filter = &request.options.filter;
    let outcome = replay_filtered(&mut source, &table, filter, costs.as_ref(), &mut summary)
        .map_err(|error| name_the_file(error, input, None))?;
    warn_after_report(input, source.source(), filter, &outcome);
    let resolutions = Resolutions::new(&table, costs.as_ref());
    Ok(Summarized {
        table,
        command,
        summary,
        resolutions,
    })
}

/// Runs `write` on the report file at `output`, or on standard output. A report file is put in
/// place once whole: a report that fails leaves none.
fn write_output(
    output: Option<&Path>,
    input: &Path,
    write: impl FnOnce(&mut dyn Write) -> Result<(), ReportError>,
) -> Result<()> {
    let mut file = match output {
        Some(path) => Some(
            PendingFile::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        ),
        None => None,
    };
    let mut stdout = BufWriter::new(std::io::stdout().lock());
    let out: &mut dyn Write = match &mut file {
        Some(file) => file,
        None => &mut stdout,
    };
    write(out).map_err(|error| name_the_file(error, input, output))?;
    match file {
        Some(file) => file.commit(),
        None => stdout.flush(),
    }
    .map_err(|error| name_the_file(error.into(), input, output))
}

/// The warnings a report ends with: the damage skipped, why no call was shown if none was, and
/// that the file was cut short.
fn warn_after_report(
    input: &Path,
    reader: &DataReader,
    filter: &FilterSpec,
    outcome: &ReportOutcome,
) {
    reader.warn_about_damage();
    let events = reader.events_read();
    if outcome.calls == 0 {
        let no_calls = NoCalls {
            file: input,
            events,
            damaged_chunks: reader.damaged_chunks().len(),
            cut_short: reader.cut_short(),
            lost_events: reader.statistics().map_or(0, |s| s.lost_events),
            table: reader.functions(),
            filter,
            replay: &outcome.replay,
        };
        log::warn!("no calls were recorded: {no_calls}");
    }
    // Cut short before its first events, the reason above says it.
    if reader.cut_short() && !(outcome.calls == 0 && events == 0) {
        log::warn!(
            "{} was cut short (the recorder did not finish): {events} events read up to its last \
             complete block",
            input.display(),
        );
    }
}

/// The threads and processes of the file at `input` that the filter shows, in a first pass
/// (which leaves the warnings about damage to the second).
fn find_threads(input: &Path, on_damage: OnDamage, options: &ReportOptions) -> Result<ThreadScan> {
    let reader = DataReader::open(input)?.on_damage(on_damage);
    let mut source = with_progress(input, true, "finding threads", reader);
    scan_threads(&mut source, &options.filter).map_err(|error| name_the_file(error, input, None))
}

/// `error` with the name of the file it is about, once: the reader's errors name the data file
/// already; a write error is about the report file (nothing to add on standard output); the
/// others are about the data file.
fn name_the_file(error: ReportError, input: &Path, output: Option<&Path>) -> anyhow::Error {
    let file = match (&error, output) {
        (ReportError::Read(_), _) | (ReportError::Write(_), None) => None,
        (ReportError::Write(_), Some(output)) => Some(output),
        (ReportError::NothingToDraw | ReportError::TooManyFunctions(_), _) => Some(input),
    };
    match file {
        Some(file) => anyhow::Error::new(error).context(file.display().to_string()),
        None => error.into(),
    }
}

/// `reader` moving a progress bar as it reads, if `wanted`.
fn with_progress(
    input: &Path,
    wanted: bool,
    label: &'static str,
    reader: DataReader,
) -> WithProgress<DataReader, Stderr> {
    let file_len = std::fs::metadata(input).map_or(0, |m| m.len());
    let bar = ProgressBar::on_stderr(wanted, label, file_len);
    WithProgress::new(reader, DataReader::bytes_read, bar)
}

/// The header of a report, from the data file (the totals once its events have been read).
fn trace_info(reader: &DataReader) -> TraceInfo {
    let metadata = reader.metadata();
    // A file cut short has no statistics: what was read is all that is known.
    let statistics = reader.statistics().cloned().unwrap_or(Statistics {
        events: reader.events_read(),
        ..Statistics::default()
    });
    // The statistics count the events of damaged chunks, which no report shows.
    let damaged_chunks = reader.damaged_chunks().len() as u64;
    let events = if damaged_chunks > 0 {
        reader.events_read()
    } else {
        statistics.events
    };
    TraceInfo {
        command: metadata.command_line(),
        pid: metadata.pid,
        start_monotonic_ns: metadata.start_monotonic_ns,
        duration_ns: statistics.duration_ns,
        events,
        lost_events: statistics.lost_events,
        lost_by_thread: statistics.lost_by_thread,
        damaged_chunks,
    }
}
