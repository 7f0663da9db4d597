//! One tracing session, shared by `record` and `live`: plan the target's functions, load and
//! attach the probes, drain the ring buffer until the target ends or utrace is asked to stop,
//! detach. Where the drained events go is the caller's business.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use libbpf_rs::RingBufferBuilder;

use super::budget::BudgetKeeper;
use super::dispatch::{drain_events, Tracing, TracingEnd};
use super::follow::{ProcessChange, TracedProcesses};
use super::guardian::{Duties, Guardian};
use super::proc_maps::executable_files;
use super::process::{ChildSetup, ExitStatus};
use super::ring::{Inbox, Note};
use super::seizer::{SeizeError, Seizer, ServedPause};
use super::signals;
use super::stack_writes::{MalformedRequest, StackWriteRequest};
use super::strings::UnreadStrings;
use super::target::{Prepared, Target, TargetSpec};
use super::user_stacks;
use crate::elf::{DebugLookup, SitePolicy};
use crate::event::Event;
use crate::filter::FilterSpec;
use crate::plan::{EventRequests, SourceLines, ValueRequests};
use crate::plan::{ExitPolicy, Extension, LibraryPatterns, Loaded, PltLibraries};
use crate::plan::{
    PlanOptions, Planner, ProbePlan, ProcessOrigin, Program, TracedFile, WatchSites,
};
use crate::probe::KernelAttach;
use crate::probe::{self, AttachedProbes, EventPrograms, LoadedProbes, ObjectStorage, ProbeConfig};
use crate::table::FunctionTable;
use crate::user_stack::UserStacks;

/// What to trace and how: the options `record` and `live` share.
pub struct TraceOptions {
    pub target: TargetSpec,
    /// Ring buffer size in bytes (rounded up to a power of two).
    pub buffer_bytes: u32,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Libraries whose own functions are traced too (`--nest-lib`).
    pub nest_libs: LibraryPatterns,
    /// Where the symbols of stripped traced files are looked for (`--debug-dir`).
    pub debug: DebugLookup,
    /// Where entry probes may go (`--probe-at-entry` keeps them at the entries).
    pub sites: SitePolicy,
    /// Which PLT calls are traced and how they are named (`--lib`, `--no-lib`, `--libname`).
    pub plt_libraries: PltLibraries,
    /// How the started command runs (`-u`, `--no-randomize-addr`).
    pub child_setup: ChildSetup,
    /// `-f`/`--no-function` leave the other functions unprobed; the rest of the filter applies to
    /// the events.
    pub filter: FilterSpec,
    /// How function exits are seen, when the user chose (see
    /// [`crate::plan::ProbePlan::exit_policy`]).
    pub exit_probes: Option<ExitPolicy>,
    /// Trace the processes the target forks and the programs they exec (`--follow`).
    pub follow: bool,
    /// The arguments and return values to capture (`-A`, `-R`, `-a`).
    pub values: ValueRequests,
    /// Kernel events and USDT probes (`-E`), kernel functions (`-k`, `-K`).
    pub events: EventRequests,
    /// Read each traced function's source line from DWARF (`--srcline`).
    pub source_lines: SourceLines,
    /// The slowdown the program may have, functions detached to keep it (`--budget`).
    pub budget: Option<super::budget::Slowdown>,
}

/// Which command runs the session: what it shows besides the events, and what it follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionMode {
    /// `record`: a progress line on a terminal; libraries loaded with dlopen that `--nest-lib`
    /// matches are probed when they appear.
    Record,
    /// `live`: the call tree owns the terminal, so no progress line; dlopen is not followed.
    Live,
}

/// Why the session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The process ended; its status when it was ours.
    Ended(Option<ExitStatus>),
    /// `--duration` passed, `--max-size` was reached, or a signal asked to stop.
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
    /// The user stacks the probes unwound (`--stack`), symbolized; `None` without `--stack`.
    pub user_stacks: Option<UserStacks>,
}

/// The target and its planned functions, ready to be traced.
pub struct Session {
    pub target: Target,
    /// What is traced and how, extended as the traced processes load more.
    planner: Planner,
    /// Under `--stack`, the files the user stacks' frames may lie in: the program's executable
    /// and libraries, and those its memory map showed while it ran. Empty without `--stack`.
    stack_files: Vec<PathBuf>,
    /// A running process (`-p`) with an unwinder and uretprobes, held with ptrace so that the
    /// shadow stack may pause its threads.
    seizer: Option<Seizer>,
    /// What the probes cost, when measured: `--budget` weighs them.
    probe_costs: Option<crate::probe_cost::ProbeCosts>,
}

/// Where a session's events and newly planned functions go.
pub trait Drain {
    /// Called after every poll of the ring buffer with the events so far and `true` when a flush
    /// is due (every 100 ms): takes what it wants from the vector (what it leaves
    /// stays for the next call); false when it can take no more.
    fn take(&mut self, pending: &mut Vec<Event>, due: bool) -> bool;

    /// Functions planned during the session (a library loaded with dlopen that `--nest-lib`
    /// matches, a program a process exec'ed under `--follow`), numbered on from the table's: the
    /// events that use them come after. False when it can take no more.
    fn more_functions(&mut self, more: &FunctionTable) -> bool;

    /// `count` more events were lost (the ring buffer was full) since the events taken before:
    /// live mode marks the place in its tree. The file's statistics count them anyway.
    fn events_lost(&mut self, _count: u64) {}

    /// `--budget` took these functions' probes off (the drain decides what to keep of it).
    fn functions_detached(&mut self, _detached: &[crate::table::Detachment]) {}

    /// Whether it has taken all it was allowed to (`record --max-size`): the recording stops
    /// there, as when `--duration` passes.
    fn is_full(&self) -> bool {
        false
    }

    /// Called once every event of the session is taken, before the probes are released (which
    /// the kernel may hold up for as long as another tracer's program runs): puts them where
    /// whatever ends utrace meanwhile cannot take them (on disk, for a recording).
    fn secure(&mut self) {}
}

impl Session {
    /// Starts the command (held before exec) or finds the process, and plans its functions.
    pub fn prepare(options: &TraceOptions) -> Result<Session> {
        probe::forward_libbpf_messages();
        let kernel_attach = probe::check_kernel_functions(&options.events.kernel_functions)?;
        if options.budget.is_some() && !probe::strategy().sessions {
            anyhow::bail!(
                "--budget needs uprobe sessions (Linux 6.13) on uprobe_multi links, which this \
                 kernel lacks"
            );
        }
        // Fork (for -c) before any thread exists: the child only waits and execs.
        let Prepared { target, program } = Target::prepare(&options.target, &options.child_setup)?;
        // After the fork: the command keeps the limit it was given.
        probe::allow_many_probes();
        let stack_files = match options.values.user_stacks.is_empty() {
            true => Vec::new(),
            false => std::iter::once(&program.executable)
                .chain(&program.libraries)
                .map(|file| file.open_path.clone())
                .collect(),
        };
        let planner = Planner::new(
            plan_options(options, &target, ProcessOrigin::Seized, kernel_attach),
            program.clone(),
        )?;
        let (planner, seizer) = match &target {
            Target::Running(process) if needs_pauses(planner.plan()) => {
                match Seizer::seize(process.pid()) {
                    Ok(seizer) => (planner, Some(seizer)),
                    Err(error) => {
                        let origin = ProcessOrigin::Attached;
                        let planner = match options.exit_probes {
                            Some(_) => planner,
                            None => {
                                let options = plan_options(options, &target, origin, kernel_attach);
                                Planner::new(options, program)?
                            }
                        };
                        say_not_seized(&error, planner.plan().exit_policy);
                        (planner, None)
                    }
                }
            }
            _ => (planner, None),
        };
        Ok(Session {
            target,
            planner,
            stack_files,
            seizer,
            probe_costs: None,
        })
    }

    /// Gives the session what the probes cost, which `--budget` weighs.
    pub fn set_probe_costs(&mut self, costs: Option<crate::probe_cost::ProbeCosts>) {
        self.probe_costs = costs;
    }

    /// Under `--budget`, or for a running process, what weighs the probes' cost while the
    /// program runs; `None` where their cost is unknown.
    pub(super) fn budget_keeper(&self, options: &TraceOptions) -> Option<BudgetKeeper> {
        let advise = matches!(self.target, Target::Running(_));
        if options.budget.is_none() && !advise {
            return None;
        }
        let pid = self.target.pid();
        let costs = self.probe_costs.as_ref();
        BudgetKeeper::new(options.budget, pid, self.table(), costs, &options.filter)
    }

    /// Under `--stack`, adds the files the process has mapped now to those its stacks' frames
    /// may lie in: a library it loaded with dlopen, or one a running process had (`-p`).
    pub(super) fn note_mapped_files(&mut self) {
        if self.stack_files.is_empty() {
            return;
        }
        // The process may have ended: the files seen before are what there is.
        let Ok(mapped) = executable_files(self.target.pid()) else {
            return;
        };
        for file in mapped {
            let path = PathBuf::from(&file.path);
            if !self.stack_files.contains(&path) {
                self.stack_files.push(path);
            }
        }
    }

    /// What is traced so far, and how.
    pub fn plan(&self) -> &ProbePlan {
        self.planner.plan()
    }

    /// The planned functions so far.
    pub fn table(&self) -> &FunctionTable {
        &self.planner.plan().table
    }

    /// `[utrace: stack repair]`, when the program has an unwinder whose shadow stack the recorder
    /// may pause a thread to repair.
    pub fn stack_repair_function(&self) -> Option<crate::table::FunctionId> {
        self.planner.plan().events.stack_repair
    }

    /// Turns the pauses the ptrace tracer (`-p`) served since it last did into calls of
    /// `[utrace: stack repair]` among `inbox`'s events; with `released`, those it served last.
    pub(super) fn place_served_pauses(&self, inbox: &Inbox, released: Option<Vec<ServedPause>>) {
        let (Some(repair), Some(pauses)) = (
            self.stack_repair_function(),
            released.or_else(|| self.seizer.as_ref().map(Seizer::take_pauses)),
        ) else {
            return;
        };
        inbox.place_served_pauses(repair, &pauses);
    }

    /// The program's name, for messages: as the user named the command (a symlink's name, as
    /// `redis-server` for `redis-check-rdb`), or as `ps` names a running process; else its
    /// executable's file name.
    pub fn program_name(&self, spec: &TargetSpec) -> String {
        let named = match (spec, &self.target) {
            (TargetSpec::Command(command), _) => command.first().cloned(),
            (TargetSpec::Pid(_), Target::Running(process)) => process.name(),
            (TargetSpec::Pid(_), Target::Started(_)) => None,
        };
        let path = named.unwrap_or_else(|| self.planner.plan().files[0].path.clone());
        path.rsplit('/').next().unwrap_or(&path).to_owned()
    }

    /// Traces until the target ends, `--duration` passes or a signal says stop, handing the
    /// events to `drain`. Under [`SessionMode::Record`] with `--nest-lib`, a library the program
    /// loads with dlopen that `--nest-lib` matches is probed when it appears (a started command is
    /// stopped at dlopen's return until then). Errors before the target starts leave nothing
    /// attached.
    pub fn run(
        &mut self,
        options: &TraceOptions,
        mode: SessionMode,
        drain: &mut dyn Drain,
    ) -> Result<SessionEnd> {
        let pid = self.target.pid();
        let started_here = matches!(self.target, Target::Started(_));
        let plan = self.planner.plan();
        let dlopen_dlclose_sites = match mode {
            SessionMode::Record => plan.dlopen_dlclose_sites.clone(),
            SessionMode::Live => None,
        };
        let unwinders = plan.unwinder_sites.clone();
        let values = self.planner.value_requests();
        // The recorder writes the stack while the thread waits stopped: a command it started
        // stops whole (its parent, utrace, alone sees it); a process it attached to only where
        // it holds the threads with ptrace, whose tracer alone sees the stop (not the real parent).
        let unwind_shadow = (started_here || self.seizer.is_some()) && !unwinders.is_empty();
        if debug_enabled() {
            say_unwinders(&unwinders, unwind_shadow);
        }
        if !unwinders.is_empty() && !unwind_shadow && plan.exit_policy == ExitPolicy::Uretprobe {
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
                stop_at_dlopen_dlclose: started_here && dlopen_dlclose_sites.is_some(),
                follow: options.follow,
                executable_code_vaddr: plan.executable_code_vaddr,
                unwind_shadow,
                pairing: plan.pairing,
                go_functions: matches!(plan.pairing, crate::plan::Pairing::Goroutine { .. })
                    .then(|| plan.go_functions.clone()),
                string_size: values.any().then_some(values.string_size),
                user_stacks: self.table().functions.iter().any(|f| f.user_stack),
                events: EventPrograms::of(&plan.events, self.table())?,
                replaceable_functions: match options.budget {
                    Some(_) => self.table().functions.len() as u32,
                    None => 0,
                },
            },
        )?;
        // Outlives a killed recorder to give the stacks back and let stopped processes go (see
        // guardian.rs): running before the first return address is replaced or the first stop,
        // dismissed after everything else.
        let stop_at_dlopen_dlclose = started_here && dlopen_dlclose_sites.is_some();
        let _guardian =
            match guardian_duties(pid, &loaded, unwind_shadow, stop_at_dlopen_dlclose, options) {
                Some(guarding) => start_guardian(&guarding, &mut loaded),
                None => None,
            };
        // Before any return probe: from the first replaced return address on, an exception
        // must find it restored. Dropped last, after every return probe is gone.
        let _unwinder_watch = unwinders
            .into_iter()
            .filter(|_| unwind_shadow)
            .map(|sites| loaded.watch_unwinder(&sites.file, sites.offsets, pid))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(seizer) = &mut self.seizer {
            // Its requests go to the tracer thread, which serves each with the pause it goes with.
            let map = libbpf_rs::MapHandle::try_from(loaded.stack_writes_map())
                .context("cannot open the stack write requests' ring buffer")?;
            seizer.serve(map);
        }
        loaded.set_serving_stack_writes(unwind_shadow);
        let all_modules: Vec<usize> = (0..self.table().modules.len()).collect();
        let attached = self.attach_program(&loaded, &all_modules)?;
        // Detached when the session ends, after the functions' probes.
        let _event_links = loaded.attach_events(&self.planner.plan().events, self.table(), pid)?;
        let traced = match options.follow {
            true => Some(TracedProcesses::new(pid, all_modules)?),
            false => None,
        };
        let _dlopen_dlclose_watch = match dlopen_dlclose_sites {
            Some(sites) => Some(loaded.watch_dlopen_dlclose(&sites.file, sites.offsets, pid)?),
            None => None,
        };
        loaded.set_recording(true);
        if debug_enabled() {
            log::debug!(
                "attached {} functions' entry and return probes with {} in {:.3} ms",
                self.table()
                    .functions
                    .iter()
                    .filter(|function| function.kind.is_probed_code())
                    .count(),
                loaded.attach_mode(),
                attached.attach_time.as_secs_f64() * 1e3
            );
        }
        signals::install().context("installing signal handlers")?;

        let inbox = Inbox::new(UnreadStrings::new(loaded.string_places()?));
        inbox.planned(self.planner.plan());
        let mut ring = RingBufferBuilder::new();
        ring.add(loaded.events_map(), |bytes: &[u8]| {
            inbox.take_event_record(bytes);
            0
        })?;
        if self.seizer.is_none() {
            ring.add(loaded.stack_writes_map(), |bytes: &[u8]| {
                inbox.take_stack_write_record(bytes);
                0
            })?;
        }
        let ring = ring.build()?;

        let started = Instant::now();
        self.target.start()?;
        let attach_time = attached.attach_time;
        let mut tracing = Tracing::new(self, options, &loaded, &ring, &inbox, attached, traced);
        let stop = tracing.until_stopped(drain, mode, started)?;
        // The recording lasted until now; detaching is not part of it.
        let duration = started.elapsed();
        let TracingEnd {
            mut events,
            probes,
            traced,
            mut held,
            mut losses,
        } = tracing.end();

        // Held stopped from now until the probes are gone, the pauses served until every thread
        // is: an exception in between would meet a trampoline with nobody to pause the thread.
        if let Some(seizer) = &mut self.seizer {
            seizer.hold();
        }
        // The same for a started command (SIGSTOP: utrace is its parent, nobody else sees it).
        let stopped_for_detach = match unwind_shadow && self.seizer.is_none() {
            true => self.target.stop_every_thread(),
            false => None,
        };
        loaded.set_serving_stack_writes(false);
        loaded.set_recording(false);
        // Everything recorded is taken and secured before the release (see Drain::secure);
        // what the probes write from now on (pauses, stack-write requests) comes after.
        ring.consume_raw();
        self.place_served_pauses(&inbox, None);
        let _ = drain_events(&inbox, drain, true, &mut events);
        drain.secure();
        let detach_time = AttachedProbes::detach(probes);
        let last_pauses = self.seizer.take().map(|seizer| {
            restore_return_addresses(pid, &loaded);
            seizer.release()
        });
        // Stack ids are never reused (see stacks.bpf.h): the map holds every stack the events
        // name.
        self.note_mapped_files();
        let user_stacks = (!self.stack_files.is_empty())
            .then(|| user_stacks::symbolize(self.table(), loaded.user_stacks(), &self.stack_files));
        // What the probes wrote last. Processes that still wait for the recorder run on
        // untraced, with the stack writes they asked for made.
        ring.consume_raw();
        self.place_served_pauses(&inbox, last_pauses);
        // Full or not, nothing more comes.
        let _ = drain_events(&inbox, drain, true, &mut events);
        losses.tell(&loaded, drain);
        for note in inbox.take_notes() {
            match note {
                Note::StackWrite(request) => {
                    serve_stack_writes(request);
                    held = true;
                }
                Note::ProcessChanged(change) => {
                    if let Some(traced) = &traced {
                        traced.resume(change.stopped_pid());
                    }
                }
                Note::LibrariesChanged => held = true,
            }
        }
        if let Some(every_thread_stopped) = stopped_for_detach {
            // After the requests above: a frame re-armed by one gets its return address back.
            // Not into the stack of a thread that still runs.
            if every_thread_stopped {
                restore_return_addresses(pid, &loaded);
            } else {
                log::warn!(
                    "a thread of pid {pid} did not stop for the detach: its frames keep the \
                     kernel's return trampoline, and an exception unwinding through one ends it"
                );
            }
            held = true;
        }
        if held {
            self.target.resume();
        }
        if let Some(traced) = &traced {
            log::debug!("traced {} processes", traced.count());
        }
        let unidentified = loaded.unidentified_hits();
        if unidentified > 0 {
            log::warn!(
                "{unidentified} probe hits were not recorded: the probes could not tell which \
                 function they were for (this kernel gives them no cookie)"
            );
        }
        let unverified = loaded.unverified_library_calls();
        if unverified > 0 {
            log::warn!(
                "{unverified} calls through the PLT stubs of traced libraries were not counted: \
                 the kernel could not say where the library was while its memory map changed \
                 (--probe-at-entry probes the stubs themselves)"
            );
        }
        Ok(SessionEnd {
            stop,
            events,
            lost_events: loaded.lost_events(),
            lost_by_thread: loaded.lost_by_thread(),
            duration,
            attach_time,
            detach_time,
            user_stacks,
        })
    }

    /// The planned files the target maps now (after a dlopen or dlclose), by module, each with
    /// the path that opens it where it is mapped now. The libraries among them that `--nest-lib`
    /// matches and that are not planned yet are planned, and their functions handed to `drain`.
    pub(super) fn mapped_modules(
        &mut self,
        drain: &mut dyn Drain,
    ) -> Result<Vec<(usize, PathBuf)>, GrowError> {
        let pid = self.target.pid();
        let mapped =
            executable_files(pid).with_context(|| format!("cannot read /proc/{pid}/maps"))?;
        let mapped: Vec<TracedFile> = mapped
            .into_iter()
            .map(|file| TracedFile {
                path: file.path,
                open_path: file.open_path,
            })
            .collect();
        let added = self
            .planner
            .extend(Loaded::Libraries(mapped.clone()))
            .map_err(anyhow::Error::from)?;
        if !added.table.modules.is_empty() {
            hand_over(&added, drain)?;
        }
        let mut modules: Vec<(usize, PathBuf)> = Vec::new();
        for file in mapped {
            // One file mapped under two paths (a symlink) is one module.
            match self.planner.module_of(&file) {
                Some(module) if !modules.iter().any(|(known, _)| *known == module) => {
                    modules.push((module, file.open_path));
                }
                _ => {}
            }
        }
        Ok(modules)
    }

    /// Attaches the probes of a library the target has opened with dlopen, where it is mapped
    /// now (`open_path`): one opened before and closed since may be elsewhere, and its module
    /// opens there from now on (for the processes `--follow` forks from the target).
    pub(super) fn probe_opened_library(
        &mut self,
        loaded: &LoadedProbes,
        module: usize,
        open_path: PathBuf,
    ) -> Result<AttachedProbes> {
        self.planner.mapped_at(module, open_path);
        let attached = self.attach_modules(loaded, &[module], self.target.pid())?;
        log::debug!(
            "probed {} after dlopen",
            self.planner.plan().files[module].path
        );
        Ok(attached)
    }

    /// Says which libraries the target closed have their probes released (`--debug`).
    pub(super) fn say_closed(&self, closed: &[usize]) {
        for &module in closed {
            log::debug!(
                "releasing the probes of {} after dlclose",
                self.planner.plan().files[module].path
            );
        }
    }

    /// Attaches the probes of the target's program: those of `modules`, the files planned at
    /// start, and of its library calls where they land.
    pub(super) fn attach_program(
        &self,
        loaded: &LoadedProbes,
        modules: &[usize],
    ) -> Result<AttachedProbes> {
        let pid = self.target.pid();
        let mut attached = self.attach_modules(loaded, modules, pid)?;
        attached.absorb(loaded.attach_landings(&self.planner.plan().landings, pid)?);
        Ok(attached)
    }

    /// Attaches the probes of `modules` (indices into the table), filtered to `pid`.
    fn attach_modules(
        &self,
        loaded: &LoadedProbes,
        modules: &[usize],
        pid: u32,
    ) -> Result<AttachedProbes> {
        let plan = self.planner.plan();
        let paths: Vec<(usize, &Path)> = modules
            .iter()
            .map(|&module| (module, plan.files[module].open_path.as_path()))
            .collect();
        let sites = &plan.exits_before_return_value;
        Ok(loaded.attach(&plan.table, &plan.exits, sites, &plan.landings, &paths, pid)?)
    }

    /// Probes a process the BPF side stopped under `--follow`: a forked child gets the probes of
    /// its parent's modules; a process that exec'ed gets its new program's (planned now, unless
    /// another process runs it already). The caller lets it go on.
    pub(super) fn follow_change(
        &mut self,
        change: ProcessChange,
        loaded: &LoadedProbes,
        traced: &mut TracedProcesses,
        drain: &mut dyn Drain,
    ) -> Result<AttachedProbes, GrowError> {
        let (pid, modules) = match change {
            ProcessChange::Forked { child, parent } => {
                let modules = traced.modules(parent).to_vec();
                traced
                    .add(child, modules.clone())
                    .with_context(|| format!("cannot follow pid {child}"))?;
                (child, modules)
            }
            ProcessChange::Execed { pid } => {
                let planned = self.plan_program(pid, drain)?;
                (pid, traced.unprobed_after_exec(pid, &planned))
            }
        };
        if debug_enabled() {
            log::debug!("following pid {pid} ({change:?})");
        }
        Ok(self
            .attach_modules(loaded, &modules, pid)
            .with_context(|| format!("cannot follow pid {pid}"))?)
    }

    /// The modules of the program `pid` has just exec'ed: those of its files already planned,
    /// and the others planned now and handed to `drain`.
    fn plan_program(&mut self, pid: u32, drain: &mut dyn Drain) -> Result<Vec<usize>, GrowError> {
        let executable = std::fs::read_link(format!("/proc/{pid}/exe"))
            .with_context(|| format!("cannot read /proc/{pid}/exe"))?;
        let program = Program::about_to_start(&executable);
        let added = self
            .planner
            .extend(Loaded::Program(program))
            .map_err(anyhow::Error::from)?;
        if !added.table.modules.is_empty() {
            hand_over(&added, drain)?;
        }
        Ok(added.modules)
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

/// Why probing more of the traced processes during the session (a library loaded, a process
/// followed) failed.
#[derive(Debug, thiserror::Error)]
pub enum GrowError {
    /// The drain could take no more functions: the recording stops.
    #[error("the recording stopped taking events")]
    DrainFull,
    /// Planning or attaching failed: that part runs on untraced.
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

/// Hands the functions planned during the session to `drain`.
fn hand_over(added: &Extension, drain: &mut dyn Drain) -> Result<(), GrowError> {
    match drain.more_functions(&added.table) {
        true => Ok(()),
        false => Err(GrowError::DrainFull),
    }
}

/// Whether the shadow stack must pause the process's threads: it maps an unwinder, and exits
/// are seen with uretprobes.
fn needs_pauses(plan: &crate::plan::ProbePlan) -> bool {
    !plan.unwinder_sites.is_empty() && plan.exit_policy == ExitPolicy::Uretprobe
}

/// One warning line: why a running process with an unwinder is not held with ptrace, and what
/// that costs.
fn say_not_seized(error: &SeizeError, policy: ExitPolicy) {
    match policy {
        ExitPolicy::Ret => log::warn!(
            "{error}: exits are probed on their instructions (single-stepped, about 20 µs \
             each instead of under 1 µs), since the shadow stack for C++ exceptions and \
             Rust panics needs to pause threads"
        ),
        ExitPolicy::Uretprobe => log::warn!("{error}: the shadow stack is off"),
    }
}

/// What planning needs of the options and of the target. `attached` says how a running process
/// is held, `kernel_attach` how kernel functions are attached when `-k` asks for some.
fn plan_options(
    options: &TraceOptions,
    target: &Target,
    attached: ProcessOrigin,
    kernel_attach: Option<KernelAttach>,
) -> PlanOptions {
    let mut events = EventRequests {
        // Asked for by default: recorded where the kernel loads the program.
        preemption: options.events.preemption && probe::preemption_recordable(),
        ..options.events.clone()
    };
    if let Some(attach) = kernel_attach {
        events.kernel_functions.probes = attach.probe_class();
    }
    PlanOptions {
        nest_libs: options.nest_libs.clone(),
        debug: options.debug.clone(),
        plt_libraries: options.plt_libraries.clone(),
        functions: options.filter.clone(),
        sites: options.sites,
        exits: options.exit_probes,
        follow: options.follow,
        origin: match target {
            Target::Started(_) => ProcessOrigin::Started,
            Target::Running(_) => attached,
        },
        preloaded_libraries: preloads_libraries(target),
        kernel_lacks_sessions: !probe::strategy().sessions,
        ifuncs: super::ifuncs::ifunc_choices(target),
        values: options.values.clone(),
        events,
        source_lines: options.source_lines,
    }
}

/// Whether the dynamic loader of the target preloads libraries (`LD_PRELOAD`,
/// `/etc/ld.so.preload`), which come first in its binding order and which utrace does not list.
fn preloads_libraries(target: &Target) -> bool {
    let listed = |text: &str| !text.trim().is_empty();
    if std::fs::read_to_string("/etc/ld.so.preload").is_ok_and(|text| listed(&text)) {
        return true;
    }
    // An environment that cannot be read may preload anything.
    (target.environment_variable("LD_PRELOAD"))
        .map_or(true, |value| value.is_some_and(|value| listed(&value)))
}

/// Writes what a stack write request asks for; the process stays stopped until it is served,
/// written or not.
pub fn serve_stack_writes(request: Result<StackWriteRequest, MalformedRequest>) {
    let written = request.map_err(anyhow::Error::from).and_then(|request| {
        request
            .apply()
            .with_context(|| format!("cannot write the stack of process {}", request.pid))
    });
    if let Err(error) = written {
        log::warn!("{error:#}: an exception may not unwind");
    }
}

/// Gives back the return addresses the kernel replaced in the frames still running of a process
/// utrace leaves running (its threads held stopped, the probes gone): an exception that later
/// unwinds through one of them would meet the trampoline and end the program.
fn restore_return_addresses(pid: u32, loaded: &LoadedProbes) {
    let Some(trampoline) = super::stack_writes::trampoline_address(pid) else {
        return;
    };
    let request = super::stack_writes::restore_at_detach(
        pid,
        trampoline,
        &loaded.replaced_return_addresses(),
    );
    if request.writes.is_empty() {
        return;
    }
    log::debug!(
        "restored {} return addresses before letting go",
        request.writes.len()
    );
    if let Err(error) = request.apply() {
        log::warn!(
            "cannot restore return addresses of pid {pid}: {error}: an exception may not unwind"
        );
    }
}

/// What a guardian of `pid` would look after, if the recording needs one: the shadow stack's
/// frames (`unwind_shadow`), or, where the BPF programs cannot signal other processes, the
/// processes the recorder may stop (a started command at its dlopens, followed processes at their
/// forks and execs); and, with `uprobe_multi` links (whose release the kernel may hold up), a
/// reference to every link, so that a killed recorder goes at once; with perf-event links, a
/// rescuer keeps the watches, so that a thread that throws before it has stopped the target
/// still meets the unwinder's.
fn guardian_duties(
    pid: u32,
    loaded: &LoadedProbes,
    unwind_shadow: bool,
    stop_at_dlopen_dlclose: bool,
    options: &TraceOptions,
) -> Option<Guarding> {
    let signals_from_guardian = probe::strategy().signals == probe::Signals::FromGuardian;
    let stops = stop_at_dlopen_dlclose || options.follow;
    let rescues = unwind_shadow || (signals_from_guardian && stops);
    let keeps_links = match probe::strategy().mode {
        probe::AttachMode::Multi => Some(probe::Kept::Every),
        probe::AttachMode::Single => rescues.then_some(probe::Kept::Watches),
    };
    if !rescues && keeps_links.is_none() {
        return None;
    }
    let Some(maps) = loaded.guardian_map_ids() else {
        log::warn!("cannot start the guardian process: its maps have no ids");
        return None;
    };
    let duties = Duties {
        target: pid,
        deaths_map: maps.deaths,
        shadow_stacks_map: unwind_shadow.then_some(maps.shadow_stacks),
        followed_map: (options.follow && signals_from_guardian).then_some(maps.followed),
    };
    Some(Guarding {
        duties,
        rescues,
        keeps_links,
    })
}

/// What the guardian is started for.
struct Guarding {
    duties: Duties,
    /// It rescues the target: the BPF programs stop the target and write it a note when the
    /// recorder dies.
    rescues: bool,
    /// Which links it keeps a reference to (src/probe/link_keeper.rs).
    keeps_links: Option<probe::Kept>,
}

/// Starts the guardian of `guarding` and tells the BPF programs about it if it rescues the
/// target; without one (a warning says why), a killed recorder leaves the program as the BPF
/// programs can.
fn start_guardian(guarding: &Guarding, loaded: &mut LoadedProbes) -> Option<Guardian> {
    let duties = &guarding.duties;
    match Guardian::start(duties, guarding.keeps_links) {
        Ok(guardian) => {
            if guarding.rescues {
                loaded.set_guardian(guardian.pid());
            }
            log::debug!("guardian of pid {}: pid {}", duties.target, guardian.pid());
            Some(guardian)
        }
        Err(error) if guarding.rescues => {
            log::warn!(
                "cannot start the guardian process ({error}): if utrace is killed, the program \
                 may be left stopped, or end at an exception"
            );
            None
        }
        Err(error) => {
            log::debug!("cannot start the guardian process ({error}): a killed recorder goes once the kernel has released its probes");
            None
        }
    }
}

/// Says whether the shadow stack for the unwinder is on and where the unwinder is (`--debug`).
fn say_unwinders(unwinders: &[WatchSites], on: bool) {
    if unwinders.is_empty() {
        log::debug!("shadow stack off: the program maps no unwinder");
    } else if !on {
        log::debug!(
            "shadow stack off: utrace neither started the process nor holds it with ptrace"
        );
        return;
    }
    for sites in unwinders {
        log::debug!(
            "shadow stack on: {} unwinder entry points probed in {}",
            sites.offsets.len(),
            sites.file.display()
        );
    }
}

/// Whether `-d` asked for the debugging lines: what only they need is not worked out otherwise.
fn debug_enabled() -> bool {
    log::log_enabled!(log::Level::Debug)
}
