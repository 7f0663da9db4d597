//! `utrace`: argument parsing and dispatch; the work is done in the library.

mod cli;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::process::ExitCode;

use anyhow::{Context, Result};
use cli::{Command, RecordArgs, ReportArgs};
use utrace::data::{DataReader, Statistics};
use utrace::record::{self, split_command, RecordOptions};
use utrace::report::{write_report, TraceInfo};

fn main() -> ExitCode {
    let cli = cli::parse();
    let result = match cli.command {
        Command::Record(args) => run_record(args),
        Command::Report(args) => run_report(args).map(|()| 0),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("utrace: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Records, and exits as the traced command did.
fn run_record(args: RecordArgs) -> Result<u8> {
    let command = match args.command {
        Some(line) => split_command(&line)?,
        None => args.args,
    };
    let buffer_bytes = record::ring_buffer_size(args.buffer_size)?;
    let outcome = record::record(&RecordOptions {
        command,
        output: args.output,
        buffer_bytes,
        debug: args.debug,
    })?;
    // Stopped by a second signal before the command ended: the shell's code for an interrupt.
    let code = outcome
        .exit_status
        .map_or(128 + libc::SIGINT, |status| status.code());
    Ok(u8::try_from(code).unwrap_or(u8::MAX))
}

fn run_report(args: ReportArgs) -> Result<()> {
    let mut reader = DataReader::open(&args.input)?;
    // The table is borrowed while the reader streams its events, so it is taken out first.
    let table = reader.functions().clone();
    let mut out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(BufWriter::new(
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(BufWriter::new(std::io::stdout().lock())),
    };
    let outcome = write_report(args.format, trace_info, &table, &mut reader, &mut out)
        .with_context(|| format!("{}", args.input.display()))?;
    out.flush().context("cannot write the report")?;
    if reader.cut_short() {
        eprintln!(
            "utrace: warning: {} was cut short (the recorder did not finish): {} events read up to its last complete block",
            args.input.display(),
            outcome.events
        );
    }
    Ok(())
}

/// The header of a report, from the data file once its events have been read.
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
        duration_ns: statistics.duration_ns,
        events: statistics.events,
        lost_events: statistics.lost_events,
    }
}
