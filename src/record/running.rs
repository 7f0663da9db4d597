//! A process that is already running (`-p PID`): the tracer watches it but does not own it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

/// Errors of attaching to a running process.
#[derive(Debug, thiserror::Error)]
pub enum RunningProcessError {
    #[error("no process with pid {0}")]
    NoSuchProcess(u32),
    #[error("pid {0} has no executable (a kernel thread?): nothing to trace")]
    NoExecutable(u32),
    #[error(
        "cannot read /proc/{pid}: permission denied (tracing another user's process needs root)"
    )]
    NotPermitted { pid: u32 },
    /// The source is said after the message, once: an error chain prints it.
    #[error("cannot read /proc/{pid}")]
    Proc { pid: u32, source: io::Error },
}

impl RunningProcessError {
    /// Reading `/proc/PID` (or opening the pidfd) failed with `error`.
    fn reading(pid: u32, error: io::Error) -> RunningProcessError {
        match error.raw_os_error() {
            Some(libc::EACCES | libc::EPERM) => RunningProcessError::NotPermitted { pid },
            _ => RunningProcessError::Proc { pid, source: error },
        }
    }
}

/// A running process, watched through a pidfd so its end is seen without polling /proc.
pub struct RunningProcess {
    pid: u32,
    pidfd: OwnedFd,
    /// What `/proc/PID/exe` points to (the kernel's name for the executable).
    pub executable: PathBuf,
}

impl RunningProcess {
    pub fn open(pid: u32) -> Result<RunningProcess, RunningProcessError> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            let error = io::Error::last_os_error();
            return Err(match error.raw_os_error() {
                Some(libc::ESRCH) | Some(libc::EINVAL) => RunningProcessError::NoSuchProcess(pid),
                _ => RunningProcessError::reading(pid, error),
            });
        }
        // SAFETY: the descriptor was just created and nobody else owns it.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
        let executable = match std::fs::read_link(format!("/proc/{pid}/exe")) {
            Ok(path) => path,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Err(RunningProcessError::NoExecutable(pid))
            }
            Err(error) => return Err(RunningProcessError::reading(pid, error)),
        };
        Ok(RunningProcess {
            pid,
            pidfd,
            executable,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// What `ps` calls the process: its `/proc/PID/comm` (the name it was started as, a symlink's
    /// name as `redis-server` for `redis-check-rdb`, or the name it gave itself; at most 15
    /// bytes), in full from its argv[0] (the first word of a rewritten title) where that begins
    /// with it. `None` when neither can be read.
    pub fn name(&self) -> Option<String> {
        let comm = std::fs::read_to_string(format!("/proc/{}/comm", self.pid)).ok();
        let comm = comm.as_deref().map(|comm| comm.trim_end_matches('\n'));
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", self.pid)).unwrap_or_default();
        let argv0 = cmdline
            .split(|&b| b == 0 || b == b' ')
            .next()
            .unwrap_or_default();
        let argv0 = String::from_utf8_lossy(argv0);
        let argv0 = argv0.rsplit('/').next().unwrap_or_default();
        match comm {
            Some(comm) if !comm.is_empty() && argv0.starts_with(comm) => Some(argv0.to_owned()),
            Some(comm) if !comm.is_empty() => Some(comm.to_owned()),
            _ => (!argv0.is_empty()).then(|| argv0.to_owned()),
        }
    }

    /// Sends `signal` through the pidfd, which cannot reach a process that reused the pid.
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: pidfd_send_signal takes a descriptor, a signal, a null siginfo and flags; it
        // has no memory effects on this process.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.pidfd.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
    }

    /// Whether the process has ended (its pidfd turns readable), without blocking.
    pub fn has_exited(&self) -> bool {
        let mut poll = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: polls one valid descriptor with no timeout.
        let ready = unsafe { libc::poll(&raw mut poll, 1, 0) };
        ready > 0 && poll.revents != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_a_process_end() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        let process = RunningProcess::open(child.id()).unwrap();
        assert!(!process.has_exited());
        assert_eq!(process.executable.file_name().unwrap(), "sleep");
        child.wait().unwrap();
        assert!(process.has_exited());
    }

    #[test]
    fn a_dead_pid_is_named() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(matches!(
            RunningProcess::open(pid),
            Err(RunningProcessError::NoSuchProcess(p)) if p == pid
        ));
    }
}
