//! The probe plan: which functions of which files are traced, and how. A [`Planner`] builds the
//! [`ProbePlan`] from [`PlanOptions`] and the program's files, each read once as an
//! [`ElfFile`](crate::elf::ElfFile), and extends it with the libraries and programs the traced
//! processes load later ([`Planner::extend`]). Pure: no BPF, no process; the probe layer attaches
//! the plan, the recorder hands the planned functions to the data file. The work is split by job:
//!
//! - `program`: the files of a program, found as the dynamic loader finds them, and which of them
//!   are traced (`--nest-lib`), with what their PLT calls bind to;
//! - `libraries`: the library globs (`--nest-lib`, `--lib`, `--no-lib`, `--libname`);
//! - `module`: the functions of one traced file: probe sites, PLT stubs, the name filter, exits;
//! - `exits`: how function exits are seen (`--exit-probes`);
//! - `go`: Go programs, which get no return probe and pair calls by goroutine;
//! - `stubs`: the PLT stubs not probed, as the traced function they call sees their calls;
//! - `landings`: the executable's PLT calls probed in the library function they land in;
//! - `ifuncs`: which implementation an ifunc resolves to in the traced process, where utrace can
//!   know it;
//! - `values`: which arguments and return values each function captures (`-A`, `-R`, `-a`);
//! - `watches`: where the recorder watches `dlopen`, `dlclose` and the unwinder;
//! - `events`: kernel events and USDT probes (`-E`) as pseudo-functions after the program's;
//! - `kernel_functions`: which kernel functions `-k` matches, and which of them can be traced;
//! - `kernel_prototypes`: kernel functions' prototypes from the kernel's BTF;
//! - `kernel_values`: which arguments and return values each kernel function captures;
//! - `planner`: the [`Planner`].

mod events;
mod exits;
mod go;
mod ifuncs;
mod kernel_functions;
mod kernel_prototypes;
mod kernel_values;
mod landings;
mod libraries;
mod module;
mod planner;
mod program;
mod stubs;
mod syscall_names;
mod values;
mod watches;

#[cfg(test)]
mod tests;

pub use events::{is_syscall_function_name, PlannedKernelFunction};
pub use events::{EventRequestError, EventRequests, NoUsdtProbe, PlannedEvents, PlannedUsdt};
pub use events::{KERNEL_MODULE, OFF_CPU_FUNCTION, SYSCALL_NUMBERS, USDT_ARGUMENTS_MAX};
pub use events::{STACK_REPAIR_FUNCTION, TRACER_MODULE};
pub use exits::{ExitPolicy, ReturnProbes, UnknownExitPolicy};
pub use go::Pairing;
pub use ifuncs::{IfuncChoices, IfuncNotFollowed, IfuncsUnknown, ResolvedIfuncs};
pub use kernel_functions::{first_traceable, KernelFunctionError, KernelFunctionRequests};
pub use landings::{LandedCall, Landings, Route, StubKept};
pub use libraries::{LibraryPatterns, PltLibraries};
pub use planner::{Extension, Loaded, Planner};
pub use program::{Program, TracedFile};
pub use stubs::StubNeeded;
pub use values::{ValueRequest, ValueRequestError, ValueRequests};
pub use watches::WatchSites;

use std::collections::HashSet;

use crate::elf::{DebugLookup, ElfError, ExitProbe, SitePolicy};
use crate::filter::FilterSpec;
use crate::table::{FunctionId, FunctionTable};

/// What decides the plan, beside the files: the user's choices and the facts about the traced
/// process that planning needs.
#[derive(Clone, Debug, Default)]
pub struct PlanOptions {
    /// Libraries whose own functions are traced too (`--nest-lib`).
    pub nest_libs: LibraryPatterns,
    /// Where the symbols of stripped traced files are looked for (`--debug-dir`).
    pub debug: DebugLookup,
    /// Which PLT calls are traced and how they are named (`--lib`, `--no-lib`, `--libname`).
    pub plt_libraries: PltLibraries,
    /// Which functions are probed, by name (`-f`, `--no-function`): only the filter's function
    /// globs count here; the rest of it applies to the events.
    pub functions: FilterSpec,
    /// Where entry probes may go (`--probe-at-entry` keeps them at the entries).
    pub sites: SitePolicy,
    /// How function exits are seen, when the user chose (`--exit-probes`); see
    /// [`ProbePlan::exit_policy`] for the default.
    pub exits: Option<ExitPolicy>,
    /// Other processes are traced too (`--follow`): they may run other programs, so PLT calls
    /// are probed at their stubs.
    pub follow: bool,
    /// Whether utrace starts the process or attaches to one running.
    pub origin: ProcessOrigin,
    /// The dynamic loader preloads libraries (`LD_PRELOAD`, `/etc/ld.so.preload`), which come
    /// first in its binding order and which utrace does not list: PLT calls are probed at their
    /// stubs.
    pub preloaded_libraries: bool,
    /// The kernel cannot run uprobe sessions (or `UTRACE_ATTACH_MODE=single` forbids them),
    /// which probing a PLT call where it lands needs: PLT calls are probed at their stubs.
    pub kernel_lacks_sessions: bool,
    /// Which implementations the traced process's ifuncs resolve to, as far as utrace knows:
    /// PLT calls into the ifuncs of the libraries it knows are probed where they land.
    pub ifuncs: IfuncChoices,
    /// The arguments and return values to capture (`-A`, `-R`, `-a`).
    pub values: ValueRequests,
    /// Kernel events and USDT probes (`-E`).
    pub events: EventRequests,
    /// Read each function's source line from DWARF (`--srcline`).
    pub source_lines: SourceLines,
}

/// Whether planning reads the functions' source lines (`--srcline`). Off by default: for libc
/// with its Debian debug file (zlib-compressed) they add 60-90 ms to a plan of 85-155 ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SourceLines {
    #[default]
    Skip,
    Read,
}

/// Whether utrace starts the traced process or attaches to one running, and so whether the
/// recorder may pause its threads (which the shadow stack needs, see src/bpf/shadow.bpf.h).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProcessOrigin {
    /// A command utrace starts (`-c`), held until the probes are attached. Its parent, utrace,
    /// may stop it.
    #[default]
    Started,
    /// A process already running (`-p`) whose threads the recorder holds with ptrace: it pauses
    /// them in stops that only it sees.
    Seized,
    /// A process already running that the recorder could not seize (another tracer, Yama's
    /// `ptrace_scope`): a stop would be seen by its parent, so it is never paused.
    Attached,
}

/// Everything the probe layer needs to trace the planned functions.
#[derive(Debug)]
pub struct ProbePlan {
    /// The traced functions, ids dense: what `utrace.data` stores.
    pub table: FunctionTable,
    /// Per function id, where its exit is probed.
    pub exits: Vec<ExitProbe>,
    /// The traced files: `table.modules[i]` is opened by `files[i]`.
    pub files: Vec<TracedFile>,
    /// How function exits are seen: as asked, else uretprobes, except in a process utrace
    /// attached to without seizing it that maps an unwinder. There utrace may not pause the
    /// process to keep the shadow stack (see src/bpf/shadow.bpf.h), and a uretprobe in a frame an
    /// exception unwinds through kills it.
    pub exit_policy: ExitPolicy,
    /// Whether a function may keep a uretprobe: never in a Go program or one that switches
    /// stacks.
    pub return_probes: ReturnProbes,
    /// The executable's PLT stubs whose calls are probed in the library function they land in.
    pub landings: Landings,
    /// The lowest virtual address of the executable's code segments (0 when no PLT call may be
    /// probed where it lands).
    pub executable_code_vaddr: u64,
    /// Where the program's `dlopen` and `dlclose` are, when `--nest-lib` may select a library
    /// it loads later.
    pub dlopen_dlclose_sites: Option<WatchSites>,
    /// The files that define the unwinder's entry points, with their offsets; empty for a
    /// program without an unwinder (plain C).
    pub unwinder_sites: Vec<WatchSites>,
    /// How exits pair with entries: by goroutine for a Go program (see [`Pairing`]).
    pub pairing: Pairing,
    /// (module, file offset) of the exit sites where a function that captures its return value
    /// leaves before it has one (a tail jump): their probes capture nothing.
    pub exits_before_return_value: HashSet<(u32, u64)>,
    /// In a Go program, the functions whose calls pair by goroutine (see [`Pairing`]): its Go
    /// code. Empty in other programs.
    pub go_functions: HashSet<FunctionId>,
    /// The kernel events and USDT probes traced, as pseudo-functions of the table (`-E`).
    pub events: PlannedEvents,
}

/// Why planning failed. Each message says what failed, on which file and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The file's error names it: as the user knows it, not as it was opened (a process's
    /// file through `/proc/PID/map_files`).
    #[error("{error}")]
    Symbols { path: String, error: ElfError },

    #[error("no function of {program} matches --function/--no-function: nothing to trace")]
    NothingToTrace { program: String },

    #[error(transparent)]
    NoUsdtProbe(#[from] NoUsdtProbe),

    #[error(transparent)]
    KernelFunctions(#[from] KernelFunctionError),
}
