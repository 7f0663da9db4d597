//! One tracing session, shared by `record` and `live`: plan the target's functions, load and
//! attach the probes, drain the ring buffer until the target ends or utrace is asked to stop,
//! detach. Where the drained events go is the caller's business.

use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use libbpf_rs::RingBufferBuilder;

use super::probes::{self, AttachedProbes, ExitProbes, LoadedProbes, ObjectStorage, ProbeConfig};
use super::proc_maps::executable_files;
use super::process::{ChildSetup, ExitStatus};
use super::progress::Progress;
use super::signals::{self, SignalWatch};
use super::stack_writes::StackWriteRequest;
use super::target::{Prepared, SignalAction, Target, TargetSpec, TracedFile};
use crate::elf::binding::BindingScope;
use crate::elf::{ExitProbe, FunctionSymbol, SiteKind, SitePolicy};
use crate::event::Event;
use crate::filter::FilterSpec;
use crate::plan::{FunctionKind, FunctionTable, LibraryPatterns, PltLibraries};

/// How long the consumer sleeps when the probes have not woken it. Bounds the delay of events
/// at low rates; at high rates the fill-level wake-up comes first.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// How often the drain is told a flush is due, so a killed recorder loses at most this much and
/// live output is never held longer.
const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// What to trace and how: the options `record` and `live` share.
pub struct TraceOptions {
    pub target: TargetSpec,
    /// Ring buffer size in bytes (rounded up to a power of two).
    pub buffer_bytes: u32,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Libraries whose own functions are traced too (`--nest-lib`).
    pub nest_libs: LibraryPatterns,
    /// Where entry probes may go (`--probe-at-entry` keeps them at the entries).
    pub sites: SitePolicy,
    /// Which PLT calls are traced and how they are named (`--lib`, `--no-lib`, `--libname`).
    pub plt_libraries: PltLibraries,
    /// How the started command runs (`-u`, `--no-randomize-addr`).
    pub child_setup: ChildSetup,
    /// `-f`/`--no-function` leave the other functions unprobed; the rest of the filter applies to
    /// the events.
    pub filter: FilterSpec,
    /// How function exits are seen.
    pub exit_probes: ExitProbes,
    pub debug: bool,
}

/// Why the session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The process ended; its status when it was ours.
    Ended(Option<ExitStatus>),
    /// `--duration` passed, or a signal asked to stop.
    Asked,
    /// A second signal (this one): stop without waiting for anything.
    Interrupted(libc::c_int),
    /// The drain could take no more (a writer that failed).
    DrainFailed,
}

/// What a finished session measured.
pub struct SessionEnd {
    pub stop: Stop,
    /// Events drained from the ring buffer.
    pub events: u64,
    /// Events the ring buffer had no room for.
    pub lost_events: u64,
    pub duration: Duration,
    pub attach_time: Duration,
    pub detach_time: Duration,
}

/// The target and its planned functions, ready to be traced.
pub struct Session {
    pub target: Target,
    /// The probed files, `table.modules[i]` opened by `files[i]`.
    pub files: Vec<TracedFile>,
    pub table: FunctionTable,
    /// What PLT calls bind to, for planning libraries loaded later too.
    scope: BindingScope,
    /// Every library of the program in load order.
    libraries: Vec<TracedFile>,
    /// Per function id, where its exit is probed under `--exit-probes=ret`; `None` under
    /// `--exit-probes=uretprobe`.
    pub exits: Option<Vec<ExitProbe>>,
}

/// Where a session's events and newly planned functions go.
pub trait Drain {
    /// Called after every poll of the ring buffer with the events so far and `true` when a flush
    /// is due (every [`FLUSH_INTERVAL`]): takes what it wants from the vector (what it leaves
    /// stays for the next call); false when it can take no more.
    fn take(&mut self, pending: &mut Vec<Event>, due: bool) -> bool;

    /// Functions planned during the session (a library loaded with dlopen that `--nest-lib`
    /// matches), numbered on from the table's: the events that use them come after. Only called
    /// when the session follows dlopen; false when it can take no more.
    fn more_functions(&mut self, more: &FunctionTable) -> bool;
}

impl Session {
    /// Starts the command (held before exec) or finds the process, and plans its functions.
    pub fn prepare(options: &TraceOptions) -> Result<Session> {
        probes::show_libbpf_messages(options.debug);
        // Fork (for -c) before any thread exists: the child only waits and execs.
        let Prepared {
            target,
            files,
            scope,
            libraries,
        } = Target::prepare(
            &options.target,
            &options.child_setup,
            &options.nest_libs,
            &options.plt_libraries,
        )?;
        let (table, exits) = plan(&files, options, &scope)?;
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
        if let (true, Some(exits)) = (options.debug, &exits) {
            let uretprobes: Vec<(&str, &ExitProbe)> = table
                .functions
                .iter()
                .zip(exits)
                .filter(|(_, exit)| matches!(exit, ExitProbe::Uretprobe(_)))
                .map(|(f, exit)| (f.name.as_str(), exit))
                .collect();
            eprintln!(
                "utrace: {} functions keep a uretprobe (exceptions cannot unwind through them)",
                uretprobes.len()
            );
            for (name, exit) in uretprobes {
                if let ExitProbe::Uretprobe(why) = exit {
                    eprintln!("utrace:   {name}: {why}");
                }
            }
        }
        Ok(Session {
            target,
            files,
            table,
            scope,
            libraries,
            exits,
        })
    }

    /// The traced file's name, for messages.
    pub fn program_name(&self) -> &str {
        let path = self.files.first().map_or("", |f| f.path.as_str());
        path.rsplit('/').next().unwrap_or(path)
    }

    /// Traces until the target ends, `--duration` passes or a signal says stop, handing the
    /// events to `drain`. With `follow_dlopen` and `--nest-lib`, a library the program loads
    /// with dlopen that `--nest-lib` matches is probed when it appears (a started command is
    /// stopped at dlopen's return until then). Errors before the target starts leave nothing
    /// attached.
    pub fn run(
        &mut self,
        options: &TraceOptions,
        show_progress: bool,
        follow_dlopen: bool,
        drain: &mut dyn Drain,
    ) -> Result<SessionEnd> {
        let pid = self.target.pid();
        let started_here = matches!(self.target, Target::Started(_));
        let dlopen_sites = if follow_dlopen && !options.nest_libs.is_empty() {
            dlopen_sites(&self.libraries)
        } else {
            None
        };
        let unwinders = self.unwinder_sites();
        // The recorder writes the stack while the process is stopped: only a command it started
        // may be stopped (a process it attached to has a parent that would see the stops).
        let unwind_shadow = started_here && !unwinders.is_empty();
        if options.debug {
            say_unwinders(&unwinders, unwind_shadow);
        }
        if !unwinders.is_empty() && !started_here && options.exit_probes == ExitProbes::Uretprobe {
            eprintln!(
                "utrace: warning: the process has an unwinder, and a C++ exception or Rust panic \
                 that unwinds through a traced frame kills it: trace it with --exit-probes=ret, \
                 or start it with utrace"
            );
        }
        let mut storage = ObjectStorage::uninit();
        let mut loaded = LoadedProbes::load(
            &mut storage,
            &ProbeConfig {
                tgid: pid,
                buffer_bytes: options.buffer_bytes,
                wait_for_exec: started_here,
                stop_on_dlopen: started_here && dlopen_sites.is_some(),
                unwind_shadow,
            },
        )?;
        // Before any return probe: from the first replaced return address on, an exception
        // must find it restored. Dropped last, after every return probe is gone.
        let _unwinder_watch = unwinders
            .into_iter()
            .filter(|_| unwind_shadow)
            .map(|(file, offsets)| loaded.watch_unwinder(&file, offsets, pid))
            .collect::<Result<Vec<_>, _>>()?;
        loaded.set_serving_stack_writes(unwind_shadow);
        let open_paths: Vec<PathBuf> = self.files.iter().map(|f| f.open_path.clone()).collect();
        let mut attached =
            loaded.attach(&self.table, self.exits.as_deref(), 0, &open_paths, pid)?;
        let _dlopen_watch = match dlopen_sites {
            Some((library, offsets)) => Some(loaded.watch_dlopen(&library, offsets, pid)?),
            None => None,
        };
        loaded.set_recording(true);
        if options.debug {
            eprintln!(
                "utrace: attached {} entry and return probes with uprobe_multi in {:.3} ms",
                self.table.functions.len(),
                attached.attach_time.as_secs_f64() * 1e3
            );
        }
        signals::install().context("installing signal handlers")?;

        let batch = RefCell::new(Vec::new());
        let library_loaded = Cell::new(false);
        // A process stopped for the recorder (a stack write request, a dlopen) waits to be let
        // go on.
        let held = Cell::new(false);
        let served = Cell::new(0u64);
        let mut ring = RingBufferBuilder::new();
        ring.add(loaded.events_map(), |bytes: &[u8]| {
            let mut event = Event::default();
            // A short record cannot come from our programs; skipping it beats stopping.
            if plain::copy_from_bytes(&mut event, bytes).is_ok() {
                if event.function == Event::LIBRARY_LOADED {
                    library_loaded.set(true);
                } else {
                    batch.borrow_mut().push(event);
                }
            }
            0
        })?;
        ring.add(loaded.stack_writes_map(), |bytes: &[u8]| {
            serve_stack_writes(bytes);
            served.set(served.get() + 1);
            held.set(true);
            0
        })?;
        let ring = ring.build()?;

        let started = Instant::now();
        self.target.start()?;
        let mut events: u64 = 0;
        let mut last_flush = Instant::now();
        let mut progress = Progress::new(show_progress);
        let mut watch = SignalWatch::default();
        let drain_batch = |drain: &mut dyn Drain, due: bool, events: &mut u64| {
            let mut pending = batch.borrow_mut();
            let before = pending.len();
            let taken = drain.take(&mut pending, due);
            *events += (before - pending.len()) as u64;
            taken
        };

        let stop = loop {
            // Negative results are EINTR from our own signals; the next round handles them.
            ring.poll_raw(POLL_INTERVAL);
            ring.consume_raw();
            let due = last_flush.elapsed() >= FLUSH_INTERVAL;
            if !drain_batch(drain, due, &mut events) {
                break Stop::DrainFailed;
            }
            if library_loaded.take() {
                let probed = self.probe_new_libraries(&loaded, options, drain);
                // Stopped at dlopen's return (a command we started): let it go on, probed or not.
                held.set(true);
                match probed {
                    Ok(Some(more)) => attached.absorb(more),
                    Ok(None) => {}
                    Err(error) if error.is::<DrainFull>() => break Stop::DrainFailed,
                    Err(error) => eprintln!("utrace: warning: {error:#}"),
                }
            }
            // Only once every thread has stopped, so that no request is on its way (another
            // thread's stop, sent but not yet taken, would be cancelled by the continue before
            // its writes are made), and every request is served.
            if held.get() {
                self.target.wait_until_stopped();
                ring.consume_raw();
                if !library_loaded.get() && served.get() == loaded.stack_write_requests() {
                    self.target.resume();
                    held.set(false);
                }
            }
            if due {
                last_flush = Instant::now();
            }
            progress.update(events + batch.borrow().len() as u64, loaded.lost_events());
            if let Some(status) = self.target.ended()? {
                break Stop::Ended(status);
            }
            if options
                .duration
                .is_some_and(|limit| started.elapsed() >= limit)
            {
                break Stop::Asked;
            }
            if let Some(received) = watch.take() {
                match (self.target.on_signal(received), received.count) {
                    (SignalAction::Continue, _) => {}
                    (SignalAction::Stop, 1) => break Stop::Asked,
                    (SignalAction::Stop, _) => break Stop::Interrupted(received.signal),
                }
            }
        };

        loaded.set_serving_stack_writes(false);
        loaded.set_recording(false);
        let attach_time = attached.attach_time;
        let detach_time = attached.detach();
        ring.consume_raw();
        if held.get() {
            self.target.resume();
        }
        drain_batch(drain, true, &mut events);
        progress.clear();
        Ok(SessionEnd {
            stop,
            events,
            lost_events: loaded.lost_events(),
            duration: started.elapsed(),
            attach_time,
            detach_time,
        })
    }

    /// The files of the program that define the unwinder's entry points (normally
    /// `libgcc_s.so.1`; the executable itself when it links the unwinder statically), with their
    /// offsets. Empty for a program without an unwinder (plain C), which then pays nothing for
    /// the shadow stack. A file that cannot be read is left out, as the planning would have said.
    fn unwinder_sites(&self) -> Vec<(PathBuf, Vec<usize>)> {
        let executable = self.files.iter().take(1);
        executable
            .chain(&self.libraries)
            .filter_map(|file| {
                let offsets = crate::elf::unwinder::unwinder_entry_offsets(&file.open_path).ok()?;
                let offsets: Vec<usize> = offsets.into_iter().map(|o| o as usize).collect();
                (!offsets.is_empty()).then(|| (file.open_path.clone(), offsets))
            })
            .collect()
    }

    /// Probes the libraries mapped since the last look that `--nest-lib` matches, and hands their
    /// functions to `drain`; `None` when there is no new one.
    fn probe_new_libraries(
        &mut self,
        loaded: &LoadedProbes,
        options: &TraceOptions,
        drain: &mut dyn Drain,
    ) -> Result<Option<AttachedProbes>> {
        let pid = self.target.pid();
        let mapped =
            executable_files(pid).with_context(|| format!("cannot read /proc/{pid}/maps"))?;
        let new_files: Vec<TracedFile> = mapped
            .into_iter()
            .filter(|file| options.nest_libs.matches(&file.path))
            .filter(|file| !self.files.iter().any(|known| known.path == file.path))
            .map(|file| TracedFile {
                path: file.path,
                open_path: file.open_path,
            })
            .collect();
        if new_files.is_empty() {
            return Ok(None);
        }
        let first_module = self.table.modules.len();
        let (mut more, more_exits) = plan(&new_files, options, &self.scope)?;
        for function in &mut more.functions {
            function.module += first_module as u32;
        }
        self.table.extend(more.clone());
        // Exit probes are listed by function id, which the new functions continue.
        if let (Some(exits), Some(more_exits)) = (&mut self.exits, more_exits) {
            exits.extend(more_exits);
        }
        self.files.extend(new_files.iter().cloned());
        let open_paths: Vec<PathBuf> = new_files.iter().map(|f| f.open_path.clone()).collect();
        let attached = loaded.attach(
            &self.table,
            self.exits.as_deref(),
            first_module,
            &open_paths,
            pid,
        )?;
        if options.debug {
            for file in &new_files {
                eprintln!("utrace: probed {} after dlopen", file.path);
            }
        }
        if !drain.more_functions(&more) {
            return Err(DrainFull.into());
        }
        Ok(Some(attached))
    }

    /// After the session stopped early: waits for a started command to end (it runs on,
    /// untraced), so utrace still ends with it.
    pub fn wait_for_command(&self) -> Result<Option<ExitStatus>> {
        self.target.wait()
    }

    /// Says what was lost and, under `--debug`, how long attaching and detaching took.
    pub fn report_end(&self, end: &SessionEnd, debug: bool) {
        if end.lost_events > 0 {
            eprintln!(
                "utrace: warning: {} events were lost (ring buffer full): try a larger --buffer-size",
                end.lost_events
            );
        }
        if debug {
            eprintln!(
                "utrace: detached in {:.3} ms",
                end.detach_time.as_secs_f64() * 1e3
            );
        }
    }
}

/// The drain could take no more functions.
#[derive(Debug, thiserror::Error)]
#[error("the recording stopped taking events")]
struct DrainFull;

/// The first library in load order that has `dlopen` (libc since glibc 2.34, libdl before),
/// and where its dlopen functions are.
fn dlopen_sites(libraries: &[TracedFile]) -> Option<(PathBuf, Vec<usize>)> {
    libraries.iter().find_map(|library| {
        let elf = crate::elf::read_elf_functions(&library.open_path).ok()?;
        let offsets: Vec<usize> = elf
            .functions
            .iter()
            .filter(|f| f.kind == FunctionKind::Function && f.name == "dlopen")
            .map(|f| f.offset as usize)
            .collect();
        (!offsets.is_empty()).then(|| (library.open_path.clone(), offsets))
    })
}

/// The functions to probe, file by file: the PLT calls `--lib`/`--no-lib` select, named as
/// `--libname` says, and of those what the function globs show; with `--exit-probes=ret`, where
/// each one's exit is probed.
fn plan(
    files: &[TracedFile],
    options: &TraceOptions,
    scope: &BindingScope,
) -> Result<(FunctionTable, Option<Vec<ExitProbe>>)> {
    let mut table = FunctionTable::default();
    let mut exits = (options.exit_probes == ExitProbes::Ret).then(Vec::new);
    for file in files {
        let elf = crate::elf::read_elf_functions_with(&file.open_path, options.sites)
            .with_context(|| format!("reading the symbols of {}", file.path))?;
        warn_unprobeable(&elf.unprobeable);
        if options.debug {
            say_sites(&file.path, &elf.functions);
        }
        let mut functions = options
            .plt_libraries
            .apply(&file.path, elf.functions, scope);
        functions.retain(|f| options.filter.shows_name(&f.name));
        if let Some(exits) = &mut exits {
            let probes = crate::elf::read_exit_probes(&file.open_path, &functions)
                .with_context(|| format!("finding the exits of the functions of {}", file.path))?;
            exits.extend(probes);
        }
        table.add_module(file.path.clone(), functions);
    }
    anyhow::ensure!(
        !table.functions.is_empty(),
        "no function of {} matches --function/--no-function: nothing to trace",
        files.first().map_or("the program", |f| f.path.as_str())
    );
    Ok((table, exits))
}

/// Writes what a stack write request asks for; the process stays stopped until it is served,
/// written or not.
fn serve_stack_writes(bytes: &[u8]) {
    let written = StackWriteRequest::parse(bytes)
        .map_err(anyhow::Error::from)
        .and_then(|request| {
            request
                .apply()
                .with_context(|| format!("cannot write the stack of process {}", request.pid))
        });
    if let Err(error) = written {
        eprintln!("utrace: warning: {error:#}: an exception may not unwind");
    }
}

/// Says whether the shadow stack for the unwinder is on and where the unwinder is (`--debug`).
fn say_unwinders(unwinders: &[(PathBuf, Vec<usize>)], on: bool) {
    if unwinders.is_empty() {
        eprintln!("utrace: shadow stack off: the program maps no unwinder");
    } else if !on {
        eprintln!("utrace: shadow stack off: utrace did not start the process");
        return;
    }
    for (file, offsets) in unwinders {
        eprintln!(
            "utrace: shadow stack on: {} unwinder entry points probed in {}",
            offsets.len(),
            file.display()
        );
    }
}

/// Says how many functions of a file got which kind of probe site (`--debug`).
fn say_sites(path: &str, functions: &[FunctionSymbol]) {
    let count = |kind| functions.iter().filter(|f| f.site.kind == kind).count();
    eprintln!(
        "utrace: probe sites in {path}: {} at the entry, {} after endbr64, {} after an \
         unprobeable prefix",
        count(SiteKind::Entry),
        count(SiteKind::AfterEndbr64),
        count(SiteKind::AfterUnprobeablePrefix)
    );
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
