//! One tracing session, shared by `record` and `live`: plan the target's functions, load and
//! attach the probes, drain the ring buffer until the target ends or utrace is asked to stop,
//! detach. Where the drained events go is the caller's business.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use libbpf_rs::RingBufferBuilder;

use super::exit_policy::ExitPolicy;
use super::follow::{ProcessChange, TracedProcesses};
use super::proc_maps::executable_files;
use super::process::{ChildSetup, ExitStatus};
use super::progress::Progress;
use super::signals::{self, SignalWatch};
use super::stack_writes::StackWriteRequest;
use super::target::{Prepared, ProgramFiles, SignalAction, Target, TargetSpec, TracedFile};
use crate::elf::binding::BindingScope;
use crate::elf::returns::saves_its_return_address;
use crate::elf::unwinder::UNWINDER_ENTRY_POINTS;
use crate::elf::{ExitProbe, FunctionSymbol, NoExitSites, SiteKind, SitePolicy};
use crate::event::Event;
use crate::filter::FilterSpec;
use crate::plan::{LibraryPatterns, PltLibraries};
use crate::probe::{self, AttachedProbes, Landings, LoadedProbes, ObjectStorage, ProbeConfig};
use crate::table::{Execution, ExitKind};
use crate::table::{FunctionKind, FunctionTable};

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
    /// How function exits are seen, when the user chose (see [`Session::exit_probes`]).
    pub exit_probes: Option<ExitPolicy>,
    /// Trace the processes the target forks and the programs they exec (`--follow`).
    pub follow: bool,
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
    /// The same per thread id, by thread id (threads that lost none left out).
    pub lost_by_thread: Vec<(u32, u64)>,
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
    /// Per function id, where its exit is probed.
    pub exits: Vec<ExitProbe>,
    /// How function exits are seen: as asked, else uretprobes, except in a running process that
    /// maps an unwinder. There utrace may not stop the process to keep the shadow stack (see
    /// src/bpf/shadow.bpf.h), and a uretprobe in a frame an exception unwinds through kills it.
    exit_probes: ExitPolicy,
    /// The executable's PLT stubs whose calls are probed in the library function they land in.
    landings: Landings,
    /// The lowest virtual address of the executable's code segments.
    executable_code_vaddr: u64,
}

/// Where a session's events and newly planned functions go.
pub trait Drain {
    /// Called after every poll of the ring buffer with the events so far and `true` when a flush
    /// is due (every [`FLUSH_INTERVAL`]): takes what it wants from the vector (what it leaves
    /// stays for the next call); false when it can take no more.
    fn take(&mut self, pending: &mut Vec<Event>, due: bool) -> bool;

    /// Functions planned during the session (a library loaded with dlopen that `--nest-lib`
    /// matches, a program a process exec'ed under `--follow`), numbered on from the table's: the
    /// events that use them come after. False when it can take no more.
    fn more_functions(&mut self, more: &FunctionTable) -> bool;
}

impl Session {
    /// Starts the command (held before exec) or finds the process, and plans its functions.
    pub fn prepare(options: &TraceOptions) -> Result<Session> {
        probe::forward_libbpf_messages();
        // Fork (for -c) before any thread exists: the child only waits and execs.
        let Prepared {
            target,
            program:
                ProgramFiles {
                    files,
                    scope,
                    libraries,
                },
        } = Target::prepare(
            &options.target,
            &options.child_setup,
            &options.nest_libs,
            &options.plt_libraries,
        )?;
        let exit_probes = options.exit_probes.unwrap_or_else(|| {
            let attached = matches!(target, Target::Running(_));
            if attached && !unwinder_sites(&files[0], &libraries).is_empty() {
                ExitPolicy::Ret
            } else {
                ExitPolicy::Uretprobe
            }
        });
        if debug_enabled() && options.exit_probes.is_none() && exit_probes == ExitPolicy::Ret {
            log::debug!(
                "exits probed on their instructions (--exit-probes=ret): the process \
                 maps an unwinder, and utrace did not start it"
            );
        }
        let (mut table, exits) = plan(&files, options, exit_probes, &scope)?;
        anyhow::ensure!(
            !table.functions.is_empty(),
            "no function of {} matches --function/--no-function: nothing to trace",
            files.first().map_or("the program", |f| f.path.as_str())
        );
        let (landings, executable_code_vaddr) = plan_landings(
            &table,
            &files[0],
            &libraries,
            &scope,
            options,
            exit_probes,
            &target,
        );
        // Their probe costs are those of the emulated site in the library, not of the stub.
        for id in landings.functions() {
            table.functions[id as usize].probes.entry = Execution::Emulated;
        }
        if debug_enabled() {
            for (index, file) in files.iter().enumerate() {
                let count = table
                    .functions
                    .iter()
                    .filter(|f| f.module as usize == index)
                    .count();
                log::debug!("planned {count} functions in {}", file.path);
            }
        }
        let ret_probes = exit_probes == ExitPolicy::Ret;
        if debug_enabled() && ret_probes {
            let uretprobes: Vec<(&str, &ExitProbe)> = table
                .functions
                .iter()
                .zip(&exits)
                .filter(|(_, exit)| matches!(exit, ExitProbe::Uretprobe(_)))
                .map(|(f, exit)| (f.name.as_str(), exit))
                .collect();
            log::debug!(
                "{} functions keep a uretprobe (exceptions cannot unwind through them)",
                uretprobes.len()
            );
            for (name, exit) in uretprobes {
                if let ExitProbe::Uretprobe(why) = exit {
                    log::debug!("  {name}: {why}");
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
            exit_probes,
            landings,
            executable_code_vaddr,
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
        let unwinders = unwinder_sites(&self.files[0], &self.libraries);
        // The recorder writes the stack while the process is stopped: only a command it started
        // may be stopped (a process it attached to has a parent that would see the stops).
        let unwind_shadow = started_here && !unwinders.is_empty();
        if debug_enabled() {
            say_unwinders(&unwinders, unwind_shadow);
        }
        if !unwinders.is_empty() && !started_here && self.exit_probes == ExitPolicy::Uretprobe {
            log::warn!(
                "the process has an unwinder, and a C++ exception or Rust panic \
                 that unwinds through a traced frame kills it under --exit-probes=uretprobe"
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
                follow: options.follow,
                executable_code_vaddr: self.executable_code_vaddr,
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
        let all_modules: Vec<usize> = (0..self.table.modules.len()).collect();
        let mut attached = self.attach_modules(&loaded, &all_modules, pid)?;
        attached.absorb(loaded.attach_landings(&self.landings, pid)?);
        // Per followed process, its probes: detached with the target's, all at once.
        let mut followed_probes = Vec::new();
        let mut traced = match options.follow {
            true => Some(TracedProcesses::new(pid, all_modules)?),
            false => None,
        };
        let _dlopen_watch = match dlopen_sites {
            Some((library, offsets)) => Some(loaded.watch_dlopen(&library, offsets, pid)?),
            None => None,
        };
        loaded.set_recording(true);
        if debug_enabled() {
            log::debug!(
                "attached {} entry and return probes with {} in {:.3} ms",
                self.table.functions.len(),
                loaded.attach_mode(),
                attached.attach_time.as_secs_f64() * 1e3
            );
        }
        signals::install().context("installing signal handlers")?;

        let batch = RefCell::new(Vec::new());
        let library_loaded = Cell::new(false);
        let changes = RefCell::new(Vec::new());
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
                } else if let Some(change) = ProcessChange::of(&event) {
                    changes.borrow_mut().push(change);
                    // Kept in the trace: the replayer ends the calls the exec cut short.
                    if event.function == Event::PROCESS_EXECED {
                        batch.borrow_mut().push(event);
                    }
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

        // The target's status once it has ended, while followed processes still run.
        let mut target_end = None;
        let stop = loop {
            // Negative results are EINTR from our own signals; the next round handles them.
            ring.poll_raw(POLL_INTERVAL);
            ring.consume_raw();
            let due = last_flush.elapsed() >= FLUSH_INTERVAL;
            if !drain_batch(drain, due, &mut events) {
                break Stop::DrainFailed;
            }
            if library_loaded.take() {
                let first_new = self.table.modules.len();
                let probed = self.probe_new_libraries(&loaded, options, drain);
                // Stopped at dlopen's return (a command we started): let it go on, probed or not.
                held.set(true);
                if let Some(traced) = &mut traced {
                    traced.add_modules(pid, first_new..self.table.modules.len());
                }
                match probed {
                    Ok(Some(more)) => attached.absorb(more),
                    Ok(None) => {}
                    Err(error) if error.is::<DrainFull>() => break Stop::DrainFailed,
                    Err(error) => log::warn!("{error:#}"),
                }
            }
            if let Some(traced) = &mut traced {
                let mut drain_full = false;
                for change in changes.take() {
                    let probed = self.follow_change(change, &loaded, traced, options, drain);
                    // Stopped by the BPF side: let it go on, probed or not.
                    traced.resume(change.stopped_pid());
                    match probed {
                        Ok(more) => followed_probes.push(more),
                        Err(error) if error.is::<DrainFull>() => drain_full = true,
                        Err(error) => log::warn!("{error:#}"),
                    }
                }
                if drain_full {
                    break Stop::DrainFailed;
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
            if target_end.is_none() {
                target_end = self.target.ended()?;
            }
            if let Some(status) = target_end {
                if traced
                    .as_mut()
                    .map_or(true, TracedProcesses::followed_ended)
                {
                    break Stop::Ended(status);
                }
            }
            // Once the target has ended (followed processes still running), its status is
            // known and there is nobody to wait for or to pass a signal to.
            let asked = target_end.map_or(Stop::Asked, Stop::Ended);
            if options
                .duration
                .is_some_and(|limit| started.elapsed() >= limit)
            {
                break asked;
            }
            if let Some(received) = watch.take() {
                let action = match target_end {
                    Some(_) => SignalAction::Stop,
                    None => self.target.on_signal(received),
                };
                match (action, received.count) {
                    (SignalAction::Continue, _) => {}
                    (SignalAction::Stop, 1) => break asked,
                    (SignalAction::Stop, _) => break Stop::Interrupted(received.signal),
                }
            }
        };

        loaded.set_serving_stack_writes(false);
        loaded.set_recording(false);
        let attach_time = attached.attach_time;
        followed_probes.push(attached);
        let detach_time = AttachedProbes::detach(followed_probes);
        ring.consume_raw();
        if held.get() {
            self.target.resume();
        }
        drain_batch(drain, true, &mut events);
        // Processes stopped for probes that will not come: they run on untraced.
        for change in changes.take() {
            if let Some(traced) = &traced {
                traced.resume(change.stopped_pid());
            }
        }
        if let (true, Some(traced)) = (debug_enabled(), &traced) {
            log::debug!("traced {} processes", traced.count());
        }
        progress.clear();
        Ok(SessionEnd {
            stop,
            events,
            lost_events: loaded.lost_events(),
            lost_by_thread: loaded.lost_by_thread(),
            duration: started.elapsed(),
            attach_time,
            detach_time,
        })
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
        let scope = std::mem::take(&mut self.scope);
        let added = self.add_modules(&new_files, options, &scope, drain);
        self.scope = scope;
        let added = added?;
        let attached = self.attach_modules(loaded, &added, pid)?;
        if debug_enabled() {
            for file in &new_files {
                log::debug!("probed {} after dlopen", file.path);
            }
        }
        Ok(Some(attached))
    }

    /// Plans `new_files` as modules numbered on from the table's (binding PLT calls in `scope`),
    /// hands their functions to `drain`, and returns their module indices.
    fn add_modules(
        &mut self,
        new_files: &[TracedFile],
        options: &TraceOptions,
        scope: &BindingScope,
        drain: &mut dyn Drain,
    ) -> Result<Vec<usize>> {
        let first_module = self.table.modules.len();
        let (mut more, more_exits) = plan(new_files, options, self.exit_probes, scope)?;
        for function in &mut more.functions {
            function.module += first_module as u32;
        }
        self.table.extend(more.clone());
        // Exit probes are listed by function id, which the new functions continue.
        self.exits.extend(more_exits);
        self.files.extend(new_files.iter().cloned());
        if !drain.more_functions(&more) {
            return Err(DrainFull.into());
        }
        Ok((first_module..self.table.modules.len()).collect())
    }

    /// Attaches the probes of `modules` (indices into the table), filtered to `pid`.
    fn attach_modules(
        &self,
        loaded: &LoadedProbes,
        modules: &[usize],
        pid: u32,
    ) -> Result<AttachedProbes> {
        let paths: Vec<(usize, &Path)> = modules
            .iter()
            .map(|&module| (module, self.files[module].open_path.as_path()))
            .collect();
        Ok(loaded.attach(&self.table, &self.exits, &self.landings, &paths, pid)?)
    }

    /// Probes a process the BPF side stopped under `--follow`: a forked child gets the probes of
    /// its parent's modules; a process that exec'ed gets its new program's (planned now, unless
    /// another process runs it already). The caller lets it go on.
    fn follow_change(
        &mut self,
        change: ProcessChange,
        loaded: &LoadedProbes,
        traced: &mut TracedProcesses,
        options: &TraceOptions,
        drain: &mut dyn Drain,
    ) -> Result<AttachedProbes> {
        let (pid, modules) = match change {
            ProcessChange::Forked { child, parent } => {
                let modules = traced.modules(parent).to_vec();
                traced
                    .add(child, modules.clone())
                    .with_context(|| format!("cannot follow pid {child}"))?;
                (child, modules)
            }
            ProcessChange::Execed { pid } => {
                // Whatever the outcome, the old program's modules are gone from the process.
                let planned = self.plan_program(pid, options, drain);
                traced.replace_modules(pid, planned.as_deref().unwrap_or_default().to_vec());
                (pid, planned?)
            }
        };
        if debug_enabled() {
            log::debug!("following pid {pid} ({change:?})");
        }
        self.attach_modules(loaded, &modules, pid)
            .with_context(|| format!("cannot follow pid {pid}"))
    }

    /// The modules of the program `pid` has just exec'ed: those of its files already planned,
    /// and the others planned now.
    fn plan_program(
        &mut self,
        pid: u32,
        options: &TraceOptions,
        drain: &mut dyn Drain,
    ) -> Result<Vec<usize>> {
        let executable = std::fs::read_link(format!("/proc/{pid}/exe"))
            .with_context(|| format!("cannot read /proc/{pid}/exe"))?;
        let program = ProgramFiles::of(
            &executable,
            &options.nest_libs,
            &options.plt_libraries,
            false,
        );
        let mut modules = Vec::new();
        let mut new_files = Vec::new();
        for file in program.files {
            match self.files.iter().position(|known| known.path == file.path) {
                Some(module) => modules.push(module),
                None => new_files.push(file),
            }
        }
        if !new_files.is_empty() {
            modules.extend(self.add_modules(&new_files, options, &program.scope, drain)?);
        }
        Ok(modules)
    }

    /// After the session stopped early: waits for a started command to end (it runs on,
    /// untraced), so utrace still ends with it.
    pub fn wait_for_command(&self) -> Result<Option<ExitStatus>> {
        self.target.wait()
    }

    /// Says what was lost and, under `--debug`, how long attaching and detaching took.
    pub fn report_end(&self, end: &SessionEnd) {
        if end.lost_events > 0 {
            log::warn!(
                "{} events were lost (ring buffer full): try a larger --buffer-size",
                end.lost_events
            );
        }
        log::debug!("detached in {:.3} ms", end.detach_time.as_secs_f64() * 1e3);
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
/// `--libname` says, and of those what the function globs show; with `--exit-probes=ret` or
/// when a function saves its return address (setjmp), where each one's exit is probed.
fn plan(
    files: &[TracedFile],
    options: &TraceOptions,
    exit_probes: ExitPolicy,
    scope: &BindingScope,
) -> Result<(FunctionTable, Vec<ExitProbe>)> {
    let mut table = FunctionTable::default();
    let mut exits = Vec::new();
    for file in files {
        let elf = crate::elf::read_elf_functions_with(&file.open_path, options.sites)
            .with_context(|| format!("reading the symbols of {}", file.path))?;
        warn_unprobeable(&elf.unprobeable);
        if debug_enabled() {
            say_sites(&file.path, &elf.functions);
        }
        let mut functions = options
            .plt_libraries
            .apply(&file.path, elf.functions, scope);
        functions.retain(|f| options.filter.shows_name(&f.name));
        let first = table.functions.len();
        let probes = exit_probes_of(file, &functions, exit_probes)?;
        crate::plan::add_module(&mut table, file.path.clone(), functions);
        for (function, exit) in table.functions[first..].iter_mut().zip(&probes) {
            if matches!(exit, ExitProbe::Sites(_)) {
                function.probes.exit = ExitKind::Instruction;
            }
        }
        exits.extend(probes);
    }
    Ok((table, exits))
}

/// Which of the executable's PLT stubs (module 0 of `table`, read from `executable`) are probed
/// in the library function their calls land in (see [`crate::elf::plt_calls`]), and the lowest
/// virtual address of its code. Under `--debug`, says how many got which kind of site and why the
/// others keep their stub. Anything that cannot be read keeps the stubs.
fn plan_landings(
    table: &FunctionTable,
    executable: &TracedFile,
    libraries: &[TracedFile],
    scope: &BindingScope,
    options: &TraceOptions,
    exit_probes: ExitPolicy,
    target: &Target,
) -> (Landings, u64) {
    use crate::elf::plt_calls::{self, Landing};
    use std::collections::BTreeMap;

    let mut landings = Landings::default();
    let stubs: Vec<(u32, &crate::table::TracedFunction)> = table
        .functions
        .iter()
        .enumerate()
        .filter(|(_, f)| f.module == 0 && f.kind == FunctionKind::Plt)
        .map(|(id, f)| (id as u32, f))
        .collect();
    let say = |landed: usize, kept: &BTreeMap<&str, usize>| {
        if debug_enabled() {
            let kept: Vec<String> = kept.iter().map(|(why, n)| format!("{n} {why}")).collect();
            log::debug!(
                "PLT calls of {}: {landed} probed in the library function they call (an \
                 emulated site), {} at their stub (single-stepped){}{}",
                executable.path,
                stubs.len() - landed,
                if kept.is_empty() { "" } else { ": " },
                kept.join(", ")
            );
        }
    };
    let everything_kept = |why| {
        let kept = BTreeMap::from([(why, stubs.len())]);
        say(0, &kept);
        (Landings::default(), 0)
    };
    if stubs.is_empty() {
        return (landings, 0);
    }
    if !probe::strategy().plt_sessions {
        return everything_kept("as probing them where they land needs uprobe sessions");
    }
    if options.follow {
        return everything_kept("as --follow traces other processes, which may run other programs");
    }
    if exit_probes == ExitPolicy::Ret {
        return everything_kept("as --exit-probes=ret probes their exits at the callers");
    }
    if options.sites == SitePolicy::Entry {
        return everything_kept("as --probe-at-entry asks");
    }
    if preloads_libraries(target) {
        return everything_kept("as libraries are preloaded, which utrace does not bind");
    }
    let Ok(uses) = plt_calls::stub_uses(&executable.open_path) else {
        return everything_kept("as the executable cannot be read");
    };
    if !uses.pie {
        return everything_kept("as the executable is not position-independent");
    }
    // The executable's symbols: the table has only names, the stubs' raw symbols are here.
    let Ok(elf) = crate::elf::read_elf_functions(&executable.open_path) else {
        return everything_kept("as the executable cannot be read");
    };
    let symbols: BTreeMap<u64, &FunctionSymbol> = elf
        .functions
        .iter()
        .filter(|f| f.kind == FunctionKind::Plt)
        .map(|f| (f.offset, f))
        .collect();
    let mut entries: BTreeMap<&str, Option<plt_calls::LibraryEntries>> = BTreeMap::new();
    let mut kept: BTreeMap<&str, usize> = BTreeMap::new();
    for &(id, function) in &stubs {
        let why = (|| {
            let symbol = symbols.get(&function.offset).copied().ok_or("unknown")?;
            let raw = symbol
                .plt_symbol
                .as_deref()
                .ok_or("into the program's own ifuncs")?;
            if !uses.only_called(symbol.address) {
                return Err("jumped to or taken as an address");
            }
            // Its landing would get a return probe, which setjmp would save as its return address.
            if saves_its_return_address(raw) {
                return Err("saving their return address (setjmp)");
            }
            // Probed there, the unwinder would walk the frame before the shadow stack knew it.
            if UNWINDER_ENTRY_POINTS.contains(&raw) {
                return Err("into the unwinder");
            }
            let stub = u32::try_from(symbol.address).map_err(|_| "beyond 4 GiB")?;
            let path = scope.library_of(raw).ok_or("bound to no library")?;
            let library = libraries
                .iter()
                .find(|l| l.path == path)
                .ok_or("bound to the program itself")?;
            let read = entries
                .entry(path)
                .or_insert_with(|| plt_calls::library_entries(&library.open_path).ok());
            match read.as_ref().map(|read| read.landing(raw)) {
                Some(Landing::At(offset)) => {
                    landings.add(id, u64::from(stub), &library.open_path, offset);
                    Ok(())
                }
                Some(Landing::Ifunc) => Err("into ifuncs (chosen at run time)"),
                Some(Landing::SingleStepped) => Err("single-stepped in the library too"),
                Some(Landing::Versioned) => Err("into names of several versions"),
                Some(Landing::Undefined) | None => Err("unresolved"),
            }
        })();
        if let Err(why) = why {
            *kept.entry(why).or_default() += 1;
        }
    }
    say(landings.len(), &kept);
    (landings, uses.code_vaddr)
}

/// Whether the dynamic loader of the target preloads libraries (`LD_PRELOAD`,
/// `/etc/ld.so.preload`), which come first in its binding order and which utrace does not list.
fn preloads_libraries(target: &Target) -> bool {
    let listed = |text: &str| !text.trim().is_empty();
    if std::fs::read_to_string("/etc/ld.so.preload").is_ok_and(|text| listed(&text)) {
        return true;
    }
    match target {
        Target::Started(_) => std::env::var("LD_PRELOAD").is_ok_and(|value| listed(&value)),
        Target::Running(process) => std::fs::read(format!("/proc/{}/environ", process.pid()))
            .map_or(true, |environ| {
                environ.split(|&b| b == 0).any(|variable| {
                    variable
                        .strip_prefix(b"LD_PRELOAD=")
                        .is_some_and(|value| listed(&String::from_utf8_lossy(value)))
                })
            }),
    }
}

/// Where the exits of a file's `functions` are probed: on their instructions where they can be
/// under `--exit-probes=ret`, with uretprobes otherwise. A function that saves its return address
/// (setjmp) is never given a uretprobe, which would break the `longjmp` back to it: its exits are
/// probed on instructions, or not at all when they cannot be found.
fn exit_probes_of(
    file: &TracedFile,
    functions: &[FunctionSymbol],
    kind: ExitPolicy,
) -> Result<Vec<ExitProbe>> {
    let read = |functions: &[FunctionSymbol]| {
        crate::elf::read_exit_probes(&file.open_path, functions)
            .with_context(|| format!("finding the exits of the functions of {}", file.path))
    };
    let saves =
        |f: &FunctionSymbol| saves_its_return_address(f.plt_symbol.as_deref().unwrap_or(&f.name));
    let mut probes = match kind {
        ExitPolicy::Ret => read(functions)?,
        ExitPolicy::Uretprobe => {
            let savers: Vec<FunctionSymbol> =
                functions.iter().filter(|f| saves(f)).cloned().collect();
            let mut saver_probes = match savers.is_empty() {
                true => Vec::new(),
                false => read(&savers)?,
            }
            .into_iter();
            functions
                .iter()
                .map(|f| match saves(f) {
                    true => saver_probes.next().expect("one probe per saver"),
                    false => ExitProbe::Uretprobe(NoExitSites::UretprobesAsked),
                })
                .collect()
        }
    };
    for (function, probe) in functions.iter().zip(&mut probes) {
        if saves(function) && matches!(probe, ExitProbe::Uretprobe(_)) {
            *probe = ExitProbe::Sites(Vec::new());
        }
    }
    Ok(probes)
}

/// The files of the program that define the unwinder's entry points (normally
/// `libgcc_s.so.1`; the executable itself when it links the unwinder statically), with their
/// offsets. Empty for a program without an unwinder (plain C), which then pays nothing for
/// the shadow stack. A file that cannot be read is left out, as the planning would have said.
fn unwinder_sites(executable: &TracedFile, libraries: &[TracedFile]) -> Vec<(PathBuf, Vec<usize>)> {
    std::iter::once(executable)
        .chain(libraries)
        .filter_map(|file| {
            let offsets = crate::elf::unwinder::unwinder_entry_offsets(&file.open_path).ok()?;
            let offsets: Vec<usize> = offsets.into_iter().map(|o| o as usize).collect();
            (!offsets.is_empty()).then(|| (file.open_path.clone(), offsets))
        })
        .collect()
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
        log::warn!("{error:#}: an exception may not unwind");
    }
}

/// Says whether the shadow stack for the unwinder is on and where the unwinder is (`--debug`).
fn say_unwinders(unwinders: &[(PathBuf, Vec<usize>)], on: bool) {
    if unwinders.is_empty() {
        log::debug!("shadow stack off: the program maps no unwinder");
    } else if !on {
        log::debug!("shadow stack off: utrace did not start the process");
        return;
    }
    for (file, offsets) in unwinders {
        log::debug!(
            "shadow stack on: {} unwinder entry points probed in {}",
            offsets.len(),
            file.display()
        );
    }
}

/// Says how many functions of a file got which kind of probe site (`--debug`).
fn say_sites(path: &str, functions: &[FunctionSymbol]) {
    let count = |kind| functions.iter().filter(|f| f.site.kind == kind).count();
    log::debug!(
        "probe sites in {path}: {} at the entry, {} after endbr64, {} after an \
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
    log::warn!(
        "{} functions cannot be probed (their first instruction has a LOCK or \
         segment prefix and no equivalent site follows): {}",
        unprobeable.len(),
        names.join(", ")
    );
}

/// Whether `-d` asked for the debugging lines: what only they need is not worked out otherwise.
fn debug_enabled() -> bool {
    log::log_enabled!(log::Level::Debug)
}
