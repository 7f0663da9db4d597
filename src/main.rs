//! `utrace`: argument parsing and dispatch; the work is done in the library.

mod cli;

use std::process::ExitCode;

use anyhow::Result;

use cli::{Command, LiveArgs, RecordArgs};
use utrace::live::LiveOptions;
use utrace::record::{self, RecordOutcome};
use utrace::report::tree::Columns;
use utrace::{info, live, report};

fn main() -> ExitCode {
    let cli = cli::parse();
    utrace::diagnostics::init(cli.command.debug_level());
    let result = match cli.command {
        Command::Record(args) => run_record(args),
        Command::Live(args) => run_live(args),
        Command::Report(args) => args.request().and_then(report::run).map(|()| 0),
        Command::Info(args) if args.list_usdt.is_some() => {
            info::list_usdt(args.list_usdt.as_deref().expect("checked")).map(|()| 0)
        }
        Command::Guardian(args) => record::guardian::watch(&args.duties()).map(|()| 0),
        Command::ReleaseLinks { groups } => utrace::probe::release_handed_links(&groups)
            .map(|()| 0)
            .map_err(anyhow::Error::from),
        Command::Info(args) => {
            let symbols = args.symbol_lookup();
            info::run(&args.input, args.damage.on_damage(), symbols.as_ref()).map(|()| 0)
        }
    };
    match result {
        Ok(code) => ExitCode::from(code),
        // The reader went away (`utrace report --format=replay | head`): nothing is wrong.
        Err(error) if is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) if is_usage_error(&error) => {
            eprintln!("utrace: error: {error:#}");
            ExitCode::from(2)
        }
        Err(error) => {
            eprintln!("utrace: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// A flag's value that does not parse: the exit code of clap's own usage errors.
fn is_usage_error(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause.is::<utrace::plan::ValueRequestError>()
            || cause.is::<utrace::filter::FilterError>()
            || cause.is::<utrace::plan::EventRequestError>()
    })
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
    let outcome = record::record(&args.options()?)?;
    Ok(exit_code(&outcome))
}

/// Prints the call tree live, and exits as the traced command did.
fn run_live(args: LiveArgs) -> Result<u8> {
    let outcome = live::live(LiveOptions {
        trace: args.trace.options()?,
        output: args.output,
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
