//! Loading: the skeleton opened, its configuration written, its programs loaded and the
//! always-on ones (exec, fork, exit tracepoints) attached.

use std::collections::HashSet;
use std::io;
use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{AsRawLibbpf, OpenObject};

use super::error::{load_error, ProbeError};
use super::interface::skel::{types, OpenUtraceSkel, UtraceSkel, UtraceSkelBuilder};
use super::{AttachMode, AttachStrategy, Programs, Signals};
use crate::plan::Pairing;
use crate::table::FunctionId;

/// What the loader needs to know before the programs are loaded: the BPF side's `struct
/// settings`, and the ring buffer's size.
#[derive(Default)]
pub struct ProbeConfig {
    /// The process whose threads are traced.
    pub tgid: u32,
    /// Ring buffer size in bytes (a power of two, a multiple of the page size).
    pub buffer_bytes: u32,
    /// Count nothing until the target execs (a command utrace forked).
    pub wait_for_exec: bool,
    /// Stop the process at a dlopen's or dlclose's return until the recorder lets it go on.
    pub stop_at_dlopen_dlclose: bool,
    /// Follow the processes the target forks, and the programs they exec (`--follow`): each is
    /// stopped until the recorder has probed it.
    pub follow: bool,
    /// The lowest virtual address of the executable's code segments (see
    /// [`Landings`](crate::plan::Landings)).
    pub executable_code_vaddr: u64,
    /// Keep a shadow stack of the return addresses uretprobes replace, for the unwinder (the
    /// program maps one).
    pub unwind_shadow: bool,
    /// How exits pair with entries: by goroutine in a Go program.
    pub pairing: Pairing,
    /// In a Go program, the functions whose calls pair by goroutine, its Go code; the others
    /// (cgo's C code, PLT stubs) pair by thread. `None` in other programs.
    pub go_functions: Option<HashSet<FunctionId>>,
    /// Some functions capture values (`-A`, `-R`, `-a`), strings up to this many bytes; `None`
    /// when none does.
    pub string_size: Option<u16>,
    /// Some functions capture the user stack at their entry (`--stack`).
    pub user_stacks: bool,
    /// The kernel event and USDT programs needed (`-E`).
    pub events: super::EventPrograms,
    /// Under `--budget`, the functions planned at start, whose links may be replaced (see
    /// generations.rs); 0 otherwise.
    pub replaceable_functions: u32,
}

/// How many functions may capture values: the map's entries are allocated as they are added.
const VALUE_FUNCTIONS_MAX: u32 = 65536;

/// How many places of unread strings are kept (least recently used out), allocated at the start
/// (about 100 bytes each): the recorder looks each up within moments of its event.
const STRING_PLACES_MAX: u32 = 1024;

/// How many distinct stacks are kept (`--stack`): the user stack map holds them all from the
/// start, 2 KiB each (65 frames of a build id and an offset), and as many kernel stacks (520
/// bytes each) when system calls capture theirs.
const USER_STACKS_MAX: u32 = 4096;

/// Storage the skeleton borrows from; it must outlive the [`LoadedProbes`].
pub type ObjectStorage = MaybeUninit<OpenObject>;

/// The loaded BPF programs and their maps, not yet attached.
pub struct LoadedProbes<'obj> {
    pub(super) skel: UtraceSkel<'obj>,
    /// How their probes are attached.
    pub(super) strategy: &'static AttachStrategy,
    /// See [`ProbeConfig::go_functions`].
    pub(super) go_functions: Option<HashSet<FunctionId>>,
    /// The generation of the links each function gets next, and the functions left out.
    pub(super) generations: std::cell::RefCell<super::generations::Generations>,
}

impl<'obj> LoadedProbes<'obj> {
    pub fn load(
        storage: &'obj mut ObjectStorage,
        config: &ProbeConfig,
    ) -> Result<Self, ProbeError> {
        let started = std::time::Instant::now();
        let strategy = super::strategy();
        if config.user_stacks {
            strategy.user_stacks()?;
        }
        if config.events.usdt {
            strategy.usdt()?;
        }
        let builder = UtraceSkelBuilder::default();
        let mut open: OpenUtraceSkel = builder.open(storage).map_err(load_error)?;
        choose_programs(&mut open, strategy, config);
        size_maps(&mut open, strategy, config)?;
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .expect("the BPF object has read-only data (settings)");
        rodata.settings = settings(config);
        let mut skel = open.load().map_err(load_error)?;
        if config.wait_for_exec {
            let link = skel.progs.target_exec.attach().map_err(load_error)?;
            skel.links.target_exec = Some(link);
        }
        if config.follow {
            let link = skel.progs.process_forked.attach().map_err(load_error)?;
            skel.links.process_forked = Some(link);
            if strategy.signals == Signals::FromGuardian {
                let link = skel.progs.child_started.attach().map_err(load_error)?;
                skel.links.child_started = Some(link);
            }
            let link = skel.progs.process_execed.attach().map_err(load_error)?;
            skel.links.process_execed = Some(link);
        }
        // Always: it stops the recording if utrace dies (see process_exit in utrace.bpf.c).
        match strategy.programs {
            Programs::Current => {
                let link = skel.progs.process_exit.attach().map_err(load_error)?;
                skel.links.process_exit = Some(link);
            }
            Programs::Legacy => {
                let link = skel
                    .progs
                    .process_exit_legacy
                    .attach()
                    .map_err(load_error)?;
                skel.links.process_exit_legacy = Some(link);
            }
        }
        if config.unwind_shadow {
            let link = skel.progs.shadow_thread_exit.attach().map_err(load_error)?;
            skel.links.shadow_thread_exit = Some(link);
        }
        log::debug!(
            "loaded the BPF programs (for pid {}) in {:.1} ms",
            config.tgid,
            started.elapsed().as_secs_f64() * 1e3
        );
        Ok(LoadedProbes {
            skel,
            strategy,
            go_functions: config.go_functions.clone(),
            generations: std::cell::RefCell::new(super::generations::Generations::new(
                config.replaceable_functions,
            )),
        })
    }

    /// How [`attach`](Self::attach) attaches probes.
    pub fn attach_mode(&self) -> AttachMode {
        self.strategy.mode
    }
}

/// Leaves out of the load the programs this kernel or this recording does not use: those that need
/// what the kernel lacks would be refused, and every program loaded costs start-up time.
fn choose_programs(open: &mut OpenUtraceSkel, strategy: &AttachStrategy, config: &ProbeConfig) {
    let legacy = strategy.programs == Programs::Legacy;
    let progs = &mut open.progs;
    progs.plt_call.set_autoload(strategy.sessions);
    progs.library_plt_call.set_autoload(strategy.sessions);
    progs.got_call.set_autoload(strategy.sessions);
    progs.function_call.set_autoload(strategy.sessions);
    // Only where sessions are missing do functions get a separate return probe; its
    // verification costs tens of milliseconds at start-up (the shadow stack's code).
    progs
        .function_exit
        .set_autoload(!strategy.sessions && !legacy);
    progs
        .function_exit_legacy
        .set_autoload(!strategy.sessions && legacy);
    progs.function_entry.set_autoload(!legacy);
    progs.function_entry_legacy.set_autoload(legacy);
    progs.function_exit_site.set_autoload(!legacy);
    progs.function_exit_site_legacy.set_autoload(legacy);
    progs.unwinder_entered.set_autoload(!legacy);
    progs.unwinder_entered_legacy.set_autoload(legacy);
    progs.process_exit.set_autoload(!legacy);
    progs.process_exit_legacy.set_autoload(legacy);
    progs.process_forked.set_autoload(config.follow);
    progs
        .child_started
        .set_autoload(config.follow && strategy.signals == Signals::FromGuardian);
    config.events.choose(open, legacy);
    if strategy.mode == AttachMode::Single {
        for program in [
            &mut open.progs.function_entry,
            &mut open.progs.function_exit_site,
            &mut open.progs.function_exit,
            &mut open.progs.libraries_changed,
            &mut open.progs.unwinder_entered,
        ] {
            attach_through_perf_events(program);
        }
    }
}

/// Sizes the maps: the ring buffer as asked, and the maps nothing will use to one entry (a hash
/// map's entries are allocated when it is created).
fn size_maps(
    open: &mut OpenUtraceSkel,
    strategy: &AttachStrategy,
    config: &ProbeConfig,
) -> Result<(), ProbeError> {
    open.maps
        .events
        .set_max_entries(config.buffer_bytes)
        .map_err(load_error)?;
    if config.string_size.is_some() || config.user_stacks {
        open.maps
            .value_specs
            .set_max_entries(VALUE_FUNCTIONS_MAX)
            .map_err(load_error)?;
    }
    if config.string_size.is_some() {
        open.maps
            .string_places
            .set_max_entries(STRING_PLACES_MAX)
            .map_err(load_error)?;
    }
    if config.user_stacks {
        open.maps
            .user_stacks
            .set_max_entries(USER_STACKS_MAX)
            .map_err(load_error)?;
        open.maps
            .stacks
            .set_max_entries(USER_STACKS_MAX)
            .map_err(load_error)?;
        if config.events.kernel_stacks() {
            open.maps
                .kernel_stacks
                .set_max_entries(USER_STACKS_MAX)
                .map_err(load_error)?;
        }
    }
    if config.replaceable_functions > 0 {
        open.maps
            .link_generations
            .set_max_entries(config.replaceable_functions)
            .map_err(load_error)?;
    }
    let maps = &mut open.maps;
    // Without -K, kernel_function_hit never looks at the depths.
    if config.events.kernel_depth == 0 {
        maps.kernel_depths.set_max_entries(1).map_err(load_error)?;
    }
    if !config.follow {
        maps.followed_processes
            .set_max_entries(1)
            .map_err(load_error)?;
    }
    if !config.follow || strategy.signals == Signals::FromBpf {
        maps.starting_children
            .set_max_entries(1)
            .map_err(load_error)?;
    }
    if config.events.preemption.is_none() {
        maps.preempted_threads
            .set_max_entries(1)
            .map_err(load_error)?;
    }
    if strategy.programs == Programs::Current {
        maps.address_cookies
            .set_max_entries(1)
            .map_err(load_error)?;
        maps.pending_returns
            .set_max_entries(1)
            .map_err(load_error)?;
    }
    Ok(())
}

/// Makes a `uprobe.multi` program one a perf-event link can take: the kernel picks the
/// program's helpers (`bpf_get_attach_cookie` among them) by its expected attach type, and
/// refuses a link of another kind.
fn attach_through_perf_events(program: &mut libbpf_rs::OpenProgramMut) {
    // What libbpf gives a `SEC("uprobe")` program: no expected attach type.
    const PLAIN_UPROBE: libbpf_rs::libbpf_sys::bpf_attach_type = 0;
    // SAFETY: the program belongs to an object opened and not yet loaded, which is when its
    // expected attach type may change; libbpf only stores the value.
    let status = unsafe {
        libbpf_rs::libbpf_sys::bpf_program__set_expected_attach_type(
            program.as_libbpf_object().as_ptr(),
            PLAIN_UPROBE,
        )
    };
    debug_assert_eq!(status, 0);
}

/// The BPF side's `struct settings` (src/bpf/interface.h) for `config`.
fn settings(config: &ProbeConfig) -> types::settings {
    // Written whole: a field added in C and not here fails to compile.
    types::settings {
        tgid: config.tgid,
        wait_for_exec: MaybeUninit::new(config.wait_for_exec),
        stop_at_dlopen_dlclose: MaybeUninit::new(config.stop_at_dlopen_dlclose),
        follow: MaybeUninit::new(config.follow),
        unwind_shadow: MaybeUninit::new(config.unwind_shadow),
        // Wake the consumer only when an eighth of the buffer waits; it polls on a timer below
        // that, so the common hit pays for no wake-up.
        wakeup_bytes: u64::from(config.buffer_bytes / 8),
        executable_code_vaddr: config.executable_code_vaddr,
        recorder_tgid: u64::from(std::process::id()),
        go_goroutines: u64::from(matches!(config.pairing, Pairing::Goroutine { .. })),
        go_goid_offset: match config.pairing {
            Pairing::Goroutine {
                goid_offset: Some(offset),
            } => u64::from(offset),
            _ => 0,
        },
        // The user stack's id is a value too.
        value_functions: u32::from(config.string_size.is_some() || config.user_stacks),
        string_size: u32::from(config.string_size.unwrap_or(0)),
        user_stacks: u64::from(config.user_stacks),
        off_cpu_function: config.events.off_cpu.unwrap_or(0)
            | match config.events.off_cpu_stack {
                true => 1 << types::event_bits::KERNEL_EVENT_STACK_BIT.0,
                false => 0,
            },
        kernel_depth: config.events.kernel_depth,
        preempted_function: config.events.preemption.unwrap_or(0),
        replaceable_links: u32::from(config.replaceable_functions > 0),
    }
}

/// Raises this process's limit of open files as far as it may: where the kernel has no
/// `uprobe_multi`, each probe is a perf event with a descriptor of its own, and a Rust program's
/// thousand functions need more than the usual 1024, a Go server's 4,000 functions with their
/// exits more than the kernel's default hard limit of 4,096 (what a process gets without a
/// service manager that raises it). As root, the hard limit goes up to the kernel's
/// `fs.nr_open`; else the soft limit goes up to the hard one. Said under `-d` when neither can.
pub fn allow_many_probes() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let set = |limit: &libc::rlimit| {
        // SAFETY: setrlimit reads one rlimit, which lives through the call.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, limit) == 0 }
    };
    // SAFETY: getrlimit writes one rlimit, which lives through the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return log::debug!(
            "cannot read the limit of open files: {}",
            io::Error::last_os_error()
        );
    }
    let kernel_most = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|text| text.trim().parse::<libc::rlim_t>().ok());
    if let Some(most) = kernel_most.filter(|&most| most > limit.rlim_max) {
        if set(&libc::rlimit {
            rlim_cur: most,
            rlim_max: most,
        }) {
            return;
        }
    }
    limit.rlim_cur = limit.rlim_max;
    if !set(&limit) {
        log::debug!(
            "cannot raise the limit of open files: {}",
            io::Error::last_os_error()
        );
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
