//! `-p` on a process with an unwinder: the recorder holds every thread with ptrace, so that the
//! shadow stack (src/bpf/shadow.bpf.h) can pause a thread while its stack is written, as it stops
//! a command utrace started. The pause is a signal-delivery-stop of SIGSTOP: only the tracer sees
//! it, and suppresses the signal once the writes are made; the program's real parent never sees a
//! stop. Only the paused thread waits. Each pause
//! served is kept ([`ServedPause`]) for the recorder, which writes it as a call of
//! `[utrace: stack repair]`: utrace's time, not the program's.
//!
//! Every ptrace request must come from the thread that seized, so one tracer thread does it all:
//! seize, serve the pauses (`waitpid(-1, __WALL)`), hold and release. The recorder's other
//! threads talk to it through a channel and wake it from `waitpid` with [`WAKE_SIGNAL`].
//!
//! No `PTRACE_O_EXITKILL`: the program must outlive the recorder. If the recorder dies, the
//! kernel detaches every thread; one paused for its stack gets its SIGSTOP delivered, which stops
//! the process before that thread unwinds through frames nobody restored, until the guardian
//! (src/record/guardian.rs) has given them their return addresses back and lets it go on.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use libbpf_rs::{MapHandle, RingBuffer, RingBufferBuilder};

use super::stack_writes::StackWriteRequest;

/// Why the process's threads could not be seized.
#[derive(Debug, thiserror::Error)]
pub enum SeizeError {
    /// The kernel refused (EPERM): another tracer holds the thread, or Yama's `ptrace_scope` or
    /// a security module forbids it.
    #[error("ptrace refused for thread {tid} of pid {pid} ({why})")]
    Refused { pid: u32, tid: u32, why: String },
    #[error("cannot list the threads of pid {pid}: {source}")]
    Threads { pid: u32, source: io::Error },
    #[error("cannot seize thread {tid} of pid {pid}: {source}")]
    Ptrace {
        pid: u32,
        tid: u32,
        source: io::Error,
    },
    #[error("cannot start the tracer thread: {0}")]
    Thread(io::Error),
}

/// Sent to the tracer thread to interrupt its `waitpid` when the recorder has something to ask.
/// Its handler does nothing; installed without `SA_RESTART`, so `waitpid` fails with EINTR.
fn wake_signal() -> libc::c_int {
    libc::SIGRTMIN()
}

/// What the recorder asks of the tracer thread.
enum Request {
    /// Serve the pauses with the write requests of this `stack_writes` ring buffer.
    Serve(MapHandle),
    /// Stop every thread, serving the pauses on their way, and keep them stopped.
    Hold,
    /// Let every thread go and end.
    Release,
}

/// One pause the tracer thread served: the thread was stopped for its stack from `stopped_ns`
/// (when the tracer heard of it) to `resumed_ns` (just before it let it go), CLOCK_MONOTONIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServedPause {
    pub pid: u32,
    pub tid: u32,
    pub stopped_ns: u64,
    pub resumed_ns: u64,
}

/// The pauses served and not yet taken by the recorder, shared with the tracer thread.
type ServedPauses = Arc<Mutex<Vec<ServedPause>>>;

/// The threads of a process, held with ptrace by a tracer thread of the recorder.
pub struct Seizer {
    requests: Sender<Request>,
    done: Receiver<()>,
    served: ServedPauses,
    /// The tracer thread's kernel thread id, for [`WAKE_SIGNAL`].
    tracer_tid: libc::pid_t,
    thread: Option<JoinHandle<()>>,
}

impl Seizer {
    /// Seizes every thread of `pid` (and, through `PTRACE_O_TRACECLONE`, those it starts later)
    /// from a new tracer thread, which serves the pauses from then on.
    pub fn seize(pid: u32) -> Result<Seizer, SeizeError> {
        install_wake_handler().map_err(SeizeError::Thread)?;
        let (requests, requests_in) = mpsc::channel();
        let (done_out, done) = mpsc::channel();
        let (seized_out, seized) = mpsc::channel();
        let served = ServedPauses::default();
        let served_by_tracer = served.clone();
        let thread = std::thread::Builder::new()
            .name("utrace-ptrace".into())
            .spawn(move || {
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() };
                let tracer = match Tracer::seize(pid as libc::pid_t, served_by_tracer) {
                    Ok(tracer) => tracer,
                    Err(error) => {
                        let _ = seized_out.send(Err(error));
                        return;
                    }
                };
                log::debug!(
                    "holding {} threads of pid {pid} with ptrace (pauses for the shadow stack)",
                    tracer.threads.len()
                );
                let _ = seized_out.send(Ok(tid));
                tracer.run(&requests_in, &done_out);
            })
            .map_err(SeizeError::Thread)?;
        match seized.recv() {
            Ok(Ok(tracer_tid)) => Ok(Seizer {
                requests,
                done,
                served,
                tracer_tid,
                thread: Some(thread),
            }),
            Ok(Err(error)) => {
                let _ = thread.join();
                Err(error)
            }
            Err(_) => {
                let _ = thread.join();
                Err(SeizeError::Thread(io::Error::other(
                    "the tracer thread ended",
                )))
            }
        }
    }

    /// Serves the pauses with the requests of `stack_writes` (the ring buffer only the tracer
    /// thread consumes from now on).
    pub fn serve(&mut self, stack_writes: MapHandle) {
        self.ask(Request::Serve(stack_writes));
    }

    /// Stops every thread and keeps it stopped, serving the pauses that come meanwhile; then
    /// nothing runs that could ask for another (`serving_stack_writes` may go off).
    pub fn hold(&mut self) {
        self.ask(Request::Hold);
    }

    /// The pauses served since the last call, in the order they ended.
    pub fn take_pauses(&self) -> Vec<ServedPause> {
        std::mem::take(&mut *self.served.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Lets every thread go on, as it was before: the tracer detaches them and ends. Returns the
    /// pauses served since they were last taken.
    pub fn release(mut self) -> Vec<ServedPause> {
        self.end();
        self.take_pauses()
    }

    fn end(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.ask(Request::Release);
            let _ = thread.join();
        }
    }

    /// Sends `request` and waits until the tracer thread has done it, waking it from `waitpid`
    /// until it has (a wake that comes just before it blocks again is lost: it is sent again).
    fn ask(&mut self, request: Request) {
        if self.requests.send(request).is_err() {
            return;
        }
        loop {
            // SAFETY: tgkill sends a signal to a thread of this process, whose handler does
            // nothing.
            unsafe {
                libc::syscall(
                    libc::SYS_tgkill,
                    libc::getpid(),
                    self.tracer_tid,
                    wake_signal(),
                )
            };
            match self.done.recv_timeout(Duration::from_millis(10)) {
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }
}

impl Drop for Seizer {
    /// A session that failed lets the process go too.
    fn drop(&mut self) {
        self.end();
    }
}

extern "C" fn on_wake(_: libc::c_int) {}

fn install_wake_handler() -> io::Result<()> {
    // SAFETY: a zeroed sigaction is a valid starting value; the handler does nothing.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_wake as *const () as usize;
        // No SA_RESTART: the signal is there to interrupt waitpid.
        action.sa_flags = 0;
        libc::sigemptyset(&raw mut action.sa_mask);
        if libc::sigaction(wake_signal(), &raw const action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The tracer thread's state: the threads it holds and the write requests not served yet.
struct Tracer {
    pid: libc::pid_t,
    threads: HashSet<libc::pid_t>,
    /// The `stack_writes` ring buffer, and what its callback parsed.
    ring: Option<(RingBuffer<'static>, MapHandle)>,
    parsed: std::rc::Rc<std::cell::RefCell<Vec<StackWriteRequest>>>,
    /// Per thread, the request its coming pause is for.
    pending: HashMap<libc::pid_t, StackWriteRequest>,
    /// After [`Request::Hold`]: the threads stopped and kept so.
    held: Option<HashSet<libc::pid_t>>,
    served: ServedPauses,
}

/// What `waitpid` said about one thread.
enum Report {
    Stopped {
        tid: libc::pid_t,
        status: libc::c_int,
    },
    Ended(libc::pid_t),
    /// Interrupted by [`WAKE_SIGNAL`]: a request may wait.
    Woken,
    /// No thread left to wait for.
    NoThreads,
}

impl Tracer {
    /// Seizes every thread listed in /proc/PID/task, again until no new one appears (a thread
    /// not yet seized may start another meanwhile).
    fn seize(pid: libc::pid_t, served: ServedPauses) -> Result<Tracer, SeizeError> {
        let mut tracer = Tracer {
            pid,
            threads: HashSet::new(),
            ring: None,
            parsed: Default::default(),
            pending: HashMap::new(),
            held: None,
            served,
        };
        loop {
            let listed = thread_ids(pid).map_err(|source| SeizeError::Threads {
                pid: pid as u32,
                source,
            })?;
            let new: Vec<libc::pid_t> = listed
                .into_iter()
                .filter(|tid| !tracer.threads.contains(tid))
                .collect();
            if new.is_empty() {
                return Ok(tracer);
            }
            for tid in new {
                if let Err(error) = tracer.seize_thread(tid) {
                    // The threads seized so far go back as they were.
                    tracer.hold();
                    tracer.detach_all();
                    return Err(error);
                }
            }
        }
    }

    fn seize_thread(&mut self, tid: libc::pid_t) -> Result<(), SeizeError> {
        let options = libc::PTRACE_O_TRACECLONE as usize;
        match ptrace(libc::PTRACE_SEIZE, tid, options) {
            Ok(()) => {
                self.threads.insert(tid);
                Ok(())
            }
            // Ended since it was listed.
            Err(error) if error.raw_os_error() == Some(libc::ESRCH) => Ok(()),
            Err(error) if error.raw_os_error() == Some(libc::EPERM) => {
                let tracer = tracer_of(tid);
                // SAFETY: getpid has no preconditions.
                if tracer == Some(unsafe { libc::getpid() }) {
                    // Started by a thread seized already, and seized with it.
                    self.threads.insert(tid);
                    return Ok(());
                }
                Err(SeizeError::Refused {
                    pid: self.pid as u32,
                    tid: tid as u32,
                    why: match tracer {
                        Some(other) if other != 0 => format!("pid {other} traces it already"),
                        _ => "Yama's ptrace_scope or a security module forbids it".into(),
                    },
                })
            }
            Err(source) => Err(SeizeError::Ptrace {
                pid: self.pid as u32,
                tid: tid as u32,
                source,
            }),
        }
    }

    /// Serves until released.
    fn run(mut self, requests: &Receiver<Request>, done: &Sender<()>) {
        loop {
            while let Ok(request) = requests.try_recv() {
                match request {
                    Request::Serve(map) => self.serve_from(map),
                    Request::Hold => self.hold(),
                    Request::Release => {
                        self.hold();
                        self.detach_all();
                        let _ = done.send(());
                        return;
                    }
                }
                let _ = done.send(());
            }
            match wait_any() {
                Report::Stopped { tid, status } => self.stopped(tid, status),
                Report::Ended(tid) => self.ended(tid),
                Report::Woken => {}
                // The process has ended: only the recorder's requests are left to wait for.
                Report::NoThreads => match requests.recv() {
                    Ok(request) => {
                        let release = matches!(request, Request::Release);
                        let _ = done.send(());
                        if release {
                            return;
                        }
                    }
                    Err(_) => return,
                },
            }
        }
    }

    fn serve_from(&mut self, map: MapHandle) {
        let parsed = self.parsed.clone();
        let mut builder = RingBufferBuilder::new();
        let added = builder.add(&map, move |bytes: &[u8]| {
            match StackWriteRequest::parse(bytes) {
                Ok(request) => parsed.borrow_mut().push(request),
                Err(error) => log::warn!("{error}: an exception may not unwind"),
            }
            0
        });
        let built = added.map(|_| ()).and_then(|()| builder.build());
        match built {
            Ok(ring) => self.ring = Some((ring, map)),
            Err(error) => log::warn!(
                "cannot read the stack write requests ({error}): an exception may not unwind"
            ),
        }
    }

    /// One thread stopped: serves or passes on what stopped it. While held, it stays stopped
    /// once it has reached the stop the hold asked for.
    fn stopped(&mut self, tid: libc::pid_t, status: libc::c_int) {
        self.threads.insert(tid);
        let signal = libc::WSTOPSIG(status);
        match status >> 16 {
            libc::PTRACE_EVENT_STOP => {
                if let Some(held) = &mut self.held {
                    held.insert(tid);
                } else if is_group_stop(signal) {
                    // A real SIGSTOP or SIGTSTP: the process stays stopped, as its parent sees,
                    // and the tracer still hears of a SIGCONT.
                    let _ = ptrace(libc::PTRACE_LISTEN, tid, 0);
                } else {
                    // A new thread's first stop, or an interrupt.
                    self.resume(tid, 0);
                }
            }
            libc::PTRACE_EVENT_CLONE => {
                if let Ok(new) = event_message(tid) {
                    self.threads.insert(new as libc::pid_t);
                }
                self.resume(tid, 0);
            }
            0 if self.serve_pause(tid, signal) => self.resume(tid, 0),
            // The program's own signal: delivered as it would have been.
            0 => self.resume(tid, signal),
            _ => self.resume(tid, 0),
        }
    }

    fn resume(&self, tid: libc::pid_t, signal: libc::c_int) {
        // Fails only for a thread killed meanwhile, whose end comes next.
        let _ = ptrace(libc::PTRACE_CONT, tid, signal as usize);
    }

    fn ended(&mut self, tid: libc::pid_t) {
        self.threads.remove(&tid);
        self.pending.remove(&tid);
        if let Some(held) = &mut self.held {
            held.remove(&tid);
        }
    }

    /// Reads the write requests waiting in the ring buffer into `pending`, by thread.
    fn collect_requests(&mut self) {
        if let Some((ring, _)) = &self.ring {
            let _ = ring.consume();
        }
        for request in self.parsed.borrow_mut().drain(..) {
            let thread = request.tid as libc::pid_t;
            if self.pending.insert(thread, request).is_some() {
                log::debug!("thread {thread}: a stack write request never paused it");
            }
        }
    }

    /// Whether `signal` stopping `tid` is the shadow stack's pause: its request is served (and
    /// the signal is to be suppressed). A SIGURG or SIGSTOP without a request is the program's.
    fn serve_pause(&mut self, tid: libc::pid_t, signal: libc::c_int) -> bool {
        if signal != libc::SIGURG && signal != libc::SIGSTOP {
            return false;
        }
        let stopped_ns = super::monotonic_now_ns();
        // The BPF program submitted the request before the thread could stop: it is in the ring
        // buffer now.
        self.collect_requests();
        let Some(request) = self.pending.remove(&tid) else {
            return false;
        };
        if let Err(error) = request.apply() {
            log::warn!(
                "cannot write the stack of thread {tid} of process {}: {error}: an exception \
                 may not unwind",
                request.pid
            );
        }
        // The caller lets the thread go right after: its next event comes later than this.
        let pause = ServedPause {
            pid: request.pid,
            tid: request.tid,
            stopped_ns,
            resumed_ns: super::monotonic_now_ns(),
        };
        (self.served.lock().unwrap_or_else(|e| e.into_inner())).push(pause);
        true
    }

    /// Stops every thread with `PTRACE_INTERRUPT` and waits until each has, serving the pauses
    /// already on their way and passing the program's signals on meanwhile.
    fn hold(&mut self) {
        if self.held.is_some() {
            return;
        }
        self.held = Some(HashSet::new());
        for &tid in &self.threads {
            let _ = ptrace(libc::PTRACE_INTERRUPT, tid, 0);
        }
        while self.held.as_ref().map_or(0, HashSet::len) < self.threads.len() {
            match wait_any() {
                Report::Stopped { tid, status } => {
                    if !self.threads.contains(&tid) {
                        // A thread started meanwhile: its first stop holds it.
                        self.threads.insert(tid);
                    }
                    self.stopped(tid, status);
                }
                Report::Ended(tid) => self.ended(tid),
                Report::Woken => {}
                Report::NoThreads => {
                    self.threads.clear();
                    break;
                }
            }
        }
        self.serve_held();
    }

    /// Writes the requests of threads now held whose pause came after the interrupt (a trap is
    /// taken before a signal): each thread stopped right after sending its own, which is still
    /// pending.
    fn serve_held(&mut self) {
        self.collect_requests();
        for (tid, request) in std::mem::take(&mut self.pending) {
            if let Err(error) = request.apply() {
                log::warn!("cannot write the stack of thread {tid}: {error}");
            }
            self.take_pending_pause(tid);
        }
    }

    /// Lets held thread `tid`, whose pause's SIGSTOP is pending, take it into a
    /// signal-delivery-stop, where the detach drops it: taken after the detach, it would stop the
    /// process for good. The program's own signals dequeued before it are passed on. A thread
    /// that has not stopped within [`PAUSE_TAKE_WAIT`] is interrupted, so it is held again.
    fn take_pending_pause(&mut self, tid: libc::pid_t) {
        if !stop_pending(tid) {
            return;
        }
        let mut interrupted = false;
        let deadline = Instant::now() + PAUSE_TAKE_WAIT;
        let _ = ptrace(libc::PTRACE_CONT, tid, 0);
        loop {
            let flags = match interrupted {
                true => libc::__WALL,
                false => libc::__WALL | libc::WNOHANG,
            };
            let mut status = 0;
            // SAFETY: waitpid writes the status into the local variable.
            let reported = unsafe { libc::waitpid(tid, &raw mut status, flags) };
            if reported < 0 {
                match io::Error::last_os_error().raw_os_error() {
                    Some(libc::EINTR) => continue,
                    _ => return self.ended(tid),
                }
            }
            if reported == 0 {
                if Instant::now() >= deadline {
                    let _ = ptrace(libc::PTRACE_INTERRUPT, tid, 0);
                    interrupted = true;
                } else {
                    std::thread::sleep(Duration::from_micros(100));
                }
                continue;
            }
            if !libc::WIFSTOPPED(status) {
                return self.ended(tid);
            }
            let signal = libc::WSTOPSIG(status);
            if status >> 16 == 0 && signal != libc::SIGSTOP {
                self.resume(tid, signal);
                continue;
            }
            return;
        }
    }

    /// Lets every held thread go: a thread that was in a group stop goes back to it.
    fn detach_all(&mut self) {
        for &tid in &self.threads {
            if let Err(error) = ptrace(libc::PTRACE_DETACH, tid, 0) {
                log::debug!("detaching thread {tid}: {error}");
            }
        }
        self.threads.clear();
    }
}

/// How long a held thread may take to reach the stop of its pending pause (see
/// `Tracer::take_pending_pause`): at once, unless something else took its SIGSTOP.
const PAUSE_TAKE_WAIT: Duration = Duration::from_millis(100);

/// Whether thread `tid` has a SIGSTOP pending, sent to it alone (`SigPnd` in its status).
fn stop_pending(tid: libc::pid_t) -> bool {
    status_field(tid, "SigPnd")
        .and_then(|mask| u64::from_str_radix(&mask, 16).ok())
        .is_some_and(|mask| mask & (1 << (libc::SIGSTOP - 1)) != 0)
}

/// The value of the line `name:` in thread `tid`'s `/proc` status, trimmed; `None` when it
/// cannot be read.
fn status_field(tid: libc::pid_t, name: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status.lines().find_map(|line| {
        let value = line.strip_prefix(name)?.strip_prefix(':')?;
        Some(value.trim().to_owned())
    })
}

/// A stop of a group stop (`PTRACE_EVENT_STOP` with a stopping signal) rather than of an
/// interrupt or a new thread (SIGTRAP).
fn is_group_stop(signal: libc::c_int) -> bool {
    matches!(
        signal,
        libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
    )
}

fn wait_any() -> Report {
    let mut status = 0;
    // SAFETY: waitpid writes the status into the local variable.
    let tid = unsafe { libc::waitpid(-1, &raw mut status, libc::__WALL | libc::__WNOTHREAD) };
    if tid < 0 {
        return match io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => Report::Woken,
            _ => Report::NoThreads,
        };
    }
    if libc::WIFSTOPPED(status) {
        Report::Stopped { tid, status }
    } else {
        Report::Ended(tid)
    }
}

fn ptrace(request: libc::c_uint, tid: libc::pid_t, data: usize) -> io::Result<()> {
    // SAFETY: the requests used here take no address and an integer in `data`; the kernel
    // checks that `tid` is a tracee of this thread.
    let result = unsafe { libc::ptrace(request, tid, 0usize, data) };
    match result {
        -1 => Err(io::Error::last_os_error()),
        _ => Ok(()),
    }
}

/// The new thread's id at a `PTRACE_EVENT_CLONE` stop.
fn event_message(tid: libc::pid_t) -> io::Result<libc::c_ulong> {
    let mut message: libc::c_ulong = 0;
    // SAFETY: PTRACE_GETEVENTMSG writes one unsigned long at the address given.
    let result = unsafe {
        libc::ptrace(
            libc::PTRACE_GETEVENTMSG,
            tid,
            0usize,
            &raw mut message as usize,
        )
    };
    match result {
        -1 => Err(io::Error::last_os_error()),
        _ => Ok(message),
    }
}

/// The thread ids of `pid`.
fn thread_ids(pid: libc::pid_t) -> io::Result<Vec<libc::pid_t>> {
    let mut tids = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        if let Some(tid) = entry?.file_name().to_str().and_then(|s| s.parse().ok()) {
            tids.push(tid);
        }
    }
    Ok(tids)
}

/// The `TracerPid` of a thread (0: none); `None` when it cannot be read.
fn tracer_of(tid: libc::pid_t) -> Option<libc::pid_t> {
    status_field(tid, "TracerPid")?.parse().ok()
}
