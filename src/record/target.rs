//! What is traced: a command utrace starts (`-c`), or a process already running (`-p`); and which
//! of their files get probes.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::attach::RunningProcess;
use super::proc_maps::executable_files;
use super::process::{resolve_program, ChildSetup, ExitStatus, HeldChild};
use super::signals::Received;
use crate::elf::ldcache::LdCache;
use crate::elf::loader::load_order;
use crate::plan::LibraryPatterns;

/// What the user pointed utrace at.
pub enum TargetSpec {
    /// A command and its arguments.
    Command(Vec<String>),
    Pid(u32),
}

/// One file to probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracedFile {
    /// The path reports show.
    pub path: String,
    /// The path that opens it for reading and for the uprobes (a running process's files go
    /// through `/proc/PID/map_files`).
    pub open_path: PathBuf,
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

impl Target {
    /// Starts the command (held before exec) or finds the process, and lists its files to probe:
    /// the executable first, then the libraries `nest_libs` matches.
    pub fn prepare(
        spec: &TargetSpec,
        setup: &ChildSetup,
        nest_libs: &LibraryPatterns,
    ) -> Result<(Target, Vec<TracedFile>)> {
        match spec {
            TargetSpec::Command(command) => {
                let program = resolve_program(&command[0])?;
                let path = program
                    .canonicalize()
                    .with_context(|| format!("cannot open {}", program.display()))?;
                let mut files = vec![TracedFile {
                    path: path.to_string_lossy().into_owned(),
                    open_path: path.clone(),
                }];
                files.extend(command_libraries(&path, nest_libs));
                // Planning reads files only; the fork comes last so the child waits the least.
                let child = HeldChild::spawn(&program, command, setup)?;
                Ok((Target::Started(child), files))
            }
            TargetSpec::Pid(pid) => {
                let process = RunningProcess::open(*pid)?;
                let files = process_files(&process, nest_libs)?;
                Ok((Target::Running(process), files))
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

/// The libraries of a program about to start that `nest_libs` selects, found as the dynamic
/// loader will find them.
fn command_libraries(program: &Path, nest_libs: &LibraryPatterns) -> Vec<TracedFile> {
    if nest_libs.is_empty() {
        return Vec::new();
    }
    let order = load_order(program, &LdCache::system());
    for name in &order.missing {
        eprintln!("utrace: warning: {name} (needed by the program) was not found; the loader will fail too");
    }
    let paths: Vec<String> = order
        .libraries
        .iter()
        .map(|l| l.path.to_string_lossy().into_owned())
        .collect();
    selected_libraries(nest_libs, &paths, |path| PathBuf::from(path))
}

/// The executable and the selected libraries a running process has mapped.
fn process_files(process: &RunningProcess, nest_libs: &LibraryPatterns) -> Result<Vec<TracedFile>> {
    let pid = process.pid();
    let mapped = executable_files(pid).with_context(|| format!("cannot read /proc/{pid}/maps"))?;
    let executable = process.executable.to_string_lossy();
    let executable = executable.strip_suffix(" (deleted)").unwrap_or(&executable);
    let main = mapped
        .iter()
        .find(|file| file.path == executable)
        .with_context(|| format!("pid {pid}: {executable} is not mapped (is it exiting?)"))?;
    let mut files = vec![TracedFile {
        path: main.path.clone(),
        open_path: main.open_path.clone(),
    }];
    let libraries: Vec<String> = mapped
        .iter()
        .filter(|file| file.path != main.path)
        .map(|file| file.path.clone())
        .collect();
    files.extend(selected_libraries(nest_libs, &libraries, |path| {
        mapped
            .iter()
            .find(|file| file.path == path)
            .map(|file| file.open_path.clone())
            .unwrap_or_else(|| PathBuf::from(path))
    }));
    Ok(files)
}

/// The libraries among `paths` that `nest_libs` selects; warns of patterns that select none.
fn selected_libraries(
    nest_libs: &LibraryPatterns,
    paths: &[String],
    open_path: impl Fn(&str) -> PathBuf,
) -> Vec<TracedFile> {
    let all: Vec<&str> = paths.iter().map(String::as_str).collect();
    for pattern in nest_libs.unmatched(&all) {
        eprintln!("utrace: warning: --nest-lib {pattern} matches none of the program's libraries");
    }
    paths
        .iter()
        .filter(|path| nest_libs.matches(path))
        .map(|path| TracedFile {
            path: path.clone(),
            open_path: open_path(path),
        })
        .collect()
}
