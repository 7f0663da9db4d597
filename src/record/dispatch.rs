//! The session's loop: poll the ring buffers, hand the events to the drain, and dispatch each
//! note to its handler (a library loaded, a followed process changed, a stack to write), until
//! the target ends, `--duration` passes or a signal says stop. It decides nothing else: what to
//! probe is the plan's business, how to attach the probe layer's.

use std::time::{Duration, Instant};

use anyhow::Result;
use libbpf_rs::RingBuffer;

use super::budget::BudgetKeeper;
use super::follow::{ProcessChange, TracedProcesses};
use super::opened_libraries::OpenedLibraries;
use super::progress::Progress;
use super::ring::{Inbox, Note};
use super::session::{
    serve_stack_writes, Drain, GrowError, Session, SessionMode, Stop, TraceOptions,
};
use super::signals::SignalWatch;
use super::target::SignalAction;
use crate::probe::{AttachedProbes, LoadedProbes};
use crate::table::{Detachment, FunctionTable};

/// How long the consumer sleeps when the probes have not woken it. Bounds the delay of events
/// at low rates; at high rates the fill-level wake-up comes first.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// How often the drain is told a flush is due, so a killed recorder loses at most this much and
/// live output is never held longer.
const FLUSH_INTERVAL: Duration = Duration::from_millis(100);
/// How long the probes `--budget` replaced stay attached: the calls they saw enter return to them
/// meanwhile, and are timed.
const OLD_PROBES_LINGER: Duration = Duration::from_millis(200);
/// How many functions detached at once the line that says so names (`-d`: all).
const NAMED_AT_ONCE: usize = 8;
/// How long a command may run on after the first Ctrl-C passed to it before utrace says how to
/// stop recording: one that ends on it ends sooner, and needs no word.
const SIGNAL_HINT_AFTER: Duration = Duration::from_secs(1);

/// A session while it traces: what it attached, whom it follows, and whether the target waits
/// for the recorder.
pub struct Tracing<'a, 'obj> {
    session: &'a mut Session,
    options: &'a TraceOptions,
    loaded: &'a LoadedProbes<'obj>,
    ring: &'a RingBuffer<'a>,
    inbox: &'a Inbox,
    /// The target's probes: those of its program, and the landings of its PLT calls.
    attached: AttachedProbes,
    /// The target's probes in the libraries it opens and closes with dlopen and dlclose.
    libraries: OpenedLibraries,
    /// Per followed process (by pid), its probes: detached with the target's, all at once,
    /// unless the process ends first.
    followed_probes: Vec<(u32, AttachedProbes)>,
    /// Threads releasing the probes of followed processes that have ended.
    releases: Vec<std::thread::JoinHandle<Duration>>,
    traced: Option<TracedProcesses>,
    /// A process stopped for the recorder (a stack write request, a dlopen) waits to be let go
    /// on.
    held: bool,
    /// Stack write requests served so far.
    served: u64,
    /// Events handed to the drain.
    events: u64,
    /// The target's status once it has ended, while followed processes still run.
    target_end: Option<Option<super::process::ExitStatus>>,
    losses: LossWatch,
    /// After the first stop signal went to the command: when, and what to say if it runs on.
    signal_hint: Option<(Instant, String)>,
    /// Weighs the probes' cost (`--budget`; once, for a running process).
    budget: Option<BudgetKeeper>,
    /// The modules planned at start: those whose probes `--budget` replaces.
    program_modules: Vec<usize>,
}

/// Tells the drain of events lost since it was last told.
#[derive(Default)]
pub struct LossWatch {
    told: u64,
}

impl LossWatch {
    pub fn tell(&mut self, loaded: &LoadedProbes, drain: &mut dyn Drain) {
        let lost = loaded.lost_events();
        if lost > self.told {
            drain.events_lost(lost - self.told);
            self.told = lost;
        }
    }
}

/// What a finished [`Tracing`] leaves to tear down.
pub struct TracingEnd {
    pub events: u64,
    /// Every set of probes, the target's and each followed process's.
    pub probes: Vec<AttachedProbes>,
    pub traced: Option<TracedProcesses>,
    /// The target waits stopped for the recorder.
    pub held: bool,
    pub losses: LossWatch,
}

/// The drain could take no more: the recording stops.
pub struct DrainFull;

/// Hands the events gathered in `inbox` to `drain`, adding what it took to `events`.
pub fn drain_events(
    inbox: &Inbox,
    drain: &mut dyn Drain,
    due: bool,
    events: &mut u64,
) -> Result<(), DrainFull> {
    let mut pending = inbox.events.borrow_mut();
    let before = pending.len();
    let taken = drain.take(&mut pending, due);
    *events += (before - pending.len()) as u64;
    taken.then_some(()).ok_or(DrainFull)
}

impl<'a, 'obj> Tracing<'a, 'obj> {
    pub fn new(
        session: &'a mut Session,
        options: &'a TraceOptions,
        loaded: &'a LoadedProbes<'obj>,
        ring: &'a RingBuffer<'a>,
        inbox: &'a Inbox,
        attached: AttachedProbes,
        traced: Option<TracedProcesses>,
    ) -> Self {
        let program_modules: Vec<usize> = (0..session.table().modules.len()).collect();
        let budget = session.budget_keeper(options);
        Tracing {
            session,
            options,
            loaded,
            ring,
            inbox,
            attached,
            libraries: OpenedLibraries::new(program_modules.clone()),
            followed_probes: Vec::new(),
            releases: Vec::new(),
            traced,
            held: false,
            served: 0,
            events: 0,
            target_end: None,
            losses: LossWatch::default(),
            signal_hint: None,
            budget,
            program_modules,
        }
    }

    /// Traces until something says stop, and says what.
    pub fn until_stopped(
        &mut self,
        drain: &mut dyn Drain,
        mode: SessionMode,
        started: Instant,
    ) -> Result<Stop> {
        let mut last_flush = Instant::now();
        let pid = self.session.target.pid();
        let mut progress = Progress::new(mode == SessionMode::Record, pid);
        let mut watch = SignalWatch::default();
        let stop = loop {
            // Negative results are EINTR from our own signals; the next round handles them.
            self.ring.poll_raw(POLL_INTERVAL);
            self.ring.consume_raw();
            // After the events: a pause served before they were consumed goes among them.
            self.session.place_served_pauses(self.inbox, None);
            let due = last_flush.elapsed() >= FLUSH_INTERVAL;
            if due {
                last_flush = Instant::now();
                self.session.note_mapped_files();
            }
            if self.drain_events(drain, due).is_err() || self.dispatch_notes(drain).is_err() {
                break Stop::DrainFailed;
            }
            self.keep_budget(drain);
            self.losses.tell(self.loaded, drain);
            if self.held && self.let_go_when_served(drain).is_err() {
                break Stop::DrainFailed;
            }
            let pending = self.inbox.events.borrow().len() as u64;
            progress.update(self.events + pending, self.loaded.lost_events());
            if drain.is_full() {
                break self.target_end.map_or(Stop::Asked, Stop::Ended);
            }
            if let Some(stop) = self.stop_asked(started, &mut watch)? {
                break stop;
            }
        };
        progress.clear();
        Ok(stop)
    }

    /// Hands the events gathered so far to the drain.
    fn drain_events(&mut self, drain: &mut dyn Drain, due: bool) -> Result<(), DrainFull> {
        if let Some(budget) = &mut self.budget {
            budget.observe_pending(&self.inbox.events.borrow());
        }
        let drained = drain_events(self.inbox, drain, due, &mut self.events);
        if let Some(budget) = &mut self.budget {
            budget.left_pending(self.inbox.events.borrow().len());
        }
        drained
    }

    /// Detaches the functions whose probes take the program past its budget, if any: the
    /// program's probes are attached anew without them, handed the recording, and the old ones
    /// released on a thread of their own once the calls they saw enter have mostly returned.
    fn keep_budget(&mut self, drain: &mut dyn Drain) {
        let Some(budget) = &mut self.budget else {
            return;
        };
        let detached = budget.due_detachments();
        if budget.is_done() {
            self.budget = None;
        }
        if detached.is_empty() {
            return;
        }
        let functions: Vec<_> = detached.iter().map(|d| d.function).collect();
        self.loaded.start_replacing(&functions);
        let replaced = (self.session)
            .attach_program(self.loaded, &self.program_modules)
            .and_then(|probes| {
                self.loaded.switch_generations()?;
                Ok(probes)
            });
        let probes = match replaced {
            Ok(probes) => probes,
            Err(error) => {
                // The old probes go on recording every function; nothing more is tried.
                log::warn!("--budget: cannot detach functions: {error:#}");
                self.budget = None;
                return;
            }
        };
        let old = std::mem::replace(&mut self.attached, probes);
        self.releases.push(std::thread::spawn(move || {
            std::thread::sleep(OLD_PROBES_LINGER);
            AttachedProbes::detach(vec![old])
        }));
        say_detached(self.session.table(), &detached);
        drain.functions_detached(&detached);
    }

    /// Acts on every note gathered so far, in the order they came.
    fn dispatch_notes(&mut self, drain: &mut dyn Drain) -> Result<(), DrainFull> {
        for note in self.inbox.take_notes() {
            match note {
                Note::LibrariesChanged => self.libraries_changed(drain)?,
                Note::ProcessChanged(change) => self.process_changed(change, drain)?,
                Note::StackWrite(request) => {
                    serve_stack_writes(request);
                    self.served += 1;
                    self.held = true;
                }
            }
        }
        // Before the events of what was planned: its probes are attached, not yet consumed.
        self.inbox.planned(self.session.plan());
        Ok(())
    }

    /// A dlopen or dlclose returned: probes the libraries the target mapped that `--nest-lib`
    /// matches, whether it had them open before or not, and releases the probes of those it
    /// unmapped. A command utrace started waits stopped at the return: it goes on, probed or
    /// not, once every note is served.
    fn libraries_changed(&mut self, drain: &mut dyn Drain) -> Result<(), DrainFull> {
        self.held = true;
        let mapped = match self.session.mapped_modules(drain) {
            Ok(mapped) => mapped,
            Err(GrowError::DrainFull) => return Err(DrainFull),
            Err(GrowError::Failed(error)) => {
                log::warn!("{error:#}");
                return Ok(());
            }
        };
        let pid = self.session.target.pid();
        let changes = self.libraries.changes(&mapped);
        if !changes.closed.is_empty() {
            self.session.say_closed(&changes.closed);
            self.libraries.release(&changes.closed);
            if let Some(traced) = &mut self.traced {
                traced.remove_modules(pid, &changes.closed);
            }
        }
        for (module, open_path) in changes.opened {
            self.libraries.wait_for_release(module);
            match (self.session).probe_opened_library(self.loaded, module, open_path) {
                Ok(probes) => {
                    self.libraries.add(module, probes);
                    if let Some(traced) = &mut self.traced {
                        traced.add_modules(pid, [module]);
                    }
                }
                Err(error) => log::warn!("{error:#}"),
            }
        }
        Ok(())
    }

    /// A followed process forked or exec'ed and waits stopped (the BPF side stopped it): probes
    /// it and lets it go on, probed or not.
    fn process_changed(
        &mut self,
        change: ProcessChange,
        drain: &mut dyn Drain,
    ) -> Result<(), DrainFull> {
        let Some(traced) = &mut self.traced else {
            return Ok(());
        };
        let probed = self
            .session
            .follow_change(change, self.loaded, traced, drain);
        traced.resume(change.stopped_pid());
        if let ProcessChange::Execed { pid } = change {
            if pid == self.session.target.pid() {
                self.libraries.add_lasting(traced.modules(pid));
            }
        }
        match probed {
            Ok(more) => self.followed_probes.push((change.stopped_pid(), more)),
            Err(GrowError::DrainFull) => return Err(DrainFull),
            Err(GrowError::Failed(error)) => log::warn!("{error:#}"),
        }
        self.release_probes_of_ended_processes();
        Ok(())
    }

    /// Releases, on a thread of their own, the probes of followed processes that have ended: a
    /// program that forks thousands of short-lived children would otherwise keep thousands of
    /// links until the end, and a killed recorder's process would take seconds to go (each
    /// release waits for RCU grace periods).
    fn release_probes_of_ended_processes(&mut self) {
        let Some(traced) = &self.traced else {
            return;
        };
        let (ended, running): (Vec<_>, Vec<_>) = std::mem::take(&mut self.followed_probes)
            .into_iter()
            .partition(|(pid, _)| traced.has_ended(*pid));
        self.followed_probes = running;
        if !ended.is_empty() {
            let sets = ended.into_iter().map(|(_, probes)| probes).collect();
            self.releases
                .push(std::thread::spawn(move || AttachedProbes::detach(sets)));
        }
    }

    /// Lets a held target go on once every thread has stopped, so that no request is on its
    /// way (another thread's stop, sent but not yet taken, would be cancelled by the continue
    /// before its writes are made), and every request is served.
    fn let_go_when_served(&mut self, drain: &mut dyn Drain) -> Result<(), DrainFull> {
        self.session.target.wait_until_stopped();
        self.ring.consume_raw();
        self.dispatch_notes(drain)?;
        if self.served == self.loaded.stack_write_requests() {
            self.session.target.resume();
            self.held = false;
            if let Some(repair) = self.session.stack_repair_function() {
                self.inbox.pauses_ended(repair, super::monotonic_now_ns());
            }
        }
        Ok(())
    }

    /// Whether the session should stop now: the target (and every followed process) ended,
    /// `--duration` passed, or a signal asked.
    fn stop_asked(&mut self, started: Instant, watch: &mut SignalWatch) -> Result<Option<Stop>> {
        if self.target_end.is_none() {
            self.target_end = self.session.target.ended()?;
        }
        if let Some(status) = self.target_end {
            let followed_ended = self
                .traced
                .as_mut()
                .map_or(true, TracedProcesses::followed_ended);
            if followed_ended {
                return Ok(Some(Stop::Ended(status)));
            }
        }
        // Once the target has ended (followed processes still running), its status is known
        // and there is nobody to wait for or to pass a signal to.
        let asked = self.target_end.map_or(Stop::Asked, Stop::Ended);
        if self
            .options
            .duration
            .is_some_and(|limit| started.elapsed() >= limit)
        {
            return Ok(Some(asked));
        }
        self.say_signal_hint();
        let Some(received) = watch.take() else {
            return Ok(None);
        };
        let action = match self.target_end {
            Some(_) => SignalAction::Stop,
            None => self.session.target.on_signal(received),
        };
        if action == SignalAction::Continue {
            let program = self.session.program_name(&self.options.target);
            let hint = received.hint(&program, self.session.target.pid());
            self.signal_hint = Some((Instant::now(), hint));
        }
        Ok(match (action, received.count) {
            (SignalAction::Continue, _) => None,
            (SignalAction::Stop, 1) => Some(asked),
            (SignalAction::Stop, _) => Some(Stop::Interrupted(received.signal)),
        })
    }

    /// Says once how to stop recording, when the command runs on a while after the first
    /// signal went to it (it may ignore it: a recording then goes on for as long as it runs).
    fn say_signal_hint(&mut self) {
        let due = |(sent, _): &mut (Instant, String)| sent.elapsed() >= SIGNAL_HINT_AFTER;
        if let Some((_, hint)) = self.signal_hint.take_if(due) {
            log::info!("{hint}");
        }
    }

    /// What is left to tear down.
    pub fn end(self) -> TracingEnd {
        for release in self.releases {
            let _ = release.join();
        }
        let mut probes: Vec<AttachedProbes> = (self.followed_probes.into_iter())
            .map(|(_, probes)| probes)
            .collect();
        probes.push(self.attached);
        probes.extend(self.libraries.end());
        TracingEnd {
            events: self.events,
            probes,
            traced: self.traced,
            held: self.held,
            losses: self.losses,
        }
    }
}

/// Says which functions `--budget` detached, with their call rates: the first few, every one
/// under `-d`.
fn say_detached(table: &FunctionTable, detached: &[Detachment]) {
    let named: Vec<String> = (detached.iter())
        .filter_map(|d| {
            let function = table.function(d.function)?;
            Some(format!("{} ({} calls/s)", function.name, d.calls_per_s))
        })
        .collect();
    let after = detached.first().map_or(0.0, |d| d.after_ns as f64 / 1e9);
    let count = crate::diagnostics::plural(detached.len() as u64, "function", "functions");
    let shown = match log::log_enabled!(log::Level::Debug) {
        true => named.len(),
        false => NAMED_AT_ONCE,
    };
    let named = crate::diagnostics::first_of(&named, shown, "-d names each");
    log::info!("--budget: detached {count} after {after:.2} s: {named}");
}
