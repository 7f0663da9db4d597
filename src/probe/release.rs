//! Releasing: every link detached, return probes first, many at once, and beyond the recorder's
//! own process where the kernel may keep it waiting.
//!
//! The kernel (6.12 and newer) frees a uprobe only after an SRCU grace period, which every return
//! probe taken before holds until its function returns or its thread's expiry timer fires; each
//! new return probe of that thread pushes the timer back (`prepare_uretprobe` re-arms it with
//! `mod_timer`). So a thread that never leaves a function under a return probe while it keeps
//! hitting others (a hot loop in `main` under another tracer's uretprobes) holds every uprobe
//! release on the machine, and a thread waiting there can neither be killed nor let its process
//! exit. Where links are `uprobe_multi` links, a releaser process (`utrace release-links`) takes
//! over their last reference: the recorder's own close returns at once, it waits
//! [`RELEASE_PATIENCE`] for the release, then says why it goes on without it.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use libbpf_rs::Link;

use super::AttachMode;

/// Attached links; dropping them detaches every probe, return probes first.
///
/// The order matters. While a return probe stays attached to a hot function, each of its hits
/// re-arms the expiry timer of the calls still open (see above), and detaching the entry probes
/// waited until the traced program ended (seen on 6.18). With the return probes gone first, no
/// hit re-arms the timer and detach takes milliseconds.
#[derive(Default)]
pub struct AttachedProbes {
    pub(super) return_links: Vec<Link>,
    pub(super) exit_site_links: Vec<Link>,
    pub(super) entry_links: Vec<Link>,
    pub attach_time: Duration,
}

impl AttachedProbes {
    /// Takes over the links of `more` (a library probed during the recording).
    pub fn absorb(&mut self, mut more: AttachedProbes) {
        self.return_links.append(&mut more.return_links);
        self.exit_site_links.append(&mut more.exit_site_links);
        self.entry_links.append(&mut more.entry_links);
    }

    /// Has the guardian keep a reference to each link too (see link_keeper.rs).
    pub(super) fn kept(self) -> Self {
        use super::link_keeper::{keep, LinkKind};
        keep(LinkKind::Return, &self.return_links);
        keep(LinkKind::ExitSite, &self.exit_site_links);
        keep(LinkKind::Entry, &self.entry_links);
        self
    }

    /// Detaches every probe of every set and says how long it took: return probes first, as
    /// for one set. Releasing a link waits for RCU grace periods (tens of milliseconds on 6.18,
    /// whatever its size), and concurrent releases share them: with one set per followed process,
    /// one after the other would take seconds.
    pub fn detach(sets: Vec<AttachedProbes>) -> Duration {
        let started = Instant::now();
        let mut all = AttachedProbes::default();
        for set in sets {
            all.absorb(set);
        }
        drop(all);
        started.elapsed()
    }
}

impl Drop for AttachedProbes {
    fn drop(&mut self) {
        release(vec![
            std::mem::take(&mut self.return_links),
            std::mem::take(&mut self.exit_site_links),
            std::mem::take(&mut self.entry_links),
        ]);
    }
}

/// How long the recorder waits for the releaser before it goes on without it.
const RELEASE_PATIENCE: Duration = Duration::from_millis(500);

/// Set once a release outlasted [`RELEASE_PATIENCE`]: the releasers queue behind the same grace
/// period, so the next ones are not waited for.
static KERNEL_HOLDS_RELEASES: AtomicBool = AtomicBool::new(false);

/// Releases `groups` of links, one group after the other, the links of a group at once: by a
/// releaser process where they are `uprobe_multi` links (one descriptor each), else here.
pub(super) fn release(groups: Vec<Vec<Link>>) {
    if groups.iter().all(Vec::is_empty) {
        return;
    }
    // The guardian's references go first: the last ones are the recorder's, as below.
    super::link_keeper::forget(&groups);
    if super::strategy().mode == AttachMode::Multi {
        match hand_over(&groups) {
            Ok(mut releaser) => {
                // Not the last reference any more: these closes return at once. Then the
                // releaser may close its own, the last (its standard input ends).
                drop(groups);
                drop(releaser.stdin.take());
                return wait_for(releaser);
            }
            Err(error) => log::debug!("cannot start a releaser process ({error}): releasing here"),
        }
    }
    for links in groups {
        release_concurrently(links);
    }
}

/// Starts `utrace release-links` with a reference to each link of `groups`.
fn hand_over(groups: &[Vec<Link>]) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let fds: Vec<Vec<RawFd>> = groups
        .iter()
        .map(|links| links.iter().map(|l| l.as_fd().as_raw_fd()).collect())
        .collect();
    let argument = fds
        .iter()
        .map(|group| {
            group
                .iter()
                .map(|fd| fd.to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect::<Vec<_>>()
        .join("/");
    let inherited: Vec<RawFd> = fds.concat();
    let mut command = Command::new("/proc/self/exe");
    command
        .arg0("utrace")
        .args(["release-links", &argument])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: between fork and exec, fcntl only (async-signal-safe), on descriptors this process
    // holds; the child alone loses their close-on-exec flag.
    unsafe {
        command.pre_exec(move || {
            for &fd in &inherited {
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    command.spawn()
}

/// Waits up to [`RELEASE_PATIENCE`] for `releaser` to end, and says once why not.
fn wait_for(mut releaser: std::process::Child) {
    let deadline = Instant::now() + RELEASE_PATIENCE;
    while !KERNEL_HOLDS_RELEASES.load(Ordering::Relaxed) && Instant::now() < deadline {
        if let Ok(Some(_)) = releaser.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    if !KERNEL_HOLDS_RELEASES.swap(true, Ordering::Relaxed) {
        log::warn!(
            "detaching waits for the kernel: it frees a uprobe only once every return probe \
             taken before has returned, and a process that keeps hitting return probes under one \
             that never returns holds that up (another tracer's? {}); the probes are off the \
             program, and process {} finishes their release in the background",
            processes_hit_by_uprobes(),
            releaser.id()
        );
    }
}

/// How many of the processes uprobes have hit the warning names.
const PROCESSES_NAMED: usize = 4;

/// The processes other than this one that uprobes have hit, as `pid N (name)`: the kernel maps
/// its `[uprobes]` page (return trampoline, out-of-line slots) into a process at its first hit,
/// so the one whose return probes hold releases up is among them.
fn processes_hit_by_uprobes() -> String {
    let own = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return "no process list".into();
    };
    let hit: Vec<String> = (entries.flatten())
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()) && *pid != own)
        .filter(|pid| {
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
            maps.lines().any(|line| line.ends_with("[uprobes]"))
        })
        .map(|pid| {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            format!("pid {pid} ({})", name.trim_end())
        })
        .collect();
    match hit.len() {
        0 => "no other process has hit a uprobe".into(),
        1..=PROCESSES_NAMED => format!("uprobes have hit {}", hit.join(", ")),
        more => format!(
            "uprobes have hit {}, and {} more",
            hit[..PROCESSES_NAMED].join(", "),
            more - PROCESSES_NAMED
        ),
    }
}

/// `utrace release-links GROUPS`: once its standard input ends (the recorder has closed its own
/// references, so these are the last), closes the descriptors of each group ("7,8/9") at once,
/// the groups one after the other, as [`release`] handed them over.
pub fn release_handed_links(groups: &str) -> Result<(), ReleaseLinksError> {
    let mut parsed = Vec::new();
    for group in groups.split('/') {
        let fds = group
            .split(',')
            .filter(|fd| !fd.is_empty())
            .map(str::parse::<RawFd>)
            .collect::<Result<Vec<_>, _>>()?;
        parsed.push(fds);
    }
    std::io::copy(&mut std::io::stdin(), &mut std::io::sink())?;
    for fds in parsed {
        // SAFETY: the recorder handed these descriptors over to this process alone.
        let owned = fds
            .into_iter()
            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
        release_concurrently(owned.collect());
    }
    Ok(())
}

/// Why `utrace release-links` could not take over the links.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseLinksError {
    #[error("not a descriptor list: {0}")]
    Descriptors(#[from] std::num::ParseIntError),
    #[error("cannot wait for the recorder: {0}")]
    Recorder(#[from] std::io::Error),
}

/// At most this many threads release links at once.
const RELEASE_THREADS: usize = 128;

/// Drops `links` from up to [`RELEASE_THREADS`] threads at once, and returns when all are gone.
pub(super) fn release_concurrently<T: Send>(links: Vec<T>) {
    if links.len() <= 1 {
        return drop(links);
    }
    let threads = links.len().min(RELEASE_THREADS);
    let mut shares: Vec<Vec<T>> = (0..threads).map(|_| Vec::new()).collect();
    for (index, link) in links.into_iter().enumerate() {
        shares[index % threads].push(link);
    }
    std::thread::scope(|scope| {
        for share in shares {
            scope.spawn(move || drop(share));
        }
    });
}
