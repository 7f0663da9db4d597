//! A second holder for every link: the guardian (src/record/guardian.rs) keeps a reference to
//! each link the recorder makes, so that the recorder's own close is never the last one.
//!
//! A recorder killed with SIGKILL closes its files in its exit, and a last close waits for the
//! kernel's release (see release.rs), which another tracer's return probes can hold up for as
//! long as its program runs: the recorder's process would stay until then. With the guardian's
//! references, it goes at once, and the guardian releases the links after it, return probes
//! first. Before the recorder releases links itself, the guardian closes its references (the
//! recorder waits for its answer), so that every release path stays as it is.
//!
//! The messages, one per packet of a `SOCK_SEQPACKET` socket (the guardian's standard input):
//! - `k`, a [`LinkKind`], the recorder's descriptor numbers (u32), with the descriptors
//!   themselves (SCM_RIGHTS): keep these;
//! - `f`, descriptor numbers: forget these, answered `a` once their references are closed;
//! - `d`: dismissal, the recording has ended (guardian.rs).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{mpsc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use libbpf_rs::Link;

use super::release::release_concurrently;

/// Which links a kept link goes with: they are released in this order, as release.rs does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum LinkKind {
    Return = 0,
    ExitSite = 1,
    Entry = 2,
    Watch = 3,
}

const KINDS: [LinkKind; 4] = [
    LinkKind::Return,
    LinkKind::ExitSite,
    LinkKind::Entry,
    LinkKind::Watch,
];

const KEEP: u8 = b'k';
const FORGET: u8 = b'f';
const FORGOTTEN: u8 = b'a';
const DISMISS: u8 = b'd';

/// The kernel's limit of descriptors in one message (SCM_MAX_FD).
const FDS_PER_MESSAGE: usize = 253;

/// Which links a guardian keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    /// Every link: `uprobe_multi` links, whose release the kernel may hold up.
    Every,
    /// The watches only (the unwinder's entry points, dlopen's return): one perf-event link per
    /// probe site would be thousands of descriptors, and only a watch must outlive a killed
    /// recorder, whose files close before the guardian has stopped the target. A thread that
    /// throws meanwhile must still meet the unwinder's watch, which stops it (shadow.bpf.h).
    Watches,
}

impl Kept {
    fn includes(self, kind: LinkKind) -> bool {
        self == Kept::Every || kind == LinkKind::Watch
    }
}

/// Where the links made go.
enum Keeper {
    /// No guardian yet: the links made so far (the probe costs' are measured first), given to
    /// it once it starts.
    NotYet(Vec<(LinkKind, RawFd)>),
    /// The recorder's end of the guardian's socket, and which links it keeps.
    Guardian(OwnedFd, Kept),
    /// The guardian keeps no links (dismissed, or gone).
    Nobody,
}

static KEEPER: Mutex<Keeper> = Mutex::new(Keeper::NotYet(Vec::new()));

/// From now on, every link of the kinds `kept` says that is made, and every one made before and
/// not released yet, is kept by the guardian at the other end of `socket` too.
pub fn keep_links_in(socket: OwnedFd, kept: Kept) {
    let mut keeper = lock_keeper();
    let made_before = match std::mem::replace(&mut *keeper, Keeper::Guardian(socket, kept)) {
        Keeper::NotYet(links) => links,
        _ => Vec::new(),
    };
    for kind in KINDS {
        let fds: Vec<RawFd> = (made_before.iter())
            .filter(|(of, _)| *of == kind)
            .map(|(_, fd)| *fd)
            .collect();
        send_kept(&mut keeper, kind, &fds);
    }
}

/// No more links are kept (the guardian is dismissed).
pub fn stop_keeping() {
    *lock_keeper() = Keeper::Nobody;
}

fn lock_keeper() -> std::sync::MutexGuard<'static, Keeper> {
    KEEPER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Gives the guardian a reference to each of `links`, if it keeps links (or will).
pub(super) fn keep(kind: LinkKind, links: &[Link]) {
    let fds: Vec<RawFd> = links.iter().map(raw_fd).collect();
    let mut keeper = lock_keeper();
    match &mut *keeper {
        Keeper::NotYet(made) => made.extend(fds.into_iter().map(|fd| (kind, fd))),
        Keeper::Guardian(..) => send_kept(&mut keeper, kind, &fds),
        Keeper::Nobody => {}
    }
}

/// Sends the guardian of `keeper` the links `fds` of `kind`.
fn send_kept(keeper: &mut Keeper, kind: LinkKind, fds: &[RawFd]) {
    let Keeper::Guardian(socket, kept) = &*keeper else {
        return;
    };
    if !kept.includes(kind) {
        return;
    }
    for chunk in fds.chunks(FDS_PER_MESSAGE) {
        let mut message = vec![KEEP, kind as u8];
        message.extend(chunk.iter().flat_map(|&fd| (fd as u32).to_ne_bytes()));
        if let Err(error) = send(socket.as_raw_fd(), &message, chunk) {
            log::debug!("the guardian keeps no more links: {error}");
            *keeper = Keeper::Nobody;
            return;
        }
    }
}

/// Has the guardian close its references to the links of `groups`, and waits until it has: the
/// recorder's are the last again.
pub(super) fn forget(groups: &[Vec<Link>]) {
    let fds: Vec<RawFd> = groups.iter().flatten().map(raw_fd).collect();
    let mut keeper = lock_keeper();
    let socket = match &mut *keeper {
        Keeper::NotYet(made) => return made.retain(|(_, fd)| !fds.contains(fd)),
        Keeper::Guardian(socket, _) => socket.as_raw_fd(),
        Keeper::Nobody => return,
    };
    for chunk in fds.chunks(FDS_PER_MESSAGE) {
        let mut message = vec![FORGET];
        message.extend(chunk.iter().flat_map(|&fd| (fd as u32).to_ne_bytes()));
        let answered = send(socket, &message, &[]).and_then(|()| {
            let mut answer = [0u8; 1];
            match receive(socket, &mut answer, 0)? {
                (1, _) if answer[0] == FORGOTTEN => Ok(()),
                _ => Err(io::Error::other("no answer")),
            }
        });
        if let Err(error) = answered {
            // A guardian gone has closed its references.
            log::debug!("the guardian keeps no more links: {error}");
            *keeper = Keeper::Nobody;
            return;
        }
    }
}

/// Tells the guardian at the other end of `socket` that the recording has ended.
pub fn dismiss(socket: &OwnedFd) -> io::Result<()> {
    send(socket.as_raw_fd(), &[DISMISS], &[])
}

fn raw_fd(link: &Link) -> RawFd {
    std::os::fd::AsFd::as_fd(link).as_raw_fd()
}

/// The guardian's references: the recorder's descriptor number of each, and its kind.
#[derive(Default)]
pub struct HeldLinks {
    held: Vec<(RawFd, LinkKind, OwnedFd)>,
}

/// What a message from the recorder said.
#[derive(Debug, PartialEq, Eq)]
pub enum Said {
    /// Links to keep, or to forget (answered).
    Links,
    /// The recording ended (`d`).
    Dismissed,
    /// The recorder's end is closed: it has exited.
    Ended,
    /// Nothing is waiting (only without `wait`).
    Nothing,
}

impl HeldLinks {
    /// Takes one message from the recorder on `socket` and does what it says; waits for one
    /// if `wait`.
    pub fn take_message(&mut self, socket: BorrowedFd, wait: bool) -> io::Result<Said> {
        let mut message = vec![0u8; 2 + 4 * FDS_PER_MESSAGE];
        let flags = if wait { 0 } else { libc::MSG_DONTWAIT };
        let (length, fds) = match receive(socket.as_raw_fd(), &mut message, flags) {
            Ok(received) => received,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(Said::Nothing),
            Err(error) => return Err(error),
        };
        let numbers = |from: usize| {
            message[from..length]
                .chunks_exact(4)
                .map(|bytes| u32::from_ne_bytes(bytes.try_into().unwrap()) as RawFd)
                .collect::<Vec<_>>()
        };
        match message.first().filter(|_| length > 0) {
            None => Ok(Said::Ended),
            Some(&DISMISS) => Ok(Said::Dismissed),
            Some(&KEEP) if length >= 2 => {
                let kind = KINDS
                    .into_iter()
                    .find(|&kind| kind as u8 == message[1])
                    .unwrap_or(LinkKind::Return);
                let kept = numbers(2).into_iter().zip(fds).map(|(n, fd)| (n, kind, fd));
                self.held.extend(kept);
                Ok(Said::Links)
            }
            Some(&FORGET) => {
                for number in numbers(1) {
                    // The latest of that number: an earlier one was closed without a word.
                    if let Some(at) = self.held.iter().rposition(|(n, ..)| *n == number) {
                        self.held.remove(at);
                    }
                }
                send(socket.as_raw_fd(), &[FORGOTTEN], &[])?;
                Ok(Said::Links)
            }
            Some(other) => Err(io::Error::other(format!("unknown message {other:#x}"))),
        }
    }

    /// Takes every message the recorder sent and nobody read yet (it has exited).
    pub fn take_pending(&mut self, socket: BorrowedFd) {
        loop {
            match self.take_message(socket, false) {
                Ok(Said::Links) => continue,
                Ok(_) => return,
                Err(error) => return log::debug!("reading the recorder's last links: {error}"),
            }
        }
    }

    /// Releases the links, kind after kind (return probes first), on threads of their own: a
    /// kind starts once the one before is released or after `patience` (the kernel may hold a
    /// release up for as long as another tracer's program runs, but it takes the probes off at
    /// once).
    pub fn release(self, patience: Duration) -> Releasing {
        let watches_only = self
            .held
            .iter()
            .all(|&(_, kind, _)| kind == LinkKind::Watch);
        let mut groups: Vec<Vec<OwnedFd>> = KINDS.iter().map(|_| Vec::new()).collect();
        for (_, kind, fd) in self.held {
            groups[kind as usize].push(fd);
        }
        let (all_gone, all_released) = mpsc::channel();
        let all = std::thread::spawn(move || {
            let mut releases = Vec::new();
            for group in groups {
                let (done, released) = mpsc::channel();
                releases.push(std::thread::spawn(move || {
                    release_concurrently(group);
                    let _ = done.send(());
                }));
                let _ = released.recv_timeout(patience);
            }
            for release in releases {
                let _ = release.join();
            }
            let _ = all_gone.send(());
        });
        Releasing {
            all_released,
            all,
            watches_only,
        }
    }
}

/// Links being released by [`HeldLinks::release`].
pub struct Releasing {
    all_released: mpsc::Receiver<()>,
    all: JoinHandle<()>,
    watches_only: bool,
}

impl Releasing {
    /// Whether the links are watches only (or none): no function probe, so none that gives a
    /// traced function's call the trampoline (dlopen's return watch gives it to dlopen's
    /// calls, which no exception unwinds through).
    pub fn watches_only(&self) -> bool {
        self.watches_only
    }

    /// Waits up to `limit` for every link's release: whether it is done.
    pub fn wait(&self, limit: Duration) -> bool {
        self.all_released.recv_timeout(limit).is_ok()
    }

    /// Waits until every link is released.
    pub fn finish(self) {
        let _ = self.all.join();
    }
}

/// Sends `bytes` as one message on `socket`, with `fds` (SCM_RIGHTS) if any.
fn send(socket: RawFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    let fd_bytes = std::mem::size_of_val(fds) as u32;
    // SAFETY: CMSG_SPACE computes a size.
    let mut control = vec![0u8; unsafe { libc::CMSG_SPACE(fd_bytes) } as usize];
    // SAFETY: an all-zero msghdr is valid (no name, no control).
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    if !fds.is_empty() {
        header.msg_control = control.as_mut_ptr().cast();
        header.msg_controllen = control.len() as _;
        // SAFETY: `control` has room for one header with `fds` after it (CMSG_SPACE above).
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&header);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast(), fds.len());
        }
    }
    loop {
        // SAFETY: `header` points at live buffers for the call.
        let sent = unsafe { libc::sendmsg(socket, &header, libc::MSG_NOSIGNAL) };
        if sent >= 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// Receives one message from `socket` into `bytes`: its length (0 at the end of the stream),
/// and the descriptors that came with it.
fn receive(socket: RawFd, bytes: &mut [u8], flags: i32) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: bytes.as_mut_ptr().cast(),
        iov_len: bytes.len(),
    };
    let most = (FDS_PER_MESSAGE * std::mem::size_of::<RawFd>()) as u32;
    // SAFETY: CMSG_SPACE computes a size.
    let mut control = vec![0u8; unsafe { libc::CMSG_SPACE(most) } as usize];
    // SAFETY: an all-zero msghdr is valid.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    header.msg_control = control.as_mut_ptr().cast();
    header.msg_controllen = control.len() as _;
    let length = loop {
        // SAFETY: `header` points at live buffers for the call.
        let received =
            unsafe { libc::recvmsg(socket, &mut header, flags | libc::MSG_CMSG_CLOEXEC) };
        if received >= 0 {
            break received as usize;
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled the control buffer; the CMSG_* walk stays within it.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&header);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for index in 0..count {
                    fds.push(OwnedFd::from_raw_fd(data.add(index).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&header, cmsg);
        }
    }
    Ok((length, fds))
}
