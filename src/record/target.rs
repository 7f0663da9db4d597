//! What is traced: a command utrace starts (`-c`), or a process already running (`-p`); and the
//! files of the program it runs.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::proc_maps::executable_files;
use super::process::{resolve_program, ChildSetup, ExitStatus, HeldChild};
use super::running::RunningProcess;
use super::signals::Received;
use super::stack_writes::Stopped;
use crate::elf::loader::mapped_load_order;
use crate::plan::{Program, TracedFile};

/// What the user pointed utrace at.
pub enum TargetSpec {
    /// A command and its arguments.
    Command(Vec<String>),
    Pid(u32),
}

/// The traced process, started or found.
pub enum Target {
    Started(HeldChild),
    Running(RunningProcess),
}

/// What the recording loop does about a stop signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalAction {
    /// Keep recording: the command decides whether it ends.
    Continue,
    /// Stop recording now.
    Stop,
}

/// A target ready to be traced, and the files of its program.
pub struct Prepared {
    pub target: Target,
    pub program: Program,
}

impl Target {
    /// The environment variable `name` of the traced program as its loader reads it: utrace's
    /// own for a command it starts (which inherits it), else the running process's at its exec
    /// (`/proc/PID/environ`); `Err` when that cannot be read.
    pub fn environment_variable(&self, name: &str) -> std::io::Result<Option<String>> {
        match self {
            Target::Started(_) => Ok(std::env::var(name).ok()),
            Target::Running(process) => {
                let environ = std::fs::read(format!("/proc/{}/environ", process.pid()))?;
                let prefix = format!("{name}=");
                let value = (environ.split(|&b| b == 0))
                    .find_map(|variable| variable.strip_prefix(prefix.as_bytes()));
                Ok(value.map(|value| String::from_utf8_lossy(value).into_owned()))
            }
        }
    }

    /// Starts the command (held before exec) or finds the process, and lists the files of its
    /// program: the executable, and every library in load order.
    pub fn prepare(spec: &TargetSpec, setup: &ChildSetup) -> Result<Prepared> {
        match spec {
            TargetSpec::Command(command) => {
                let program = resolve_program(&command[0])?;
                let path = program
                    .canonicalize()
                    .with_context(|| format!("cannot open {}", program.display()))?;
                let files = Program::about_to_start(&path);
                // Finding the files reads them only; the fork comes last so the child waits the
                // least.
                let child = HeldChild::spawn(&program, command, setup)?;
                Ok(Prepared {
                    target: Target::Started(child),
                    program: files,
                })
            }
            TargetSpec::Pid(pid) => {
                let process = RunningProcess::open(*pid)?;
                let files = process_files(&process)?;
                Ok(Prepared {
                    target: Target::Running(process),
                    program: files,
                })
            }
        }
    }

    pub fn pid(&self) -> u32 {
        match self {
            Target::Started(child) => child.pid(),
            Target::Running(process) => process.pid(),
        }
    }

    /// The command line to store in the data file.
    pub fn command_line(&self, spec: &TargetSpec) -> Vec<String> {
        match (spec, self) {
            (TargetSpec::Command(command), _) => command.clone(),
            (_, target) => {
                let pid = target.pid();
                // /proc/PID/cmdline: NUL-separated arguments.
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|raw| {
                        raw.split(|&b| b == 0)
                            .filter(|arg| !arg.is_empty())
                            .map(|arg| String::from_utf8_lossy(arg).into_owned())
                            .collect()
                    })
                    .unwrap_or_default()
            }
        }
    }

    /// Lets a command stopped at a dlopen's or dlclose's return go on (see
    /// `stop_at_dlopen_dlclose` in the BPF programs); a process utrace attached to is never
    /// stopped.
    pub fn resume(&self) {
        if let Target::Started(child) = self {
            child.signal(libc::SIGCONT);
        }
    }

    /// After a stop the BPF programs asked for (a command we started): waits until every thread
    /// of the process has stopped (the kernel reports the stop to us, its parent, once the last
    /// one has), so none is still running a probe; at most [`STOP_WAIT`]. A process utrace
    /// attached to is never stopped.
    pub fn wait_until_stopped(&self) {
        if let Target::Started(child) = self {
            let started = Instant::now();
            while !child.stopped_or_ended() && started.elapsed() < STOP_WAIT {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }

    /// Stops every thread of a started command, and waits until they are stopped (at most
    /// [`DETACH_STOP_WAIT`]): `Some(true)` when they are, `Some(false)` when one still runs (in an
    /// uninterruptible sleep); either way it is to be let go with [`resume`](Self::resume).
    /// `None` for a process utrace attached to, which is left alone.
    pub fn stop_every_thread(&self) -> Option<bool> {
        match self {
            Target::Started(child) => {
                child.signal(libc::SIGSTOP);
                // A command that has exited has no thread left running (nor a stack to write).
                let stopped = super::stack_writes::wait_until_every_thread_stops(
                    child.pid(),
                    Stopped::AnyStop,
                    DETACH_STOP_WAIT,
                );
                Some(stopped.unwrap_or(true))
            }
            Target::Running(_) => None,
        }
    }

    /// Lets a held command run; a running process runs already.
    pub fn start(&mut self) -> Result<()> {
        if let Target::Started(child) = self {
            child.release()?;
        }
        Ok(())
    }

    /// `Some` once the process has ended: with its status when utrace is its parent.
    pub fn ended(&self) -> Result<Option<Option<ExitStatus>>> {
        Ok(match self {
            Target::Started(child) => child.try_wait()?.map(Some),
            Target::Running(process) => process.has_exited().then_some(None),
        })
    }

    /// The first Ctrl-C or SIGTERM: a started command gets it (unless the terminal already sent
    /// it to the whole process group) and decides itself whether to end; an attached recording
    /// simply stops. A second one stops at once.
    pub fn on_signal(&self, received: Received) -> SignalAction {
        match self {
            Target::Started(child) if received.count == 1 => {
                if received.forward {
                    child.signal(received.signal);
                }
                SignalAction::Continue
            }
            _ => SignalAction::Stop,
        }
    }

    /// After recording stopped early: waits for a started command to end (it runs on, untraced)
    /// and returns its status.
    pub fn wait(&self) -> Result<Option<ExitStatus>> {
        match self {
            Target::Started(child) => Ok(Some(child.wait()?)),
            Target::Running(_) => Ok(None),
        }
    }
}

/// How long [`Target::wait_until_stopped`] waits: a stop takes microseconds, or milliseconds on
/// a loaded machine; a process that never stops is let go after this.
const STOP_WAIT: Duration = Duration::from_secs(1);

/// How long [`Target::stop_every_thread`] waits. Longer than [`STOP_WAIT`]: a thread left running
/// keeps the trampoline in its frames, and an exception through one ends the program; on a
/// loaded machine the last thread's stop took over a second once.
const DETACH_STOP_WAIT: Duration = Duration::from_secs(5);

/// The executable and the libraries a running process has mapped, in load order.
fn process_files(process: &RunningProcess) -> Result<Program> {
    let pid = process.pid();
    let mapped = executable_files(pid).with_context(|| format!("cannot read /proc/{pid}/maps"))?;
    let executable = process.executable.to_string_lossy();
    let executable = executable.strip_suffix(" (deleted)").unwrap_or(&executable);
    let main = mapped
        .iter()
        .find(|file| file.path == executable)
        .with_context(|| format!("pid {pid}: {executable} is not mapped (is it exiting?)"))?;
    let main = TracedFile {
        path: main.path.clone(),
        open_path: main.open_path.clone(),
    };
    let libraries: Vec<(String, PathBuf)> = mapped
        .iter()
        .filter(|file| file.path != main.path)
        .map(|file| (file.path.clone(), file.open_path.clone()))
        .collect();
    let order = mapped_load_order(&main.open_path, &libraries);
    let in_order = (order.indices.into_iter())
        .map(|index| TracedFile {
            path: libraries[index].0.clone(),
            open_path: libraries[index].1.clone(),
        })
        .collect();
    Ok(Program {
        executable: main,
        libraries: in_order,
        loaded_with_program: order.needed,
    })
}
