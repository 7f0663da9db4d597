//! `--follow`: the processes the target forks, and the programs they exec. The BPF side stops
//! each new process (and each process that execs) and says so in the ring buffer; the session
//! probes it and lets it go on. This module keeps what each traced process runs.

use std::collections::HashMap;

use super::running::{RunningProcess, RunningProcessError};
use crate::event::Event;

/// A change in the traced processes, as a ring buffer note says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessChange {
    /// `parent` forked `child`, which waits stopped.
    Forked { child: u32, parent: u32 },
    /// `pid` exec'ed a new program and waits stopped before its first instruction.
    Execed { pid: u32 },
}

impl ProcessChange {
    /// The change a ring buffer record announces; `None` for a function's event.
    pub fn of(event: &Event) -> Option<ProcessChange> {
        match event.function {
            Event::PROCESS_FORKED => Some(ProcessChange::Forked {
                child: event.pid,
                parent: event.stack,
            }),
            Event::PROCESS_EXECED => Some(ProcessChange::Execed { pid: event.pid }),
            _ => None,
        }
    }

    /// The process that waits stopped for the recorder.
    pub fn stopped_pid(self) -> u32 {
        match self {
            ProcessChange::Forked { child, .. } => child,
            ProcessChange::Execed { pid } => pid,
        }
    }
}

/// One traced process: watched for its end, and what its probes cover.
struct TracedProcess {
    process: RunningProcess,
    /// The modules (indices into the function table) probed for this process: those of every
    /// program it ran, since links stay until the process ends.
    modules: Vec<usize>,
}

/// The traced processes: the target and every process followed from it that still runs.
pub struct TracedProcesses {
    target: u32,
    processes: HashMap<u32, TracedProcess>,
    /// How many processes were followed in all.
    followed: usize,
}

impl TracedProcesses {
    /// Starts with the target, whose probes cover `modules`.
    pub fn new(target: u32, modules: Vec<usize>) -> Result<TracedProcesses, RunningProcessError> {
        let process = RunningProcess::open(target)?;
        Ok(TracedProcesses {
            target,
            processes: HashMap::from([(target, TracedProcess { process, modules })]),
            followed: 0,
        })
    }

    /// The modules probed for `pid`; empty for a process not traced.
    pub fn modules(&self, pid: u32) -> &[usize] {
        self.processes
            .get(&pid)
            .map_or(&[], |traced| traced.modules.as_slice())
    }

    /// `pid` now also runs `more` (libraries it loaded with dlopen).
    pub fn add_modules(&mut self, pid: u32, more: impl IntoIterator<Item = usize>) {
        if let Some(traced) = self.processes.get_mut(&pid) {
            traced.modules.extend(more);
        }
    }

    /// `pid` no longer runs `closed` (libraries it closed with dlclose, their probes released).
    pub fn remove_modules(&mut self, pid: u32, closed: &[usize]) {
        if let Some(traced) = self.processes.get_mut(&pid) {
            traced.modules.retain(|module| !closed.contains(module));
        }
    }

    /// A new process, probed for `modules`. Fails when it is gone already.
    pub fn add(&mut self, pid: u32, modules: Vec<usize>) -> Result<(), RunningProcessError> {
        let process = RunningProcess::open(pid)?;
        self.processes
            .insert(pid, TracedProcess { process, modules });
        self.followed += 1;
        Ok(())
    }

    /// `pid` exec'ed a program made of `modules`: returns those it has no probes for yet. The
    /// links attached for its old program stay (they go when the process ends), and a file it
    /// runs again (its own executable, through `/proc/self/exe`) is probed already: probing it
    /// twice would count each call twice.
    pub fn unprobed_after_exec(&mut self, pid: u32, modules: &[usize]) -> Vec<usize> {
        let Some(traced) = self.processes.get_mut(&pid) else {
            return modules.to_vec();
        };
        let unprobed: Vec<usize> = modules
            .iter()
            .copied()
            .filter(|module| !traced.modules.contains(module))
            .collect();
        traced.modules.extend(&unprobed);
        unprobed
    }

    /// Whether every followed process (the target aside, whose end the session sees itself)
    /// has ended. Forgets those that have: an ended process forks nothing more.
    pub fn followed_ended(&mut self) -> bool {
        let target = self.target;
        self.processes
            .retain(|&pid, traced| pid == target || !traced.process.has_exited());
        self.processes.len() == 1
    }

    /// Whether followed process `pid` has ended (or was never followed).
    pub fn has_ended(&self, pid: u32) -> bool {
        self.processes
            .get(&pid)
            .map_or(true, |traced| traced.process.has_exited())
    }

    /// How many processes were traced, the target included.
    pub fn count(&self) -> usize {
        self.followed + 1
    }

    /// Lets a process the BPF side stopped go on (probed or not). Through its pidfd; a process
    /// already gone needs nothing.
    pub fn resume(&self, pid: u32) {
        match self.processes.get(&pid) {
            Some(traced) => traced.process.signal(libc::SIGCONT),
            None => {
                if let Ok(process) = RunningProcess::open(pid) {
                    process.signal(libc::SIGCONT);
                }
            }
        }
    }
}
