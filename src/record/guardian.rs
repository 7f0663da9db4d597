//! The guardian: a small process that outlives a recorder killed while it traces, so that the
//! program is never left stopped, nor with a return address pointing at the kernel's uretprobe
//! trampoline.
//!
//! Two things need a process other than the recorder once it is gone:
//! - the shadow stack (`src/bpf/shadow.bpf.h`) of a program with an unwinder (C++, Rust): the
//!   frames that hold the trampoline need their return addresses back, or an exception unwinding
//!   through one ends the program;
//! - where the kernel has no `bpf_send_signal_task` (before 6.13), the processes the recorder may
//!   have stopped (at a dlopen, a stack write, a fork under `--follow`) need a SIGCONT, which the
//!   BPF programs cannot send them there;
//! - the links, where they are `uprobe_multi` links: the guardian holds a second reference to
//!   each (src/probe/link_keeper.rs), so that the killed recorder's exit, which another tracer's
//!   return probes could hold up for as long as its program runs, closes none for the last
//!   time; the guardian releases them after it. Where they are perf-event links, it holds the
//!   watches only: the unwinder's must still stop a thread that throws after the recorder's
//!   files closed and before the guardian stopped the target.
//!
//! A recorder killed with SIGKILL runs no code of its own, so the work goes to `utrace guardian`,
//! started with the recording and dismissed at its end. It holds the maps it needs open (by id)
//! and waits. A recorder that ends as it should dismisses it (a byte on its standard input). One
//! that dies while recording is seen by the BPF program on the process-exit tracepoint
//! (`process_exit`), before the kernel closes its files and so releases the probes: it stops the
//! target where the kernel allows, and writes a note into the `recorder_deaths` ring buffer, which
//! wakes the guardian at once on every kernel. The guardian stops the target (again), waits until
//! every thread is stopped, gives every frame that still holds the trampoline its return address
//! back, and lets the target and the followed processes go on. If the guardian is gone too, the
//! BPF program lets the target go on where it can.
//!
//! It runs in a process group of its own, so the terminal's Ctrl-C reaches the recorder and the
//! command, not it, and it ignores the signals that end a session.

use std::cell::Cell;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapHandle, RingBufferBuilder};

use super::stack_writes::{
    restore_at_detach, trampoline_address, wait_until_every_thread_stops, Stopped,
};
use crate::probe::{self, replaced_return_addresses, HeldLinks, Releasing, Said};

/// How long the guardian waits for the target's threads to stop before it gives up writing.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// How long the guardian keeps the target stopped while the dead recorder's probes are released.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// How long the release of one kind of links the guardian kept may take before the next kind's
/// starts (see `HeldLinks::release`).
const RELEASE_PATIENCE: Duration = Duration::from_millis(500);

/// What a guardian looks after: the process, and the BPF maps (by id) it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Duties {
    /// The traced process.
    pub target: u32,
    /// The ring buffer the BPF program writes into when the recorder dies.
    pub deaths_map: u32,
    /// The shadow stacks, whose frames get their return addresses back.
    pub shadow_stacks_map: Option<u32>,
    /// The followed processes (`--follow`), which are let go.
    pub followed_map: Option<u32>,
}

/// The recorder's end of a running guardian; dismissing it (dropping) ends it quietly.
pub struct Guardian {
    child: Child,
    liveness: Option<OwnedFd>,
}

impl Guardian {
    /// Starts the guardian of `duties`; returns once the guardian holds its maps. With
    /// `keeps_links`, it keeps a reference to every link of those kinds made from now on (see
    /// src/probe/link_keeper.rs).
    pub fn start(duties: &Duties, keeps_links: Option<probe::Kept>) -> io::Result<Guardian> {
        use std::os::unix::process::CommandExt;
        let (ours, its) = socket_pair()?;
        let mut command = Command::new("/proc/self/exe");
        command
            .arg0("utrace")
            .arg("guardian")
            .arg(duties.target.to_string())
            .arg(format!("--deaths-map={}", duties.deaths_map));
        if let Some(map) = duties.shadow_stacks_map {
            command.arg(format!("--shadow-stacks-map={map}"));
        }
        if let Some(map) = duties.followed_map {
            command.arg(format!("--followed-map={map}"));
        }
        let mut child = command
            .stdin(Stdio::from(its))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()?;
        drop(command);
        let mut ready = child.stdout.take().expect("piped");
        let mut byte = [0u8; 1];
        if let Err(error) = ready.read_exact(&mut byte) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(error);
        }
        if let Some(kept) = keeps_links {
            probe::keep_links_in(ours.try_clone()?, kept);
        }
        Ok(Guardian {
            liveness: Some(ours),
            child,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// A connected pair of `SOCK_SEQPACKET` sockets, closed on exec.
fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two descriptors into `fds`.
    let made = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if made != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: two descriptors the kernel just opened, owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Drop for Guardian {
    /// The recording ended with the recorder alive: the guardian has nothing to do (every link
    /// it kept is forgotten by now, as the recorder released it). Unless the recorder panics:
    /// then it dies without its end, and the guardian must stay for the BPF program's note when
    /// it exits, with its standard input open until then.
    fn drop(&mut self) {
        if std::thread::panicking() {
            std::mem::forget(self.liveness.take());
            return;
        }
        probe::stop_keeping();
        if let Some(liveness) = self.liveness.take() {
            let _ = probe::dismiss(&liveness);
        }
        let _ = self.child.wait();
    }
}

/// The guardian process (`utrace guardian PID --deaths-map ID ...`, started by
/// [`Guardian::start`]).
pub fn watch(duties: &Duties) -> Result<()> {
    // Named for ps and top (exec'ed as /proc/self/exe, it would show as `exe`).
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"utrace-guardian".as_ptr()) };
    ignore_session_signals();
    let open = |id: u32, what: &str| {
        MapHandle::from_map_id(id).with_context(|| format!("cannot open {what} (map id {id})"))
    };
    let deaths = open(duties.deaths_map, "the recorder's death notes")?;
    let shadow_stacks = match duties.shadow_stacks_map {
        Some(id) => Some(open(id, "the shadow stacks' map")?),
        None => None,
    };
    let followed = match duties.followed_map {
        Some(id) => Some(open(id, "the followed processes' map")?),
        None => None,
    };
    // Before anything else can happen to it: the recorder, whose end says its probes are gone.
    let recorder = Recorder::parent()?;
    let died = Cell::new(false);
    let mut ring = RingBufferBuilder::new();
    ring.add(&deaths, |_: &[u8]| {
        died.set(true);
        0
    })?;
    let ring = ring.build()?;
    let mut ready = io::stdout();
    ready.write_all(b"r")?;
    ready.flush()?;
    let stdin = io::stdin();
    let recorder_end = stdin.as_fd();
    let mut held = HeldLinks::default();
    loop {
        if wait_for_note_or_message(ring.epoll_fd())? {
            ring.consume()?;
            if died.get() {
                break;
            }
            continue;
        }
        match held.take_message(recorder_end, true)? {
            Said::Links | Said::Nothing => continue,
            // Dismissed, nothing is left (the recorder had every link forgotten); a recorder
            // gone without a word (killed where no note is written for this guardian) leaves
            // the last references here.
            Said::Dismissed | Said::Ended => {
                held.release(RELEASE_PATIENCE).finish();
                return Ok(());
            }
        }
    }
    let releasing = rescue(
        duties.target,
        shadow_stacks.as_ref(),
        followed.as_ref(),
        &recorder,
        || {
            held.take_pending(recorder_end);
            held.release(RELEASE_PATIENCE)
        },
    );
    // In the background: nobody waits for this process.
    releasing.finish();
    Ok(())
}

/// The recorder, which started the guardian, as a pidfd: readable once it has exited, which is
/// after the kernel has released its probes (they go as its files close).
struct Recorder(OwnedFd);

impl Recorder {
    fn parent() -> io::Result<Recorder> {
        // SAFETY: getppid has no preconditions; pidfd_open takes a pid and flags and returns a
        // new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getppid(), 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor the kernel just opened, owned by nobody else.
        Ok(Recorder(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
    }

    /// Waits up to `limit` for the recorder to have exited: whether it has.
    fn wait_gone(&self, limit: Duration) -> bool {
        let mut fd = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(&mut fd, 1, left.as_millis() as i32) };
            if ready >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return ready > 0;
            }
        }
    }
}

/// Waits for a note in the ring buffer whose epoll descriptor is `notes`, or for a message of
/// the recorder on standard input (links, its dismissal, or the end of file of a recorder that
/// ended); true for the note.
fn wait_for_note_or_message(notes: i32) -> io::Result<bool> {
    let mut fds = [
        libc::pollfd {
            fd: notes,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: io::stdin().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: `fds` is a valid array of two pollfd.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if ready > 0 {
            // The note comes before the end of file it goes with: looked at first.
            return Ok(fds[0].revents != 0);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// The recorder died while tracing `target`: with `shadow_stacks`, its threads are stopped, each
/// frame still holding the trampoline gets its return address back, and they stay stopped until
/// the probes are gone (where the kernel makes return probes apart from the BPF programs,
/// a call would get the trampoline again, and an exception would meet it); then the target and
/// the processes of `followed` go on. The links the guardian kept are released by `release`
/// once the recorder is gone (its last messages are in by then): what it started.
fn rescue(
    target: u32,
    shadow_stacks: Option<&MapHandle>,
    followed: Option<&MapHandle>,
    recorder: &Recorder,
    release: impl FnOnce() -> Releasing,
) -> Releasing {
    let started = Instant::now();
    let given_back = shadow_stacks.map(|map| give_stacks_back(target, map));
    // At once where the guardian holds the links' last references (the recorder's exit closes
    // none); else after the kernel's release of the recorder's.
    let gone = recorder.wait_gone(RELEASE_WAIT);
    let releasing = release();
    // Function probes kept here go before the target does, whether or not the recorder is gone
    // (waiting for them gives a recorder slow to go that time too). Watches need not: the
    // unwinder's stops no thread once the stacks are given back (their shadow stacks deleted),
    // and their release can take seconds on kernels before 6.6.
    let released = releasing.watches_only() || releasing.wait(RELEASE_WAIT);
    if given_back.is_some() && !(gone && released) {
        log::warn!("the recorder's probes were not gone after {RELEASE_WAIT:?}: letting pid {target} go on");
    }
    let mut let_go = 0;
    if let Some(followed) = followed {
        for key in followed.keys() {
            if let Ok(bytes) = <[u8; 4]>::try_from(key.as_slice()) {
                resume(u32::from_ne_bytes(bytes));
                let_go += 1;
            }
        }
    }
    resume(target);
    let stacks = match given_back {
        Some(Some(count)) => format!("gave {count} return addresses back to pid {target} and "),
        Some(None) => format!(
            "pid {target} did not stop within {STOP_WAIT:?}: its return addresses are left to \
             the kernel's trampoline; "
        ),
        None => String::new(),
    };
    let followed = match let_go {
        0 => String::new(),
        n => format!(" with {n} followed processes"),
    };
    log::warn!(
        "the recorder is gone: {stacks}let pid {target}{followed} go on untraced ({:.1} ms)",
        started.elapsed().as_secs_f64() * 1e3
    );
    releasing
}

/// Stops `target`, waits until every thread is, and writes back the return addresses its frames
/// lost to the trampoline: how many, or `None` if it did not stop (gone, or a thread in an
/// uninterruptible sleep: writing into a running thread's stack could hit a slot reused since).
///
/// A stop by a signal, not by ptrace: a thread the dead recorder's tracer held (`-p`: its
/// stack's pause, a return through the trampoline) runs on when the kernel lets it go at the
/// recorder's exit, and calls, getting the trampoline again, before it takes the SIGSTOP. Seen
/// on 6.12: restored while held, such a thread was let go with a frame holding the trampoline
/// and its next exception ended the program. So the wait covers the recorder's exit too.
fn give_stacks_back(target: u32, shadow_stacks: &MapHandle) -> Option<usize> {
    // Where the kernel has bpf_send_signal_task, the BPF program stopped it already.
    // SAFETY: kill has no memory effects.
    unsafe { libc::kill(target as libc::pid_t, libc::SIGSTOP) };
    if wait_until_every_thread_stops(target, Stopped::SignalStop, STOP_WAIT + RELEASE_WAIT)
        != Some(true)
    {
        return None;
    }
    let written = trampoline_address(target).map_or(0, |trampoline| {
        let request = restore_at_detach(
            target,
            trampoline,
            &replaced_return_addresses(shadow_stacks),
        );
        if let Err(error) = request.apply() {
            log::warn!("cannot restore return addresses of pid {target}: {error}");
        }
        request.writes.len()
    });
    // Nothing holds the trampoline now: the unwinder's watch stops no thread from here on.
    for thread in shadow_stacks.keys() {
        let _ = shadow_stacks.delete(&thread);
    }
    Some(written)
}

/// Lets `pid` go on if it is stopped (a SIGCONT to a process that runs changes nothing unless it
/// handles SIGCONT).
fn resume(pid: u32) {
    // SAFETY: kill has no memory effects.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
}

/// The guardian must outlive whatever ends the recorder's session: a hang-up, a termination, a
/// Ctrl-C sent to the recorder's process group.
fn ignore_session_signals() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: SIG_IGN installs no handler code.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
}
