//! Recording: start the target, load and attach BPF, drain the ring buffer into `utrace.data`.

mod attach;
mod probes;
mod proc_maps;
mod process;
mod progress;
mod signals;
mod target;
mod user;
mod writer;

#[allow(clippy::all, unused_imports)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/utrace.skel.rs"));
}

use std::cell::RefCell;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use libbpf_rs::RingBufferBuilder;

use crate::data::{DataWriter, Metadata, Statistics};
use crate::elf::binding::BindingScope;
use crate::event::Event;
use crate::plan::{FunctionTable, LibraryPatterns, PltLibraries};
pub use probes::ring_buffer_size;
use probes::{LoadedProbes, ObjectStorage, ProbeConfig};
pub use process::{split_command, ChildSetup, ExitStatus};
use progress::Progress;
use signals::SignalWatch;
pub use target::TargetSpec;
use target::{SignalAction, Target, TracedFile};
pub use user::UserIds;
use writer::{WriterThread, BATCH_EVENTS};

/// How long the consumer sleeps when the probes have not woken it. Bounds the delay of events
/// at low rates; at high rates the fill-level wake-up comes first.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// A batch is handed to the writer when it is full or this old, so a killed recorder loses at
/// most this much.
const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// What `utrace record` was asked to do.
pub struct RecordOptions {
    pub target: TargetSpec,
    pub output: PathBuf,
    /// Ring buffer size in bytes (rounded up to a power of two).
    pub buffer_bytes: u32,
    /// Stop recording after this long.
    pub duration: Option<Duration>,
    /// Libraries whose own functions are traced too (`--nest-lib`).
    pub nest_libs: LibraryPatterns,
    /// Which PLT calls are traced and how they are named (`--lib`, `--no-lib`, `--libname`).
    pub plt_libraries: PltLibraries,
    /// How the started command runs (`-u`, `--no-randomize-addr`).
    pub child_setup: ChildSetup,
    pub debug: bool,
}

/// How a recording ended.
pub struct RecordOutcome {
    /// The traced command's status; `None` for an attached process, or when utrace stopped
    /// before the command ended.
    pub exit_status: Option<ExitStatus>,
    /// The second Ctrl-C or SIGTERM that ended utrace before the command.
    pub interrupted_by: Option<libc::c_int>,
}

/// Why the recording loop ended.
enum Stop {
    /// The process ended; its status when it was ours.
    Ended(Option<ExitStatus>),
    /// `--duration` passed, or a signal asked to stop.
    Asked,
    /// A second signal (this one): stop without waiting for anything.
    Interrupted(libc::c_int),
    /// The writer failed; its error is reported when it is finished.
    WriterFailed,
}

/// Traces the target and writes `options.output`.
pub fn record(options: &RecordOptions) -> Result<RecordOutcome> {
    probes::show_libbpf_messages(options.debug);
    // Fork (for -c) before any thread exists: the child only waits and execs.
    let (mut target, files, scope) = Target::prepare(
        &options.target,
        &options.child_setup,
        &options.nest_libs,
        &options.plt_libraries,
    )?;
    let table = plan(&files, &options.plt_libraries, &scope)?;
    if options.debug {
        for (index, file) in files.iter().enumerate() {
            let count = table
                .functions
                .iter()
                .filter(|f| f.module as usize == index)
                .count();
            eprintln!("utrace: planned {count} functions in {}", file.path);
        }
    }

    // Created before anything is loaded or attached: an output that cannot be written stops
    // utrace while a started command is still held, before it has run at all.
    let writer = DataWriter::create(
        &options.output,
        &metadata(target.command_line(&options.target), target.pid()),
        &table,
    )
    .context("cannot create the data file (-o FILE chooses another)")?;
    give_to_sudo_user(&options.output);
    let mut storage = ObjectStorage::uninit();
    let open_paths: Vec<PathBuf> = files.iter().map(|f| f.open_path.clone()).collect();
    let probes = LoadedProbes::load(
        &mut storage,
        &ProbeConfig {
            tgid: target.pid(),
            buffer_bytes: options.buffer_bytes,
            wait_for_exec: matches!(target, Target::Started(_)),
        },
    )
    .and_then(|loaded| {
        let attached = loaded.attach(&table, &open_paths, target.pid())?;
        Ok((loaded, attached))
    });
    let (mut loaded, attached) = match probes {
        Ok(probes) => probes,
        Err(error) => {
            // Nothing was recorded: a file without events would only mislead.
            writer.discard();
            return Err(error.into());
        }
    };
    loaded.set_recording(true);
    if options.debug {
        eprintln!(
            "utrace: attached {} entry and return probes with uprobe_multi in {:.3} ms",
            table.functions.len(),
            attached.attach_time.as_secs_f64() * 1e3
        );
    }

    let writer = WriterThread::start(writer);
    signals::install().context("installing signal handlers")?;

    let batch = RefCell::new(writer.empty_batch());
    let mut ring = RingBufferBuilder::new();
    ring.add(loaded.events_map(), |bytes: &[u8]| {
        let mut event = Event::default();
        // A short record cannot come from our programs; skipping it beats stopping the trace.
        if plain::copy_from_bytes(&mut event, bytes).is_ok() {
            batch.borrow_mut().push(event);
        }
        0
    })?;
    let ring = ring.build()?;

    let started = Instant::now();
    target.start()?;
    let mut events: u64 = 0;
    let mut last_flush = Instant::now();
    let mut progress = Progress::new();
    let mut watch = SignalWatch::default();
    let flush = |force: bool, events: &mut u64| -> bool {
        let mut pending = batch.borrow_mut();
        if pending.is_empty() || !(force || pending.len() >= BATCH_EVENTS / 2) {
            return true;
        }
        *events += pending.len() as u64;
        let full = std::mem::replace(&mut *pending, writer.empty_batch());
        writer.send(full)
    };

    let stop = loop {
        // Negative results are EINTR from our own signals; the next round handles them.
        ring.poll_raw(POLL_INTERVAL);
        ring.consume_raw();
        let due = last_flush.elapsed() >= FLUSH_INTERVAL;
        if !flush(due, &mut events) {
            break Stop::WriterFailed;
        }
        if due {
            last_flush = Instant::now();
        }
        progress.update(events + batch.borrow().len() as u64, loaded.lost_events());
        if let Some(status) = target.ended()? {
            break Stop::Ended(status);
        }
        if options
            .duration
            .is_some_and(|limit| started.elapsed() >= limit)
        {
            break Stop::Asked;
        }
        if let Some(received) = watch.take() {
            match (target.on_signal(received), received.count) {
                (SignalAction::Continue, _) => {}
                (SignalAction::Stop, 1) => break Stop::Asked,
                (SignalAction::Stop, _) => break Stop::Interrupted(received.signal),
            }
        }
    };

    loaded.set_recording(false);
    let detach_time = attached.detach();
    ring.consume_raw();
    flush(true, &mut events);
    progress.clear();
    let duration = started.elapsed();
    let lost_events = loaded.lost_events();
    drop(ring);
    let stopped = |error| {
        // The probes are gone: the command runs on untraced. Waited for rather than left behind,
        // so it ends before utrace does.
        if matches!(stop, Stop::WriterFailed) {
            let _ = target.wait();
        }
        anyhow::anyhow!(
            "{error}: recording stopped there; the file reads up to its last complete chunk"
        )
    };
    let writer = writer.finish().map_err(stopped)?;
    let bytes = writer.bytes_written();
    writer
        .finish(&Statistics {
            events,
            lost_events,
            duration_ns: duration.as_nanos() as u64,
        })
        .map_err(stopped)?;

    eprintln!(
        "utrace: traced {} functions of {} (pid {}): {} events in {:.3} s, {} lost, {} bytes written to {}",
        table.functions.len(),
        files[0].path.rsplit('/').next().unwrap_or_default(),
        target.pid(),
        events,
        duration.as_secs_f64(),
        lost_events,
        bytes,
        options.output.display()
    );
    if lost_events > 0 {
        eprintln!("utrace: warning: {lost_events} events were lost (ring buffer full): try a larger --buffer-size");
    }
    if options.debug {
        eprintln!(
            "utrace: detached in {:.3} ms",
            detach_time.as_secs_f64() * 1e3
        );
    }
    let (exit_status, interrupted_by) = match stop {
        Stop::Ended(status) => (status, None),
        // The command runs on untraced; utrace still ends with it, as it would have.
        Stop::Asked => (target.wait()?, None),
        Stop::Interrupted(signal) => (None, Some(signal)),
        // The writer's own error is reported above; this is only reached if it vanished.
        Stop::WriterFailed => anyhow::bail!("writing {} stopped early", options.output.display()),
    };
    Ok(RecordOutcome {
        exit_status,
        interrupted_by,
    })
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
            eprintln!(
                "utrace: warning: cannot give {} to the sudo user: {error}",
                path.display()
            );
        }
    }
}

/// The functions to probe, file by file.
fn plan(
    files: &[TracedFile],
    libraries: &PltLibraries,
    scope: &BindingScope,
) -> Result<FunctionTable> {
    let mut table = FunctionTable::default();
    for file in files {
        let elf = crate::elf::read_elf_functions(&file.open_path)
            .with_context(|| format!("reading the symbols of {}", file.path))?;
        warn_unprobeable(&elf.unprobeable);
        let functions = libraries.apply(&file.path, elf.functions, scope);
        table.add_module(file.path.clone(), functions);
    }
    Ok(table)
}

/// Says which functions will never show up in the trace, and why.
fn warn_unprobeable(unprobeable: &[crate::elf::Unprobeable]) {
    const SHOWN: usize = 5;
    if unprobeable.is_empty() {
        return;
    }
    let mut names: Vec<&str> = unprobeable
        .iter()
        .map(|f| f.name.as_str())
        .take(SHOWN)
        .collect();
    if unprobeable.len() > SHOWN {
        names.push("…");
    }
    eprintln!(
        "utrace: warning: {} functions cannot be probed (their first instruction has a LOCK or \
         segment prefix and no equivalent site follows): {}",
        unprobeable.len(),
        names.join(", ")
    );
}

fn metadata(command: Vec<String>, pid: u32) -> Metadata {
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
    }
}

/// CLOCK_MONOTONIC now, the clock of the events' timestamps.
fn monotonic_now_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only to `now`; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}
