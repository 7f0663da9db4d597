//! The traced command: forked, held before `exec` until every probe is attached, then released.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::user::UserIds;

/// Errors of starting the traced command.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("the command is empty")]
    EmptyCommand,
    #[error("cannot parse the command {command:?}: {reason}")]
    BadQuoting { command: String, reason: String },
    #[error("{0}: command not found in PATH: give its path, or check the spelling")]
    NotInPath(String),
    // `error`, not `source`: the message shows it already, and anyhow would repeat a source.
    #[error("cannot run {}: {error}: give the path of an executable program", path.display())]
    NotExecutable { path: PathBuf, error: io::Error },
    #[error("{0}: an argument contains a NUL byte")]
    NulByte(String),
    #[error("cannot start the command: {0}")]
    Fork(io::Error),
    #[error("cannot execute {}: {error}", path.display())]
    Exec { path: PathBuf, error: io::Error },
    #[error("waiting for the traced process: {0}")]
    Wait(io::Error),
    #[error("cannot switch the command to the user of -u: {0}")]
    SwitchUser(io::Error),
    #[error("cannot turn address randomization off: {0}")]
    Personality(io::Error),
}

/// Splits a command line the way a POSIX shell splits words (quotes and backslashes work; no
/// expansion).
pub fn split_command(command: &str) -> Result<Vec<String>, ProcessError> {
    let words = shell_words::split(command).map_err(|e| ProcessError::BadQuoting {
        command: command.to_string(),
        reason: e.to_string(),
    })?;
    if words.is_empty() {
        return Err(ProcessError::EmptyCommand);
    }
    Ok(words)
}

/// Finds the file `execvp` would run for `program`: a name with a slash is a path, any other
/// name is looked up in `PATH`. Resolved here so the probes go on the very file that runs.
pub fn resolve_program(program: &str) -> Result<PathBuf, ProcessError> {
    if program.contains('/') {
        let path = PathBuf::from(program);
        check_executable(&path)?;
        return Ok(path);
    }
    let search = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&search)
        .map(|dir| dir.join(program))
        .find(|candidate| check_executable(candidate).is_ok())
        .ok_or_else(|| ProcessError::NotInPath(program.to_string()))
}

fn check_executable(path: &Path) -> Result<(), ProcessError> {
    let not_executable = |error| ProcessError::NotExecutable {
        path: path.to_path_buf(),
        error,
    };
    let metadata = std::fs::metadata(path).map_err(not_executable)?;
    if metadata.is_dir() {
        return Err(not_executable(io::Error::other("is a directory")));
    }
    if metadata.permissions().mode() & 0o111 == 0 {
        return Err(not_executable(io::Error::from(
            io::ErrorKind::PermissionDenied,
        )));
    }
    Ok(())
}

/// How the traced process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    Exited(i32),
    Signaled(i32),
}

impl ExitStatus {
    /// The exit code a shell would report: the code, or 128 + the signal number.
    pub fn code(self) -> i32 {
        match self {
            ExitStatus::Exited(code) => code,
            ExitStatus::Signaled(signal) => 128 + signal,
        }
    }

    fn from_wait_status(status: libc::c_int) -> Option<ExitStatus> {
        if libc::WIFEXITED(status) {
            Some(ExitStatus::Exited(libc::WEXITSTATUS(status)))
        } else if libc::WIFSIGNALED(status) {
            Some(ExitStatus::Signaled(libc::WTERMSIG(status)))
        } else {
            None
        }
    }
}

/// What the child changes about itself between fork and exec.
#[derive(Clone, Debug, Default)]
pub struct ChildSetup {
    /// Run as this user (`-u`): groups, gid and uid are set in that order, before exec.
    pub user: Option<UserIds>,
    /// Turn address space randomization off (`--no-randomize-addr`).
    pub no_randomize_addr: bool,
}

/// A forked child that waits, before `exec`, until [`HeldChild::release`].
pub struct HeldChild {
    pid: libc::pid_t,
    path: PathBuf,
    /// Writing one byte here lets the child exec; closing it unwritten makes the child exit.
    gate: Option<OwnedFd>,
    /// Carries the `errno` of a failed exec; closed by a successful one (close-on-exec).
    exec_error: OwnedFd,
    /// Its status once reaped: asked again (the recording went on for the processes it forked),
    /// waitpid would find no child.
    reaped: std::cell::Cell<Option<ExitStatus>>,
}

impl HeldChild {
    /// Forks a child that will run `path` with `args` (args[0] included) once released.
    pub fn spawn(
        path: &Path,
        args: &[String],
        setup: &ChildSetup,
    ) -> Result<HeldChild, ProcessError> {
        // Everything the child needs is built before fork: after it, the child may only make
        // async-signal-safe calls.
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| ProcessError::NulByte(path.display().to_string()))?;
        let c_args = args
            .iter()
            .map(|a| CString::new(a.as_bytes()).map_err(|_| ProcessError::NulByte(a.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        let mut argv: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());

        let (gate_read, gate_write) = cloexec_pipe().map_err(ProcessError::Fork)?;
        let (error_read, error_write) = cloexec_pipe().map_err(ProcessError::Fork)?;

        // SAFETY: fork has no memory-safety preconditions; the child branch below only calls
        // async-signal-safe functions (read, write, execv, _exit) on data prepared above.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(ProcessError::Fork(io::Error::last_os_error()));
        }
        if pid == 0 {
            // SAFETY: see above; every pointer refers to memory that stays alive until execv or
            // _exit, and `argv` is NULL-terminated.
            unsafe {
                // The child's copy of the gate's write end would keep its own read from ever
                // seeing the end of the pipe if the parent gives up.
                libc::close(gate_write.as_raw_fd());
                libc::close(error_read.as_raw_fd());
                let mut byte = 0u8;
                let released = libc::read(gate_read.as_raw_fd(), (&raw mut byte).cast(), 1) == 1;
                if released {
                    let stage = match apply_setup(setup) {
                        Ok(()) => {
                            libc::execv(c_path.as_ptr(), argv.as_ptr());
                            STAGE_EXEC
                        }
                        Err(stage) => stage,
                    };
                    let report = [stage, *libc::__errno_location()];
                    libc::write(
                        error_write.as_raw_fd(),
                        report.as_ptr().cast(),
                        std::mem::size_of_val(&report),
                    );
                }
                libc::_exit(127);
            }
        }
        drop(gate_read);
        drop(error_write);
        Ok(HeldChild {
            pid,
            path: path.to_path_buf(),
            gate: Some(gate_write),
            exec_error: error_read,
            reaped: std::cell::Cell::new(None),
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Lets the child exec, and waits until it has (or has failed to).
    pub fn release(&mut self) -> Result<(), ProcessError> {
        if let Some(gate) = self.gate.take() {
            let byte = 1u8;
            // SAFETY: writes one byte from a live local to an open pipe.
            let written = unsafe { libc::write(gate.as_raw_fd(), (&raw const byte).cast(), 1) };
            if written != 1 {
                return Err(ProcessError::Fork(io::Error::last_os_error()));
            }
        }
        let mut report: [libc::c_int; 2] = [0; 2];
        let size = std::mem::size_of_val(&report);
        // SAFETY: reads at most `size` bytes into a live local of that size.
        let read = unsafe {
            libc::read(
                self.exec_error.as_raw_fd(),
                report.as_mut_ptr().cast(),
                size,
            )
        };
        if read != size as isize {
            return Ok(());
        }
        // The child has exited with 127; reap it so it leaves no zombie.
        let _ = self.wait();
        let [stage, errno] = report;
        let error = io::Error::from_raw_os_error(errno);
        Err(match stage {
            STAGE_USER => ProcessError::SwitchUser(error),
            STAGE_PERSONALITY => ProcessError::Personality(error),
            _ => ProcessError::Exec {
                path: self.path.clone(),
                error,
            },
        })
    }

    /// Returns the exit status if the child has ended, without blocking.
    pub fn try_wait(&self) -> Result<Option<ExitStatus>, ProcessError> {
        self.wait_with(libc::WNOHANG)
    }

    /// Blocks until the child ends.
    pub fn wait(&self) -> Result<ExitStatus, ProcessError> {
        loop {
            if let Some(status) = self.wait_with(0)? {
                return Ok(status);
            }
        }
    }

    fn wait_with(&self, flags: libc::c_int) -> Result<Option<ExitStatus>, ProcessError> {
        if let Some(status) = self.reaped.get() {
            return Ok(Some(status));
        }
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid writes only to `status`.
        let result = unsafe { libc::waitpid(self.pid, &raw mut status, flags) };
        match result {
            0 => Ok(None),
            r if r < 0 => {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    Ok(None)
                } else {
                    Err(ProcessError::Wait(error))
                }
            }
            _ => {
                let status = ExitStatus::from_wait_status(status);
                self.reaped.set(status);
                Ok(status)
            }
        }
    }

    /// Whether the child is done with a stop signal sent to its whole group (every thread
    /// stopped) or has ended; without blocking. Takes the kernel's report of the stop, so each
    /// stop is seen once; leaves an exit to be reaped by [`HeldChild::try_wait`].
    pub fn stopped_or_ended(&self) -> bool {
        let peek = |flags| {
            // SAFETY: a zeroed siginfo_t is a valid value; waitid writes only to it.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: as above; the pid is our unreaped child.
            let result =
                unsafe { libc::waitid(libc::P_PID, self.pid as libc::id_t, &raw mut info, flags) };
            // SAFETY: waitid filled the SIGCHLD fields of `info`, or left it zeroed.
            (result == 0 && unsafe { info.si_pid() } == self.pid).then_some(info.si_code)
        };
        match peek(libc::WSTOPPED | libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) {
            Some(libc::CLD_STOPPED) => peek(libc::WSTOPPED | libc::WNOHANG).is_some(),
            Some(_) => true,
            None => false,
        }
    }

    /// Sends `signal` to the child.
    pub fn signal(&self, signal: libc::c_int) {
        if self.reaped.get().is_some() {
            // The pid may belong to another process by now.
            return;
        }
        // SAFETY: kill has no memory effects; the pid is our unreaped child, so it cannot have
        // been reused.
        unsafe { libc::kill(self.pid, signal) };
    }
}

impl Drop for HeldChild {
    fn drop(&mut self) {
        // A child never released (an error before exec) finds its gate closed and exits 127;
        // reap it so no zombie is left.
        if self.gate.take().is_some() {
            let _ = self.wait();
        }
    }
}

/// Where a child failed before running the command, as it reports it through the error pipe.
const STAGE_EXEC: libc::c_int = 1;
const STAGE_USER: libc::c_int = 2;
const STAGE_PERSONALITY: libc::c_int = 3;

/// Applies `setup` in the forked child. Only async-signal-safe calls: no allocation.
///
/// # Safety
/// To be called in the child between fork and exec only.
unsafe fn apply_setup(setup: &ChildSetup) -> Result<(), libc::c_int> {
    if setup.no_randomize_addr {
        // SAFETY: personality(0xffffffff) only queries the current persona; setting it again
        // with one more flag has no memory effects.
        let failed = unsafe {
            let current = libc::personality(0xffff_ffff);
            current < 0
                || libc::personality((current | libc::ADDR_NO_RANDOMIZE) as libc::c_ulong) < 0
        };
        if failed {
            return Err(STAGE_PERSONALITY);
        }
    }
    if let Some(user) = &setup.user {
        // Groups first and uid last: after setuid there is no privilege left to set the rest.
        // SAFETY: the group list is a live slice of the given length.
        let failed = unsafe {
            libc::setgroups(user.groups.len(), user.groups.as_ptr()) != 0
                || libc::setgid(user.gid) != 0
                || libc::setuid(user.uid) != 0
        };
        if failed {
            return Err(STAGE_USER);
        }
    }
    Ok(())
}

fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_like_a_shell() {
        assert_eq!(
            split_command(r#"./prog "a b" 'c d' e\ f"#).unwrap(),
            ["./prog", "a b", "c d", "e f"]
        );
        assert!(matches!(
            split_command("  "),
            Err(ProcessError::EmptyCommand)
        ));
        assert!(matches!(
            split_command("prog 'open"),
            Err(ProcessError::BadQuoting { .. })
        ));
    }

    #[test]
    fn resolves_through_path_like_execvp() {
        assert_eq!(resolve_program("sh").unwrap().file_name().unwrap(), "sh");
        assert!(matches!(
            resolve_program("no-such-program-utrace"),
            Err(ProcessError::NotInPath(_))
        ));
        assert!(matches!(
            resolve_program("/"),
            Err(ProcessError::NotExecutable { .. })
        ));
    }

    #[test]
    fn held_child_runs_only_when_released_and_reports_its_status() {
        let path = resolve_program("sh").unwrap();
        let args = ["sh", "-c", "exit 7"].map(String::from);
        let mut child = HeldChild::spawn(&path, &args, &ChildSetup::default()).unwrap();
        assert_eq!(child.try_wait().unwrap(), None, "must wait for release");
        child.release().unwrap();
        assert_eq!(child.wait().unwrap(), ExitStatus::Exited(7));

        let args = ["sh", "-c", "kill -TERM $$"].map(String::from);
        let mut child = HeldChild::spawn(&path, &args, &ChildSetup::default()).unwrap();
        child.release().unwrap();
        assert_eq!(child.wait().unwrap().code(), 128 + libc::SIGTERM);
    }

    #[test]
    fn a_child_never_released_exits_when_dropped() {
        let path = resolve_program("sh").unwrap();
        let args = ["sh", "-c", "sleep 100"].map(String::from);
        let child = HeldChild::spawn(&path, &args, &ChildSetup::default()).unwrap();
        let pid = child.pid() as libc::pid_t;
        // Dropping closes the gate; the child must see that and exit, and be reaped (a hang
        // here is the failure).
        drop(child);
        // SAFETY: kill with signal 0 only checks that the process exists.
        assert_ne!(unsafe { libc::kill(pid, 0) }, 0, "the child must be gone");
    }

    #[test]
    fn exec_failure_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("bad");
        std::fs::write(&script, "not a program").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut child =
            HeldChild::spawn(&script, &["bad".to_string()], &ChildSetup::default()).unwrap();
        assert!(matches!(child.release(), Err(ProcessError::Exec { .. })));
    }
}
