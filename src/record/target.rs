//! What is traced: a command utrace starts (`-c`), or a process already running (`-p`); and which
//! of their files get probes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::proc_maps::executable_files;
use super::process::{resolve_program, ChildSetup, ExitStatus, HeldChild};
use super::running::RunningProcess;
use super::signals::Received;
use crate::elf::binding::BindingScope;
use crate::elf::ldcache::LdCache;
use crate::elf::loader::{load_order, mapped_load_order};
use crate::elf::ElfFile;
use crate::plan::{LibraryPatterns, PltLibraries};

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

/// A target ready to be traced, and what is known of its files.
pub struct Prepared {
    pub target: Target,
    pub program: ProgramFiles,
}

impl Target {
    /// Starts the command (held before exec) or finds the process, and lists its files to probe:
    /// the executable first, then the libraries `nest_libs` matches; and every library in load
    /// order, with, when `plt_libraries` needs them, what each exports.
    pub fn prepare(
        spec: &TargetSpec,
        setup: &ChildSetup,
        nest_libs: &LibraryPatterns,
        plt_libraries: &PltLibraries,
    ) -> Result<Prepared> {
        match spec {
            TargetSpec::Command(command) => {
                let program = resolve_program(&command[0])?;
                let path = program
                    .canonicalize()
                    .with_context(|| format!("cannot open {}", program.display()))?;
                let files = ProgramFiles::of(&path, nest_libs, plt_libraries, true);
                // Planning reads files only; the fork comes last so the child waits the least.
                let child = HeldChild::spawn(&program, command, setup)?;
                Ok(Prepared {
                    target: Target::Started(child),
                    program: files,
                })
            }
            TargetSpec::Pid(pid) => {
                let process = RunningProcess::open(*pid)?;
                let (executable, libraries) = process_files(&process)?;
                let files =
                    ProgramFiles::select(executable, libraries, nest_libs, plt_libraries, true);
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

    /// Lets a command stopped at a dlopen's return go on (see `stop_on_dlopen` in the BPF
    /// programs); a process utrace attached to is never stopped.
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

/// The files of a program about to start (or that a followed process has just exec'ed), found
/// as the dynamic loader will find them.
pub struct ProgramFiles {
    /// The files to probe: the executable first, then the libraries `--nest-lib` matches.
    pub files: Vec<TracedFile>,
    /// What the PLT calls bind to.
    pub scope: BindingScope,
    /// Every library of the program in load order.
    pub libraries: Vec<TracedFile>,
}

impl ProgramFiles {
    /// The files of the program at `path`; `warn` says which patterns select none of them.
    pub fn of(
        path: &Path,
        nest_libs: &LibraryPatterns,
        plt_libraries: &PltLibraries,
        warn: bool,
    ) -> ProgramFiles {
        let executable = TracedFile {
            path: path.to_string_lossy().into_owned(),
            open_path: path.to_path_buf(),
        };
        let libraries = command_libraries(path);
        ProgramFiles::select(executable, libraries, nest_libs, plt_libraries, warn)
    }

    /// The files to probe of `executable` and its `libraries` (in load order); `warn` says
    /// which patterns select none of them.
    fn select(
        executable: TracedFile,
        libraries: Vec<TracedFile>,
        nest_libs: &LibraryPatterns,
        plt_libraries: &PltLibraries,
        warn: bool,
    ) -> ProgramFiles {
        let mut files = vec![executable.clone()];
        files.extend(selected_libraries(nest_libs, &libraries, warn));
        let scope = binding_scope(plt_libraries, &executable, &libraries, warn);
        ProgramFiles {
            files,
            scope,
            libraries,
        }
    }
}

/// How long [`Target::wait_until_stopped`] waits: a stop takes microseconds, or milliseconds on
/// a loaded machine; a process that never stops is let go after this.
const STOP_WAIT: Duration = Duration::from_secs(1);

/// The libraries of a program about to start, in load order, found as the dynamic loader will
/// find them.
fn command_libraries(program: &Path) -> Vec<TracedFile> {
    let order = load_order(program, &LdCache::system());
    for name in &order.missing {
        log::warn!("{name} (needed by the program) was not found; the loader will fail too");
    }
    order
        .libraries
        .iter()
        .map(|library| TracedFile {
            path: library.path.to_string_lossy().into_owned(),
            open_path: library.path.clone(),
        })
        .collect()
}

/// The executable and the libraries a running process has mapped, in load order.
fn process_files(process: &RunningProcess) -> Result<(TracedFile, Vec<TracedFile>)> {
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
    let in_order = mapped_load_order(&main.open_path, &libraries)
        .into_iter()
        .map(|index| TracedFile {
            path: libraries[index].0.clone(),
            open_path: libraries[index].1.clone(),
        })
        .collect();
    Ok((main, in_order))
}

/// The libraries among `libraries` that `nest_libs` selects; with `warn`, warns of patterns that
/// select none.
fn selected_libraries(
    nest_libs: &LibraryPatterns,
    libraries: &[TracedFile],
    warn: bool,
) -> Vec<TracedFile> {
    let all: Vec<&str> = libraries.iter().map(|l| l.path.as_str()).collect();
    for pattern in nest_libs.unmatched(&all).into_iter().filter(|_| warn) {
        log::warn!(
            "--nest-lib {pattern} matches none of the program's libraries yet \
             (a matching library it loads later with dlopen is traced then)"
        );
    }
    libraries
        .iter()
        .filter(|library| nest_libs.matches(&library.path))
        .cloned()
        .collect()
}

/// The objects the loader binds PLT calls to, executable first (the PLT flags select by it, and
/// PLT calls are probed where they land); with `warn`, warns of patterns of `plt_libraries` that
/// match none of the libraries. A file that cannot be read defines nothing: its stubs stay
/// unresolved.
fn binding_scope(
    plt_libraries: &PltLibraries,
    executable: &TracedFile,
    libraries: &[TracedFile],
    warn: bool,
) -> BindingScope {
    let all: Vec<&str> = libraries.iter().map(|l| l.path.as_str()).collect();
    for (flag, pattern) in plt_libraries.unmatched(&all).into_iter().filter(|_| warn) {
        log::warn!("{flag} {pattern} matches none of the program's libraries");
    }
    let mut scope = BindingScope::default();
    for file in std::iter::once(executable).chain(libraries) {
        match ElfFile::open(&file.open_path).map(|elf| elf.exported_functions()) {
            Ok(functions) => scope.push(file.path.clone(), functions),
            Err(error) if plt_libraries.is_active() => {
                log::warn!("{error}; its functions stay unresolved")
            }
            Err(_) => {}
        }
    }
    scope
}
