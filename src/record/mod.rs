//! Recording: start the target, load and attach BPF, drain the ring buffer into `utrace.data`.

pub mod budget;
pub mod calibrate;
mod call_events;
mod dispatch;
mod follow;
pub mod guardian;
mod ifuncs;
#[cfg(test)]
pub(crate) use ifuncs::resolve_own_ifuncs;
mod opened_libraries;
mod proc_maps;
mod process;
mod progress;
mod ring;
mod running;
mod seizer;
mod session;
mod signals;
mod stack_writes;
mod strings;
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
use crate::table::{Detachment, FunctionTable};
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
    /// Stop recording once the file reaches this many bytes (`--max-size`).
    pub max_size: Option<u64>,
}

/// The size past which a file the user set no `--max-size` for gets a warning, once: a
/// recording that has gone on that long was probably not meant to.
const SIZE_WARNING: u64 = 1 << 30;

/// How long the events recorded may take to reach the file before the probes are released.
const SECURE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

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
    let calibrating = calibrate::start(&trace.events.kernel_functions);
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
    // After: an output that cannot be written is the one line said.
    calibration.say_noise();
    give_to_sudo_user(&options.output);
    let writer = WriterThread::start(writer);
    session.set_probe_costs(calibration.costs.clone());

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
        replayer: Replayer::for_table(session.table()),
        size: SizeWatch::new(&options.output, options.max_size),
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
    size: SizeWatch,
}

/// The data file's size as it grows: the warning once it passes a size the user did not ask
/// for, or the end of the recording at `--max-size`.
struct SizeWatch {
    /// The file, for messages.
    path: String,
    limit: Option<u64>,
    /// Past this, the warning comes (with no limit set); `None` once it has come.
    warn_at: Option<u64>,
    full: bool,
}

impl SizeWatch {
    fn new(path: &std::path::Path, limit: Option<u64>) -> SizeWatch {
        // UTRACE_SIZE_WARNING (bytes) lets the tests see the warning without writing a GiB.
        let warn_at = std::env::var("UTRACE_SIZE_WARNING")
            .ok()
            .and_then(|bytes| bytes.parse().ok())
            .unwrap_or(SIZE_WARNING);
        SizeWatch {
            path: path.display().to_string(),
            limit,
            warn_at: limit.is_none().then_some(warn_at),
            full: false,
        }
    }

    /// The file will be about `size` bytes long once what is queued is written.
    fn grew_to(&mut self, size: u64) {
        if let Some(warn_at) = self.warn_at.filter(|&at| size >= at) {
            log::warn!(
                "{} has passed {}: --max-size caps a recording (it then stops cleanly), and \
                 Ctrl-C stops it",
                self.path,
                size_text(warn_at)
            );
            self.warn_at = None;
        }
        if let Some(limit) = self.limit.filter(|&limit| !self.full && size >= limit) {
            log::warn!(
                "{} reached --max-size {}: recording stopped there (a started command runs on, \
                 untraced)",
                self.path,
                size_text(limit)
            );
            self.full = true;
        }
    }
}

/// A size in bytes as a person reads it: `1 GiB`, `512 MiB`, `64 KiB`, `100 bytes`.
fn size_text(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    match UNITS.iter().find(|&&(size, _)| bytes >= size) {
        Some(&(size, unit)) if bytes % size == 0 => format!("{} {unit}", bytes / size),
        Some(&(size, unit)) => format!("{:.1} {unit}", bytes as f64 / size as f64),
        None => format!("{bytes} bytes"),
    }
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
        let sent = self.writer.send(kept);
        self.size.grew_to(self.writer.size_estimate());
        sent
    }

    fn is_full(&self) -> bool {
        self.size.full
    }

    fn secure(&mut self) {
        // Bounded: a program held stopped for the detach waits as long.
        if !self.writer.wait_written(SECURE_PATIENCE) {
            log::debug!("the writer is still behind: the last events go to disk after the detach");
        }
    }

    fn more_functions(&mut self, more: &FunctionTable) -> bool {
        self.replayer.add_functions(more);
        if let Some(filtered) = &mut self.filtered {
            filtered.add_functions(self.filter.function_mask(more));
        }
        self.writer.send_more_functions(more.clone())
    }

    fn functions_detached(&mut self, detached: &[Detachment]) {
        // A writer that failed says so at the end, as for the events.
        let _ = self.writer.send_detachments(detached.to_vec());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_a_person_reads_them() {
        assert_eq!(size_text(1 << 30), "1 GiB");
        assert_eq!(size_text(3 << 19), "1.5 MiB");
        assert_eq!(size_text(64 << 10), "64 KiB");
        assert_eq!(size_text(100), "100 bytes");
    }

    #[test]
    fn the_size_warning_comes_once_and_only_without_a_limit() {
        let mut unlimited = SizeWatch::new(std::path::Path::new("u.data"), None);
        unlimited.warn_at = Some(100);
        unlimited.grew_to(99);
        assert_eq!(unlimited.warn_at, Some(100));
        unlimited.grew_to(100);
        assert_eq!((unlimited.warn_at, unlimited.full), (None, false));
        let mut limited = SizeWatch::new(std::path::Path::new("l.data"), Some(100));
        assert_eq!(limited.warn_at, None);
        limited.grew_to(99);
        assert!(!limited.full);
        limited.grew_to(100);
        assert!(limited.full);
    }
}
