//! Loading the BPF programs and attaching them: one `uprobe_multi` link per traced file and per
//! direction, the function id as each probe's cookie, the traced process as the link's filter.

use std::io;
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, OpenObject, UprobeMultiOpts};

use super::skel::{types, OpenUtraceSkel, UtraceSkel, UtraceSkelBuilder};
use crate::elf::ExitProbe;
use crate::plan::FunctionTable;

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

/// How function exits are seen (`--exit-probes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExitProbes {
    /// A probe on each instruction that leaves the function (its `ret`s and tail jumps), and a
    /// uretprobe only where those cannot all be found: the stack is never touched, so C++
    /// exceptions unwind through traced frames.
    Ret,
    /// A uretprobe on every function: the kernel replaces the return address on the stack, which
    /// kills a C++ program whose exception unwinds through the frame.
    #[default]
    Uretprobe,
}

/// An `--exit-probes` value that is neither `ret` nor `uretprobe`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown exit probe kind `{0}`: use ret or uretprobe")]
pub struct UnknownExitProbes(pub String);

impl std::str::FromStr for ExitProbes {
    type Err = UnknownExitProbes;

    fn from_str(name: &str) -> Result<ExitProbes, UnknownExitProbes> {
        match name {
            "ret" => Ok(ExitProbes::Ret),
            "uretprobe" => Ok(ExitProbes::Uretprobe),
            _ => Err(UnknownExitProbes(name.to_owned())),
        }
    }
}

/// What the loader needs to know before the programs are loaded.
pub struct ProbeConfig {
    /// The process whose threads are traced.
    pub tgid: u32,
    /// Ring buffer size in bytes (a power of two, a multiple of the page size).
    pub buffer_bytes: u32,
    /// Count nothing until the target execs (a command utrace forked).
    pub wait_for_exec: bool,
    /// Stop the process at a dlopen's return until the recorder lets it go on.
    pub stop_on_dlopen: bool,
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

/// libbpf's own messages go to stderr only under `--debug`: errors reach the user as one line
/// through [`ProbeError`].
pub fn show_libbpf_messages(show: bool) {
    fn print(_: libbpf_rs::PrintLevel, message: String) {
        eprint!("{message}");
    }
    libbpf_rs::set_print(show.then_some((libbpf_rs::PrintLevel::Debug, print as _)));
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
        rodata.unwind_shadow = config.unwind_shadow;
        // Wake the consumer only when an eighth of the buffer waits; it polls on a timer below
        // that, so the common hit pays for no wake-up.
        rodata.wakeup_bytes = u64::from(config.buffer_bytes / 8);
        open.maps
            .events
            .set_max_entries(config.buffer_bytes)
            .map_err(load_error)?;
        let mut skel = open.load().map_err(load_error)?;
        if config.wait_for_exec {
            let link = skel.progs.target_exec.attach().map_err(load_error)?;
            skel.links.target_exec = Some(link);
        }
        if config.unwind_shadow {
            let link = skel.progs.shadow_thread_exit.attach().map_err(load_error)?;
            skel.links.shadow_thread_exit = Some(link);
        }
        Ok(LoadedProbes { skel })
    }

    /// Attaches entry and exit probes for every function of `table` in the modules from
    /// `first_module` on, filtered to `pid`. `files[i]` opens `table.modules[first_module + i]`.
    /// `exits` says, per function id, where its exit is probed; without it every exit is a
    /// uretprobe.
    pub fn attach(
        &self,
        table: &FunctionTable,
        exits: Option<&[ExitProbe]>,
        first_module: usize,
        files: &[PathBuf],
        pid: u32,
    ) -> Result<AttachedProbes, ProbeError> {
        let started = Instant::now();
        let mut attached = AttachedProbes {
            return_links: Vec::new(),
            exit_site_links: Vec::new(),
            entry_links: Vec::new(),
            attach_time: Duration::ZERO,
        };
        let modules = table.modules.iter().enumerate().skip(first_module);
        for ((module_index, module), file) in modules.zip(files) {
            let plan = ModuleProbes::new(table, exits, module_index as u32);
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
                let link = program
                    .attach_uprobe_multi_with_opts(pid as i32, file, "", opts)
                    .map_err(|error| ProbeError::Attach {
                        count: probes.len(),
                        direction,
                        path: module.clone(),
                        error,
                    })?;
                links.push(link);
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
        attach_sites(program, library, offsets, true, pid, "dlopen return")
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
        attach_sites(program, file, offsets, false, pid, "unwinder entry")
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
}

/// Attaches one `uprobe_multi` link of `program` to `offsets` of `file` (return probes with
/// `retprobe`), filtered to `pid`.
fn attach_sites(
    program: &libbpf_rs::ProgramMut,
    file: &Path,
    offsets: Vec<usize>,
    retprobe: bool,
    pid: u32,
    direction: &'static str,
) -> Result<Link, ProbeError> {
    let count = offsets.len();
    let opts = UprobeMultiOpts {
        offsets,
        retprobe,
        ..Default::default()
    };
    program
        .attach_uprobe_multi_with_opts(pid as i32, file, "", opts)
        .map_err(|error| ProbeError::Attach {
            count,
            direction,
            path: file.display().to_string(),
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

    /// Detaches every probe and says how long it took.
    pub fn detach(self) -> Duration {
        let started = Instant::now();
        drop(self.return_links);
        drop(self.exit_site_links);
        drop(self.entry_links);
        started.elapsed()
    }
}

/// Set in an entry probe's cookie when the entry instruction is also one of the function's exit
/// sites (`COOKIE_ALSO_EXIT` in utrace.bpf.c): two probes on one instruction would run in an
/// order the kernel does not promise.
const COOKIE_ALSO_EXIT: u64 = 1 << 32;

/// The probes of one module, as (file offset, cookie) pairs per kind.
struct ModuleProbes {
    entries: Vec<(usize, u64)>,
    uretprobes: Vec<(usize, u64)>,
    exit_sites: Vec<(usize, u64)>,
}

impl ModuleProbes {
    fn new(table: &FunctionTable, exits: Option<&[ExitProbe]>, module: u32) -> ModuleProbes {
        let mut probes = ModuleProbes {
            entries: Vec::new(),
            uretprobes: Vec::new(),
            exit_sites: Vec::new(),
        };
        for (id, function) in table.functions.iter().enumerate() {
            if function.module != module {
                continue;
            }
            let id = id as u64;
            let entry = function.offset as usize;
            let mut cookie = id;
            match exits.map(|exits| &exits[id as usize]) {
                None | Some(ExitProbe::Uretprobe(_)) => probes.uretprobes.push((entry, id)),
                Some(ExitProbe::Sites(offsets)) => {
                    for &offset in offsets {
                        if offset as usize == entry {
                            cookie |= COOKIE_ALSO_EXIT;
                        } else {
                            probes.exit_sites.push((offset as usize, id));
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
