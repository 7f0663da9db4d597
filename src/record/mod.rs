//! Recording: start the target, load and attach BPF, drain the ring buffer into `utrace.data`.

pub mod calibrate;
mod call_events;
mod dispatch;
mod follow;
pub mod guardian;
mod ifuncs;
#[cfg(test)]
pub(crate) use ifuncs::resolve_own_ifuncs;
mod proc_maps;
mod process;
mod progress;
mod ring;
mod running;
mod seizer;
mod session;
mod signals;
mod stack_writes;
mod target;
mod user;
mod user_stacks;
mod writer;

use std::cell::RefCell;
use std::path::PathBuf;
use std::time::SystemTime;

use anyhow::{Context, Result};

use crate::data::{DataWriter, Metadata, Statistics};
use crate::event::Event;
use crate::filter::{FilterSpec, FilteredSink};
pub use crate::probe::ring_buffer_size;
use crate::probe_cost::ProbeCosts;
use crate::replay::Replayer;
use crate::table::FunctionTable;
use call_events::CallEvents;
pub use process::{split_command, ChildSetup, ExitStatus};
pub use session::{Drain, Session, SessionMode, Stop, TraceOptions};
pub use target::TargetSpec;
pub use user::UserIds;
use writer::{WriterThread, BATCH_EVENTS};

/// What `utrace record` was asked to do.
pub struct RecordOptions {
    pub trace: TraceOptions,
    pub output: PathBuf,
}

/// How a recording ended.
pub struct RecordOutcome {
    /// The traced command's status; `None` for an attached process, or when utrace stopped
    /// before the command ended.
    pub exit_status: Option<ExitStatus>,
    /// The second Ctrl-C or SIGTERM that ended utrace before the command.
    pub interrupted_by: Option<libc::c_int>,
}

impl RecordOutcome {
    pub fn after(stop: Stop, session: &Session) -> Result<RecordOutcome> {
        let (exit_status, interrupted_by) = match stop {
            Stop::Ended(status) => (status, None),
            // The command runs on untraced; utrace still ends with it, as it would have.
            Stop::Asked | Stop::DrainFailed => (session.wait_for_command()?, None),
            Stop::Interrupted(signal) => (None, Some(signal)),
        };
        Ok(RecordOutcome {
            exit_status,
            interrupted_by,
        })
    }
}

/// Traces the target and writes `options.output`.
pub fn record(options: &RecordOptions) -> Result<RecordOutcome> {
    let trace = &options.trace;
    // Measured while the program is planned: both take tens of milliseconds of start-up.
    let calibrating = std::thread::spawn(calibrate::probe_costs);
    let prepared = Session::prepare(trace);
    let calibration = calibrate::joined(calibrating);
    // The target's own problem comes first: it says more than a missing permission.
    let mut session = prepared?;
    let calibration = calibration?;
    // Created before anything is loaded or attached: an output that cannot be written stops
    // utrace while a started command is still held, before it has run at all.
    let writer = DataWriter::create(
        &options.output,
        &metadata(
            session.target.command_line(&trace.target),
            session.target.pid(),
            calibration.costs.clone(),
        ),
        session.table(),
    )
    .context("cannot create the data file (-o FILE chooses another)")?;
    give_to_sudo_user(&options.output);
    let writer = WriterThread::start(writer);

    // With depth, time or thread filters, only the calls they show are written (see call_events.rs).
    let shown = RefCell::new(Vec::new());
    let mut encoder = CallEvents::new(&shown);
    let mut drain = RecordDrain {
        writer: &writer,
        filter: &trace.filter,
        filtered: trace
            .filter
            .filters_events()
            .then(|| FilteredSink::new(&trace.filter, session.table(), &mut encoder)),
        shown: &shown,
        replayer: Replayer::new(session.table().functions.len()),
    };
    let ran = session.run(trace, SessionMode::Record, &mut drain);
    let end = match ran {
        Ok(end) => end,
        Err(error) => {
            // Nothing was recorded: a file without events would only mislead.
            if let Ok(writer) = writer.finish() {
                writer.discard();
            }
            return Err(error);
        }
    };
    drain.finish();

    let stopped = |error| {
        // The probes are gone: the command runs on untraced. Waited for rather than left behind,
        // so it ends before utrace does.
        if end.stop == Stop::DrainFailed {
            let _ = session.wait_for_command();
        }
        anyhow::anyhow!(
            "{error}: recording stopped there; the file reads up to its last complete chunk"
        )
    };
    let mut writer = writer.finish().map_err(stopped)?;
    if let Some(stacks) = &end.user_stacks {
        writer.write_user_stacks(stacks).map_err(stopped)?;
        log::debug!("--stack: {} distinct user stacks", stacks.stacks.len());
        for stack in &stacks.stacks {
            let frames: Vec<String> = stack.frames.iter().map(|f| f.name()).collect();
            log::trace!("--stack: stack {}: {}", stack.id, frames.join(" ← "));
        }
    }
    let (events, bytes) = (writer.events_written(), writer.bytes_written());
    writer
        .finish(&Statistics {
            events,
            lost_events: end.lost_events,
            duration_ns: end.duration.as_nanos() as u64,
            lost_by_thread: end.lost_by_thread.clone(),
        })
        .map_err(stopped)?;

    log::info!(
        "traced {} functions of {} (pid {}): {} events in {:.3} s, {} lost, {} bytes written to {}",
        session.table().functions.len(),
        session.program_name(&trace.target),
        session.target.pid(),
        events,
        end.duration.as_secs_f64(),
        end.lost_events,
        bytes,
        options.output.display()
    );
    session.report_end(&end);
    RecordOutcome::after(end.stop, &session)
}

/// Where a recording's events go: to the writer thread, through the event filters when there
/// are any.
struct RecordDrain<'a> {
    writer: &'a WriterThread,
    filter: &'a FilterSpec,
    filtered: Option<FilteredSink<'a, CallEvents<'a>>>,
    /// What the filtered sink shows, as events.
    shown: &'a RefCell<Vec<Event>>,
    replayer: Replayer,
}

impl RecordDrain<'_> {
    /// Writes what the filters still hold: calls open at the end, entries the time filter held
    /// back.
    fn finish(mut self) {
        if let Some(filtered) = &mut self.filtered {
            let end_ns = self.replayer.stats().last_timestamp_ns;
            self.replayer.finish(end_ns, filtered);
            self.writer.send(self.shown.take());
        }
    }
}

impl Drain for RecordDrain<'_> {
    fn take(&mut self, pending: &mut Vec<Event>, due: bool) -> bool {
        if pending.is_empty() || !(due || pending.len() >= BATCH_EVENTS / 2) {
            return true;
        }
        let kept = match &mut self.filtered {
            Some(filtered) => {
                self.replayer.push_all(pending, filtered);
                pending.clear();
                let mut kept = self.writer.empty_batch();
                kept.append(&mut self.shown.borrow_mut());
                kept
            }
            None => std::mem::replace(pending, self.writer.empty_batch()),
        };
        self.writer.send(kept)
    }

    fn more_functions(&mut self, more: &FunctionTable) -> bool {
        self.replayer.add_functions(more.functions.len());
        if let Some(filtered) = &mut self.filtered {
            filtered.add_functions(self.filter.function_mask(more));
        }
        self.writer.send_more_functions(more.clone())
    }
}

/// Under sudo, the data file belongs to the user who ran sudo, as a file they made themselves
/// would; its mode already follows their umask. Best effort: a file root keeps is still usable.
fn give_to_sudo_user(path: &std::path::Path) {
    let id = |name| std::env::var(name).ok()?.parse::<u32>().ok();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    if let (Some(uid), Some(gid)) = (id("SUDO_UID"), id("SUDO_GID")) {
        if let Err(error) = std::os::unix::fs::chown(path, Some(uid), Some(gid)) {
            log::warn!("cannot give {} to the sudo user: {error}", path.display());
        }
    }
}

fn metadata(command: Vec<String>, pid: u32, probe_costs: Option<ProbeCosts>) -> Metadata {
    let read = |path| {
        std::fs::read_to_string(path)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    Metadata {
        command,
        pid,
        start_monotonic_ns: monotonic_now_ns(),
        start_realtime_ns: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
        hostname: read("/proc/sys/kernel/hostname"),
        kernel: read("/proc/sys/kernel/osrelease"),
        utrace_version: env!("CARGO_PKG_VERSION").to_string(),
        probe_costs,
    }
}

/// CLOCK_MONOTONIC now, the clock of the events' timestamps.
pub fn monotonic_now_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only to `now`; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}
