//! Recording: start the target, load and attach BPF, drain the ring buffer into `utrace.data`.

mod probes;
mod process;
mod progress;
mod signals;
mod writer;

#[allow(clippy::all, unused_imports)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/utrace.skel.rs"));
}

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use libbpf_rs::RingBufferBuilder;

use crate::data::{DataWriter, Metadata, Statistics};
use crate::event::Event;
use crate::plan::FunctionTable;
pub use probes::ring_buffer_size;
use probes::{LoadedProbes, ObjectStorage, ProbeConfig};
use process::{display_name, resolve_program, HeldChild};
pub use process::{split_command, ExitStatus};
use progress::Progress;
use signals::SignalWatch;
use writer::{WriterThread, BATCH_EVENTS};

/// How long the consumer sleeps when the probes have not woken it. Bounds the delay of events
/// at low rates; at high rates the fill-level wake-up comes first.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// A batch is handed to the writer when it is full or this old, so a killed recorder loses at
/// most this much.
const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// What `utrace record` was asked to do.
pub struct RecordOptions {
    /// The command and its arguments.
    pub command: Vec<String>,
    pub output: PathBuf,
    /// Ring buffer size in bytes (rounded up to a power of two).
    pub buffer_bytes: u32,
    pub debug: bool,
}

/// How a recording ended.
pub struct RecordOutcome {
    /// The traced command's status; `None` when utrace stopped before it ended.
    pub exit_status: Option<ExitStatus>,
}

/// Runs the command under the tracer and writes `options.output`.
pub fn record(options: &RecordOptions) -> Result<RecordOutcome> {
    let program = resolve_program(&options.command[0])?;
    let table = plan_program(&program)?;
    if options.debug {
        eprintln!(
            "utrace: planned {} functions in {}",
            table.functions.len(),
            program.display()
        );
    }

    probes::show_libbpf_messages(options.debug);
    // Fork before any thread exists: the child only waits and execs.
    let mut child = HeldChild::spawn(&program, &options.command)?;
    // Created before anything is loaded or attached: an output that cannot be written stops
    // utrace while the command is still held, before it has run at all.
    let writer = DataWriter::create(
        &options.output,
        &metadata(&options.command, child.pid()),
        &table,
    )
    .context("cannot create the data file (-o FILE chooses another)")?;
    let mut storage = ObjectStorage::uninit();
    let probes = LoadedProbes::load(
        &mut storage,
        &ProbeConfig {
            tgid: child.pid(),
            buffer_bytes: options.buffer_bytes,
        },
    )
    .and_then(|loaded| loaded.attach(&table, child.pid()).map(|a| (loaded, a)));
    let (loaded, attached) = match probes {
        Ok(probes) => probes,
        Err(error) => {
            // Nothing was recorded: a file without events would only mislead.
            writer.discard();
            return Err(error.into());
        }
    };
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
    child.release()?;
    let mut events: u64 = 0;
    let mut last_flush = Instant::now();
    let mut progress = Progress::new();
    let mut watch = SignalWatch::default();
    let mut writer_stopped = false;
    let flush = |force: bool, events: &mut u64| -> bool {
        let mut pending = batch.borrow_mut();
        if pending.is_empty() || !(force || pending.len() >= BATCH_EVENTS / 2) {
            return true;
        }
        *events += pending.len() as u64;
        let full = std::mem::replace(&mut *pending, writer.empty_batch());
        writer.send(full)
    };

    let exit_status = loop {
        // Negative results are EINTR from our own signals; the next round handles them.
        ring.poll_raw(POLL_INTERVAL);
        ring.consume_raw();
        let due = last_flush.elapsed() >= FLUSH_INTERVAL;
        if !flush(due, &mut events) {
            // The writer stopped on an error (a full disk, say); `finish` below reports it.
            writer_stopped = true;
            break None;
        }
        if due {
            last_flush = Instant::now();
        }
        progress.update(events + batch.borrow().len() as u64, loaded.lost_events());
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if let Some(received) = watch.take() {
            if received.count > 1 {
                break None;
            }
            if received.forward {
                child.signal(received.signal);
            }
        }
    };

    let detach_time = attached.detach();
    ring.consume_raw();
    flush(true, &mut events);
    progress.clear();
    let duration = started.elapsed();
    let lost_events = loaded.lost_events();
    drop(ring);
    let stopped = |error| {
        // The probes are gone: the command runs on untraced. Waited for rather than left behind
        // (unless a second signal asked to stop at once), so it ends before utrace does.
        if writer_stopped {
            let _ = child.wait();
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
        "utrace: traced {} functions of {}: {} events in {:.3} s, {} lost, {} bytes written to {}",
        table.functions.len(),
        display_name(&program).to_string_lossy(),
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
    Ok(RecordOutcome { exit_status })
}

/// The functions of the program to probe.
fn plan_program(program: &Path) -> Result<FunctionTable> {
    let path = program
        .canonicalize()
        .with_context(|| format!("cannot open {}", program.display()))?;
    let elf = crate::elf::read_elf_functions(&path)?;
    warn_unprobeable(&elf.unprobeable);
    let mut table = FunctionTable::default();
    table.add_module(path.to_string_lossy().into_owned(), elf.functions);
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

fn metadata(command: &[String], pid: u32) -> Metadata {
    let read = |path| {
        std::fs::read_to_string(path)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    Metadata {
        command: command.to_vec(),
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
