//! `utrace`: argument parsing and dispatch; the work is done in the library.

mod cli;

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Stderr, Write};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use cli::{Command, InfoArgs, LiveArgs, RecordArgs, ReportArgs, TraceArgs};
use utrace::data::{DataReader, Statistics};
use utrace::elf::SitePolicy;
use utrace::info::DataFileInfo;
use utrace::plan::{LibraryPatterns, PltLibraries};
use utrace::record::{
    self, split_command, ChildSetup, LiveOptions, RecordOptions, RecordOutcome, TargetSpec,
    TraceOptions, UserIds,
};
use utrace::report::flame_graph::Weight;
use utrace::report::progress::{ProgressBar, WithProgress};
use utrace::report::summary::SortKey;
use utrace::report::tree::Columns;
use utrace::report::{scan_threads, write_report, Format, ReportOptions, ThreadScan, TraceInfo};

fn main() -> ExitCode {
    let cli = cli::parse();
    utrace::diagnostics::init(cli.command.debug_level());
    let result = match cli.command {
        Command::Record(args) => run_record(args),
        Command::Live(args) => run_live(args),
        Command::Report(args) => run_report(args).map(|()| 0),
        Command::Info(args) => run_info(args).map(|()| 0),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        // The reader went away (`utrace report --format=replay | head`): nothing is wrong.
        Err(error) if is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("utrace: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Records, and exits as the traced command did.
fn run_record(args: RecordArgs) -> Result<u8> {
    let outcome = record::record(&RecordOptions {
        trace: trace_options(args.trace)?,
        output: args.output,
    })?;
    Ok(exit_code(&outcome))
}

/// Prints the call tree live, and exits as the traced command did.
fn run_live(args: LiveArgs) -> Result<u8> {
    let out: Box<dyn Write + Send> = match &args.output {
        Some(path) => Box::new(
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        ),
        None => Box::new(std::io::stderr()),
    };
    let outcome = record::live(LiveOptions {
        trace: trace_options(args.trace)?,
        out,
        columns: Columns {
            process_ids: false,
            thread_ids: args.tid,
            timestamps: args.timestamp,
            cpus: args.cpuid,
        },
        flat: args.flat,
        raw_times: args.raw_times,
    })?;
    Ok(exit_code(&outcome))
}

fn trace_options(args: TraceArgs) -> Result<TraceOptions> {
    let target = match (args.pid, args.command) {
        (Some(pid), _) => TargetSpec::Pid(pid),
        (None, Some(line)) => TargetSpec::Command(split_command(&line)?),
        (None, None) => TargetSpec::Command(args.args),
    };
    let user = args.user.as_deref().map(UserIds::lookup).transpose()?;
    Ok(TraceOptions {
        target,
        buffer_bytes: record::ring_buffer_size(args.buffer_size)?,
        duration: args.duration,
        nest_libs: LibraryPatterns::parse("--nest-lib", &args.nest_lib)?,
        sites: if args.probe_at_entry {
            SitePolicy::Entry
        } else {
            SitePolicy::Best
        },
        plt_libraries: PltLibraries {
            only: LibraryPatterns::parse("--lib", &args.lib)?,
            except: LibraryPatterns::parse("--no-lib", &args.no_lib)?,
            name_by_library: args.libname,
        },
        child_setup: ChildSetup {
            user,
            no_randomize_addr: args.no_randomize_addr,
        },
        filter: args.filter.spec()?,
        exit_probes: args.exit_probes,
        follow: args.follow,
    })
}

/// utrace ends as the traced command did; a second signal ends it as that signal would.
fn exit_code(outcome: &RecordOutcome) -> u8 {
    let code = match (outcome.exit_status, outcome.interrupted_by) {
        (Some(status), _) => status.code(),
        // Stopped by a second signal before the command ended: the shell's code for it.
        (None, Some(signal)) => 128 + signal,
        (None, None) => 0,
    };
    u8::try_from(code).unwrap_or(u8::MAX)
}

fn run_report(args: ReportArgs) -> Result<()> {
    let mut options = report_options(&args)?;
    let reader = DataReader::open(&args.input)?;
    if !args.raw_times {
        options.probe_costs = reader.metadata().probe_costs.clone();
    }
    // The table is borrowed while the reader streams its events, so it is taken out first.
    let table = reader.functions().clone();
    // A report written to the terminal as it is read would be torn by the bar's redraws.
    let bar_wanted = !(args.output.is_none()
        && args.format.writes_while_reading()
        && std::io::stdout().is_terminal());
    let mut source = with_progress(&args, bar_wanted, "reading", reader);
    let mut out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(BufWriter::new(
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(BufWriter::new(std::io::stdout().lock())),
    };
    let outcome = write_report(
        args.format,
        &options,
        |source: &WithProgress<DataReader, _>| trace_info(source.source()),
        &table,
        &mut source,
        &mut out,
    )
    .with_context(|| format!("{}", args.input.display()))?;
    out.flush().context("cannot write the report")?;
    if source.source().cut_short() {
        log::warn!(
            "{} was cut short (the recorder did not finish): {} events read up to its last complete block",
            args.input.display(),
            outcome.events
        );
    }
    Ok(())
}

/// `reader` moving a progress bar for `report` as it reads, if `wanted`.
fn with_progress(
    args: &ReportArgs,
    wanted: bool,
    label: &'static str,
    reader: DataReader,
) -> WithProgress<DataReader, Stderr> {
    let file_len = std::fs::metadata(&args.input).map_or(0, |m| m.len());
    let bar = ProgressBar::on_stderr(wanted, label, file_len);
    WithProgress::new(reader, DataReader::bytes_read, bar)
}

/// The options of `report`, checked against its format. The call tree's thread column needs the
/// threads before the first line, which costs a first pass over the events.
fn report_options(args: &ReportArgs) -> Result<ReportOptions> {
    let format = args.format;
    if (args.per_thread || args.avg_self) && format != Format::Summary {
        bail!("--per-thread and --avg-self apply to --format=summary, not {format}");
    }
    if args.sort != SortKey::Total && !matches!(format, Format::Summary | Format::Json) {
        bail!("--sort applies to --format=summary and json, not {format}");
    }
    if (args.timestamp || args.cpuid) && format != Format::Replay {
        bail!("--timestamp and --cpuid apply to --format=replay, not {format}");
    }
    if args.weight != Weight::Time && !matches!(format, Format::FlameGraph | Format::Svg) {
        bail!("--weight applies to --format=flame-graph and svg, not {format}");
    }
    let filter = args.filter.spec()?;
    let scan = if format == Format::Replay {
        let reader = DataReader::open(&args.input)?;
        scan_threads(
            &mut with_progress(args, true, "finding threads", reader),
            &filter,
        )
        .with_context(|| format!("{}", args.input.display()))?
    } else {
        ThreadScan::default()
    };
    Ok(ReportOptions {
        sort: args.sort,
        per_thread: args.per_thread,
        avg_self: args.avg_self,
        weight: args.weight,
        filter,
        show_thread_ids: scan.tids.len() > 1,
        show_process_ids: scan.pids.len() > 1,
        show_timestamps: args.timestamp,
        show_cpus: args.cpuid,
        probe_costs: None,
    })
}

fn run_info(args: InfoArgs) -> Result<()> {
    let info =
        DataFileInfo::read(&args.input).with_context(|| format!("{}", args.input.display()))?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    info.write_text(&mut out)
        .and_then(|()| out.flush())
        .context("cannot write to standard output")
}

/// The header of a report, from the data file (the totals once its events have been read).
fn trace_info(reader: &DataReader) -> TraceInfo {
    let metadata = reader.metadata();
    // A file cut short has no statistics: what was read is all that is known.
    let statistics = reader.statistics().cloned().unwrap_or(Statistics {
        events: reader.events_read(),
        ..Statistics::default()
    });
    TraceInfo {
        command: metadata.command_line(),
        pid: metadata.pid,
        start_monotonic_ns: metadata.start_monotonic_ns,
        duration_ns: statistics.duration_ns,
        events: statistics.events,
        lost_events: statistics.lost_events,
        lost_by_thread: statistics.lost_by_thread,
    }
}
