//! Loading the BPF programs and attaching them: one `uprobe_multi` link per traced file and per
//! direction, the function id as each probe's cookie, the traced process as the link's filter.

use std::io;
use std::mem::MaybeUninit;
use std::path::Path;
use std::time::{Duration, Instant};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject, ProgramMut, UprobeMultiOpts};

use super::skel::{types, OpenUtraceSkel, UtraceSkel, UtraceSkelBuilder};
use crate::elf::ExitProbe;
use crate::plan::{LandedCall, Landings};
use crate::table::{FunctionKind, FunctionTable};

/// Errors of loading and attaching the BPF side.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "loading BPF programs is not permitted ({missing} missing): run as root, or give utrace \
         CAP_BPF and CAP_PERFMON"
    )]
    NotPermitted {
        /// The capabilities this process lacks, as named in capabilities(7).
        missing: String,
    },
    #[error("cannot load the BPF programs: {0}")]
    Load(libbpf_rs::Error),
    #[error(
        "cannot attach {count} {direction} probes to {path}: {error} (uprobe_multi needs Linux 6.6 or newer)"
    )]
    Attach {
        count: usize,
        direction: &'static str,
        path: String,
        // Not `source`: the message shows it already, and anyhow would repeat a source.
        error: libbpf_rs::Error,
    },
}

fn load_error(error: libbpf_rs::Error) -> ProbeError {
    if error.kind() == libbpf_rs::ErrorKind::PermissionDenied {
        ProbeError::NotPermitted {
            missing: missing_capabilities(),
        }
    } else {
        ProbeError::Load(error)
    }
}

/// Which of the capabilities uprobes with BPF need this process lacks, from the effective set in
/// `/proc/self/status` ("CapEff: <hex>").
fn missing_capabilities() -> String {
    const NEEDED: [(u32, &str); 2] = [(39, "CAP_BPF"), (38, "CAP_PERFMON")];
    let effective = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
            u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
        });
    let Some(effective) = effective else {
        return "capabilities unknown".to_string();
    };
    let missing: Vec<&str> = NEEDED
        .iter()
        .filter(|(bit, _)| effective & (1 << bit) == 0)
        .map(|(_, name)| *name)
        .collect();
    if missing.is_empty() {
        // Both are there: something else refuses, such as a security module.
        "no capability".to_string()
    } else {
        missing.join(" and ")
    }
}

/// What the loader needs to know before the programs are loaded.
#[derive(Default)]
pub struct ProbeConfig {
    /// The process whose threads are traced.
    pub tgid: u32,
    /// Ring buffer size in bytes (a power of two, a multiple of the page size).
    pub buffer_bytes: u32,
    /// Count nothing until the target execs (a command utrace forked).
    pub wait_for_exec: bool,
    /// Stop the process at a dlopen's return until the recorder lets it go on.
    pub stop_on_dlopen: bool,
    /// Follow the processes the target forks, and the programs they exec (`--follow`): each is
    /// stopped until the recorder has probed it.
    pub follow: bool,
    /// The lowest virtual address of the executable's code segments (see [`Landings`]).
    pub executable_code_vaddr: u64,
    /// Keep a shadow stack of the return addresses uretprobes replace, for the unwinder (the
    /// program maps one).
    pub unwind_shadow: bool,
}

/// Storage the skeleton borrows from; it must outlive the [`LoadedProbes`].
pub type ObjectStorage = MaybeUninit<OpenObject>;

/// The loaded BPF programs and their maps, not yet attached.
pub struct LoadedProbes<'obj> {
    skel: UtraceSkel<'obj>,
}

/// Sends libbpf's own messages to the log at trace level (`-dd`), and asks libbpf for none
/// otherwise: errors reach the user as one line through [`ProbeError`].
pub fn forward_libbpf_messages() {
    fn print(_: libbpf_rs::PrintLevel, message: String) {
        log::trace!(target: crate::diagnostics::LIBBPF_TARGET, "{message}");
    }
    let wanted = log::log_enabled!(target: crate::diagnostics::LIBBPF_TARGET, log::Level::Trace);
    libbpf_rs::set_print(wanted.then_some((libbpf_rs::PrintLevel::Debug, print as _)));
}

impl<'obj> LoadedProbes<'obj> {
    pub fn load(
        storage: &'obj mut ObjectStorage,
        config: &ProbeConfig,
    ) -> Result<Self, ProbeError> {
        let builder = UtraceSkelBuilder::default();
        let mut open: OpenUtraceSkel = builder.open(storage).map_err(load_error)?;
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .expect("the BPF object has read-only data (target_tgid)");
        rodata.target_tgid = config.tgid;
        rodata.wait_for_exec = config.wait_for_exec;
        rodata.stop_on_dlopen = config.stop_on_dlopen;
        rodata.follow = config.follow;
        rodata.executable_code_vaddr = config.executable_code_vaddr;
        rodata.unwind_shadow = config.unwind_shadow;
        // Wake the consumer only when an eighth of the buffer waits; it polls on a timer below
        // that, so the common hit pays for no wake-up.
        rodata.wakeup_bytes = u64::from(config.buffer_bytes / 8);
        open.maps
            .events
            .set_max_entries(config.buffer_bytes)
            .map_err(load_error)?;
        if !config.follow {
            // A hash map's entries are allocated when it is created: none are needed.
            open.maps
                .followed_processes
                .set_max_entries(1)
                .map_err(load_error)?;
        }
        let mut skel = open.load().map_err(load_error)?;
        if config.wait_for_exec {
            let link = skel.progs.target_exec.attach().map_err(load_error)?;
            skel.links.target_exec = Some(link);
        }
        if config.follow {
            let link = skel.progs.process_forked.attach().map_err(load_error)?;
            skel.links.process_forked = Some(link);
            let link = skel.progs.process_execed.attach().map_err(load_error)?;
            skel.links.process_execed = Some(link);
            let link = skel.progs.followed_exit.attach().map_err(load_error)?;
            skel.links.followed_exit = Some(link);
        }
        if config.unwind_shadow {
            let link = skel.progs.shadow_thread_exit.attach().map_err(load_error)?;
            skel.links.shadow_thread_exit = Some(link);
        }
        Ok(LoadedProbes { skel })
    }

    /// Attaches entry and exit probes for every function of `table` in `modules`, filtered to
    /// `pid`: each module index with the path that opens its file. `exits` says, per function
    /// id, where its exit is probed.
    pub fn attach(
        &self,
        table: &FunctionTable,
        exits: &[ExitProbe],
        landings: &Landings,
        modules: &[(usize, &Path)],
        pid: u32,
    ) -> Result<AttachedProbes, ProbeError> {
        let started = Instant::now();
        let mut attached = AttachedProbes::default();
        for &(module_index, file) in modules {
            let module = &table.modules[module_index];
            let plan = ModuleProbes::new(table, exits, landings, module_index as u32);
            let progs = &self.skel.progs;
            let kinds = [
                (
                    &progs.function_exit,
                    &plan.uretprobes,
                    true,
                    "return",
                    &mut attached.return_links,
                ),
                (
                    &progs.function_exit_site,
                    &plan.exit_sites,
                    false,
                    "exit",
                    &mut attached.exit_site_links,
                ),
                (
                    &progs.function_entry,
                    &plan.entries,
                    false,
                    "entry",
                    &mut attached.entry_links,
                ),
            ];
            for (program, probes, retprobe, direction, links) in kinds {
                if probes.is_empty() {
                    continue;
                }
                let (offsets, cookies): (Vec<usize>, Vec<u64>) = probes.iter().copied().unzip();
                let opts = UprobeMultiOpts {
                    offsets,
                    cookies,
                    retprobe,
                    ..Default::default()
                };
                links.push(attach_multi(
                    program,
                    file,
                    opts,
                    pid,
                    direction,
                    module.clone(),
                )?);
            }
        }
        attached.attach_time = started.elapsed();
        Ok(attached)
    }

    /// Attaches the probes of the PLT calls of `landings` in their libraries, filtered to
    /// `pid`. Their session links make return probes: they go with the return links.
    pub fn attach_landings(
        &self,
        landings: &Landings,
        pid: u32,
    ) -> Result<AttachedProbes, ProbeError> {
        let started = Instant::now();
        let mut attached = AttachedProbes::default();
        for (library, calls) in landings.libraries() {
            // One link per set of distinct offsets: two stubs can land in one function
            // (aliases such as `strdup` and `__strdup`).
            let mut rest: Vec<(usize, u64)> = calls
                .iter()
                .map(|call| (call.offset as usize, landed_call_cookie(call)))
                .collect();
            while !rest.is_empty() {
                let mut seen = std::collections::HashSet::new();
                let (batch, later): (Vec<_>, Vec<_>) = rest
                    .into_iter()
                    .partition(|(offset, _)| seen.insert(*offset));
                rest = later;
                let (offsets, cookies): (Vec<usize>, Vec<u64>) = batch.into_iter().unzip();
                let opts = UprobeMultiOpts {
                    offsets,
                    cookies,
                    session: true,
                    ..Default::default()
                };
                let path = library.display().to_string();
                let program = &self.skel.progs.plt_call;
                let link = attach_multi(program, library, opts, pid, "PLT call", path)?;
                attached.return_links.push(link);
            }
        }
        attached.attach_time = started.elapsed();
        Ok(attached)
    }

    /// Puts the dlopen watch on `offsets` of `library` (the dlopen the process binds to).
    pub fn watch_dlopen(
        &self,
        library: &Path,
        offsets: Vec<usize>,
        pid: u32,
    ) -> Result<Link, ProbeError> {
        let program = &self.skel.progs.library_loaded;
        watch(program, library, offsets, true, pid, "dlopen return")
    }

    /// Puts the unwinder watch on `offsets` of `file`: the entry points of the unwinder it
    /// defines, where the shadow stack gives traced frames their return addresses back.
    pub fn watch_unwinder(
        &self,
        file: &Path,
        offsets: Vec<usize>,
        pid: u32,
    ) -> Result<Link, ProbeError> {
        let program = &self.skel.progs.unwinder_entered;
        watch(program, file, offsets, false, pid, "unwinder entry")
    }

    /// The ring buffer map the events arrive in.
    pub fn events_map(&self) -> &libbpf_rs::MapMut<'obj> {
        &self.skel.maps.events
    }

    /// The ring buffer the shadow stack's write requests arrive in.
    pub fn stack_writes_map(&self) -> &libbpf_rs::MapMut<'obj> {
        &self.skel.maps.stack_writes
    }

    /// The program's global variables, in memory mapped from the BPF map.
    fn bss(&self) -> &types::bss {
        self.skel
            .maps
            .bss_data
            .as_deref()
            .expect("the BPF object has a .bss")
    }

    fn bss_mut(&mut self) -> &mut types::bss {
        self.skel
            .maps
            .bss_data
            .as_deref_mut()
            .expect("the BPF object has a .bss")
    }

    /// Says whether the recorder serves the shadow stack's write requests: while it does not, the
    /// BPF programs stop the process for none.
    pub fn set_serving_stack_writes(&mut self, on: bool) {
        // SAFETY: as in `set_recording`.
        unsafe { std::ptr::write_volatile(&raw mut self.bss_mut().serving_stack_writes, on) };
    }

    /// Stack write requests sent so far, each with a stop of the process.
    pub fn stack_write_requests(&self) -> u64 {
        // SAFETY: as in `lost_events`.
        unsafe { std::ptr::read_volatile(&raw const self.bss().stack_write_requests) }
    }

    /// Turns counting on (after every link is attached) or off (before any is detached).
    pub fn set_recording(&mut self, on: bool) {
        // SAFETY: a plain bool in memory mapped from the BPF map, read by the BPF programs
        // concurrently: written with a volatile store so it is not elided or delayed.
        unsafe { std::ptr::write_volatile(&raw mut self.bss_mut().recording, on) };
    }

    /// Events dropped so far because the ring buffer was full.
    pub fn lost_events(&self) -> u64 {
        // SAFETY: the field is a plain u64 in memory mapped from the BPF map; BPF programs update
        // it concurrently, so it is read with a volatile load rather than cached.
        unsafe { std::ptr::read_volatile(&raw const self.bss().lost_events) }
    }

    /// Events dropped so far because the ring buffer was full, per thread id, by thread id.
    /// Threads beyond the map's capacity are only in [`lost_events`](Self::lost_events).
    pub fn lost_by_thread(&self) -> Vec<(u32, u64)> {
        let map = &self.skel.maps.lost_by_thread;
        let mut lost: Vec<(u32, u64)> = map
            .keys()
            .filter_map(|key| {
                let value = map.lookup(&key, MapFlags::ANY).ok().flatten()?;
                let tid = u32::from_ne_bytes(key.as_slice().try_into().ok()?);
                Some((tid, u64::from_ne_bytes(value.as_slice().try_into().ok()?)))
            })
            .collect();
        lost.sort_unstable();
        lost
    }
}

/// Attaches `program` at `offsets` of `file` (at their returns with `retprobe`), filtered to
/// `pid`; `what` names the probes in an error.
fn watch(
    program: &ProgramMut,
    file: &Path,
    offsets: Vec<usize>,
    retprobe: bool,
    pid: u32,
    what: &'static str,
) -> Result<Link, ProbeError> {
    let opts = UprobeMultiOpts {
        offsets,
        retprobe,
        ..Default::default()
    };
    attach_multi(program, file, opts, pid, what, file.display().to_string())
}

/// Attaches `program` with one `uprobe_multi` link at the offsets of `opts` in `file`, filtered to
/// `pid`; `direction` and `path` name the probes in an error.
fn attach_multi(
    program: &ProgramMut,
    file: &Path,
    opts: UprobeMultiOpts,
    pid: u32,
    direction: &'static str,
    path: String,
) -> Result<Link, ProbeError> {
    let count = opts.offsets.len();
    program
        .attach_uprobe_multi_with_opts(pid as i32, file, "", opts)
        .map_err(|error| ProbeError::Attach {
            count,
            direction,
            path,
            error,
        })
}

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
    return_links: Vec<Link>,
    exit_site_links: Vec<Link>,
    entry_links: Vec<Link>,
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

/// The cookie of a PLT call probed where it lands: the stub's function id, and the stub's virtual
/// address in the executable, which the BPF program compares return addresses with.
fn landed_call_cookie(call: &LandedCall) -> u64 {
    u64::from(call.function) | (u64::from(call.stub) << 32)
}

/// Set in an entry probe's cookie when the entry instruction is also one of the function's exit
/// sites (`COOKIE_ALSO_EXIT` in utrace.bpf.c): two probes on one instruction would run in an
/// order the kernel does not promise.
const COOKIE_ALSO_EXIT: u64 = 1 << 32;
/// Set in an exit site's cookie when the site is the instruction after a call of a PLT stub
/// (`COOKIE_AFTER_RETURN` in utrace.bpf.c): the return address is popped there, so its slot is
/// just below the stack pointer.
const COOKIE_AFTER_RETURN: u64 = 1 << 33;

/// The probes of one module, as (file offset, cookie) pairs per kind.
struct ModuleProbes {
    entries: Vec<(usize, u64)>,
    uretprobes: Vec<(usize, u64)>,
    exit_sites: Vec<(usize, u64)>,
}

impl ModuleProbes {
    fn new(
        table: &FunctionTable,
        exits: &[ExitProbe],
        landings: &Landings,
        module: u32,
    ) -> ModuleProbes {
        let mut probes = ModuleProbes {
            entries: Vec::new(),
            uretprobes: Vec::new(),
            exit_sites: Vec::new(),
        };
        for (id, function) in table.functions.iter().enumerate() {
            if function.module != module || landings.contains(id as u32) {
                continue;
            }
            let id = id as u64;
            let entry = function.offset as usize;
            let mut cookie = id;
            let exit_cookie = match function.kind {
                FunctionKind::Plt => id | COOKIE_AFTER_RETURN,
                _ => id,
            };
            match &exits[id as usize] {
                ExitProbe::Uretprobe(_) => probes.uretprobes.push((entry, id)),
                ExitProbe::Sites(offsets) => {
                    for &offset in offsets {
                        if offset as usize == entry {
                            cookie |= COOKIE_ALSO_EXIT;
                        } else {
                            probes.exit_sites.push((offset as usize, exit_cookie));
                        }
                    }
                }
            }
            probes.entries.push((entry, cookie));
        }
        probes
    }
}

/// Rounds a requested buffer size to what a BPF ring buffer accepts: a power of two, at least a
/// page.
pub fn ring_buffer_size(requested: u64) -> io::Result<u32> {
    let page = 4096u64;
    let size = requested.max(page).next_power_of_two();
    u32::try_from(size).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("--buffer-size {requested} is too large: at most 2G"),
        )
    })
}
