//! Releasing: every link detached, return probes first, many at once.

use std::time::{Duration, Instant};

use libbpf_rs::Link;

/// Attached links; dropping them detaches every probe, return probes first.
///
/// The order matters. Releasing a link waits for the kernel's uretprobe SRCU grace period,
/// which a pending return (`main`'s, say) holds until the kernel's return-instance timer expires
/// it, and every new uretprobe hit pushes that timer back. While a return probe stays attached
/// to a hot function, detaching the entry probes waited until the traced program ended (seen on
/// 6.18). With the return probes gone first, no hit re-arms the timer and detach takes
/// milliseconds. Fields drop in declaration order, so an implicit drop keeps the order too.
#[derive(Default)]
pub struct AttachedProbes {
    pub(super) return_links: Vec<Link>,
    pub(super) exit_site_links: Vec<Link>,
    pub(super) entry_links: Vec<Link>,
    pub attach_time: Duration,
}

impl AttachedProbes {
    /// Takes over the links of `more` (a library probed during the recording).
    pub fn absorb(&mut self, more: AttachedProbes) {
        self.return_links.extend(more.return_links);
        self.exit_site_links.extend(more.exit_site_links);
        self.entry_links.extend(more.entry_links);
    }

    /// Detaches every probe of every set and says how long it took: return probes first, as
    /// for one set. Releasing a link waits for RCU grace periods (tens of milliseconds on 6.18,
    /// whatever its size), and concurrent releases share them: with one set per followed process,
    /// one after the other would take seconds.
    pub fn detach(sets: Vec<AttachedProbes>) -> Duration {
        let started = Instant::now();
        let mut return_links = Vec::new();
        let mut exit_site_links = Vec::new();
        let mut entry_links = Vec::new();
        for set in sets {
            return_links.extend(set.return_links);
            exit_site_links.extend(set.exit_site_links);
            entry_links.extend(set.entry_links);
        }
        for links in [return_links, exit_site_links, entry_links] {
            release_concurrently(links);
        }
        started.elapsed()
    }
}

/// At most this many threads release links at once.
const RELEASE_THREADS: usize = 128;

/// Drops `links` from up to [`RELEASE_THREADS`] threads at once, and returns when all are gone.
fn release_concurrently(links: Vec<Link>) {
    if links.len() <= 1 {
        return drop(links);
    }
    let threads = links.len().min(RELEASE_THREADS);
    let mut shares: Vec<Vec<Link>> = (0..threads).map(|_| Vec::new()).collect();
    for (index, link) in links.into_iter().enumerate() {
        shares[index % threads].push(link);
    }
    std::thread::scope(|scope| {
        for share in shares {
            scope.spawn(move || drop(share));
        }
    });
}
