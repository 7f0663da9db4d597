//! The guardian: a small process that outlives a recorder killed while it traces a program with
//! an unwinder (C++, Rust), so that the program is never left with a return address pointing at
//! the kernel's uretprobe trampoline.
//!
//! The shadow stack (`src/bpf/shadow.bpf.h`) needs the recorder to write a thread's stack when an
//! exception starts to unwind, and the frames that hold the trampoline still need it after the
//! probes are gone: an exception unwinding through one ends the program. A recorder killed with
//! SIGKILL runs no code of its own, so the work goes to another process: `utrace guardian`,
//! started with the recording and dismissed at its end. It holds the shadow stacks' map open (by
//! id) and waits. A recorder that ends as it should dismisses it (a byte on its standard input).
//! One that dies while recording is seen by the BPF program on the process-exit tracepoint
//! (`process_exit`), before the kernel closes its files and so releases the probes: it stops the
//! target and sends the guardian SIGUSR1. The guardian waits until every thread is stopped, gives
//! every frame that still holds the trampoline its return address back, and lets the target go
//! on. If the guardian is gone too, the same BPF program lets the target go on, as it did before
//! there was a guardian.
//!
//! It runs in a process group of its own, so the terminal's Ctrl-C reaches the recorder and the
//! command, not it, and it ignores the signals that end a session.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use libbpf_rs::MapHandle;

use super::stack_writes::{restore_at_detach, trampoline_address, wait_until_every_thread_stops};
use crate::probe::replaced_return_addresses;

/// How long the guardian waits for the target's threads to stop before it gives up writing.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// The recorder's end of a running guardian; dismissing it (dropping) ends it quietly.
pub struct Guardian {
    child: Child,
    liveness: Option<ChildStdin>,
}

impl Guardian {
    /// Starts the guardian of process `target`, whose shadow stacks are in the BPF map with id
    /// `shadow_stacks_map`; returns once the guardian holds the map.
    pub fn start(target: u32, shadow_stacks_map: u32) -> io::Result<Guardian> {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new("/proc/self/exe")
            .arg0("utrace")
            .arg("guardian")
            .arg(target.to_string())
            .arg(shadow_stacks_map.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()?;
        let mut ready = child.stdout.take().expect("piped");
        let mut byte = [0u8; 1];
        if let Err(error) = ready.read_exact(&mut byte) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(error);
        }
        Ok(Guardian {
            liveness: child.stdin.take(),
            child,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Guardian {
    /// The recording ended with the recorder alive: the guardian has nothing to do. Unless the
    /// recorder panics: then it dies without its end, and the guardian must stay for the BPF
    /// program's SIGUSR1 when it exits, with its standard input open until then.
    fn drop(&mut self) {
        if std::thread::panicking() {
            std::mem::forget(self.liveness.take());
            return;
        }
        if let Some(mut liveness) = self.liveness.take() {
            let _ = liveness.write_all(b"d");
        }
        let _ = self.child.wait();
    }
}

/// The guardian process (`utrace guardian PID MAP_ID`, started by [`Guardian::start`]).
pub fn watch(target: u32, shadow_stacks_map: u32) -> Result<()> {
    // Named for ps and top (exec'ed as /proc/self/exe, it would show as `exe`).
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"utrace-guardian".as_ptr()) };
    ignore_session_signals();
    // Before the recorder knows our pid: the BPF program's SIGUSR1 must not end us.
    let told = RecorderGoneSignal::block()?;
    let map = MapHandle::from_map_id(shadow_stacks_map)
        .with_context(|| format!("cannot open the shadow stacks' map (id {shadow_stacks_map})"))?;
    let mut ready = io::stdout();
    ready.write_all(b"r")?;
    ready.flush()?;
    if told.wait_against_dismissal()? {
        rescue(target, &map);
    }
    Ok(())
}

/// The SIGUSR1 the BPF program sends the guardian when the recorder dies while recording
/// (`process_exit` in src/bpf/utrace.bpf.c), read from a signalfd.
struct RecorderGoneSignal(OwnedFd);

impl RecorderGoneSignal {
    /// Blocks SIGUSR1 and opens a signalfd for it.
    fn block() -> io::Result<RecorderGoneSignal> {
        // SAFETY: a zeroed sigset_t is valid storage for sigemptyset, which fills it.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid sigset_t; sigprocmask only reads it.
        let fd = unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR1);
            if libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
            libc::signalfd(-1, &set, libc::SFD_CLOEXEC)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: signalfd returned a new descriptor that nothing else owns.
        Ok(RecorderGoneSignal(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Waits for the signal, or for the recorder's dismissal on standard input (a byte, or the
    /// end of file of a recorder that ended without recording on); true for the signal.
    fn wait_against_dismissal(&self) -> io::Result<bool> {
        let mut fds = [
            libc::pollfd {
                fd: self.0.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: libc::STDIN_FILENO,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        loop {
            // SAFETY: `fds` is a valid array of two pollfd.
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if ready > 0 {
                // The signal comes before the end of file it goes with: looked at first.
                return Ok(fds[0].revents != 0);
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

/// The recorder died while tracing `target`: its threads are stopped (or stopping); each frame
/// still holding the trampoline gets its return address back, and the target goes on.
fn rescue(target: u32, shadow_stacks: &MapHandle) {
    let started = Instant::now();
    if !wait_until_every_thread_stops(target, STOP_WAIT) {
        // Gone, or a thread still runs (an uninterruptible sleep): writing into a running
        // thread's stack could hit a slot reused since. The stop is ended all the same.
        // SAFETY: kill has no memory effects.
        unsafe { libc::kill(target as libc::pid_t, libc::SIGCONT) };
        log::warn!(
            "the recorder is gone: pid {target} did not stop within {STOP_WAIT:?}; its return \
             addresses are left to the kernel's trampoline"
        );
        return;
    }
    let mut given_back = 0;
    if let Some(trampoline) = trampoline_address(target) {
        let request = restore_at_detach(
            target,
            trampoline,
            &replaced_return_addresses(shadow_stacks),
        );
        given_back = request.writes.len();
        if let Err(error) = request.apply() {
            log::warn!("cannot restore return addresses of pid {target}: {error}");
        }
    }
    // SAFETY: kill has no memory effects.
    unsafe { libc::kill(target as libc::pid_t, libc::SIGCONT) };
    log::warn!(
        "the recorder is gone: gave {given_back} return addresses back to pid {target} and let \
         it go on untraced ({:.1} ms)",
        started.elapsed().as_secs_f64() * 1e3
    );
}

/// The guardian must outlive whatever ends the recorder's session: a hang-up, a termination, a
/// Ctrl-C sent to the recorder's process group.
fn ignore_session_signals() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: SIG_IGN installs no handler code.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
}
