//! Kernel events and USDT probes (`-E`, src/bpf/kernel_events.bpf.h): their programs are loaded
//! only when asked (see [`EventPrograms`]); the tracepoints are attached with the always-on
//! programs, the USDT probes per file, filtered to the traced process.

use libbpf_rs::{Link, MapCore, MapFlags, UsdtOpts};

use super::error::{load_error, ProbeError};
use super::interface::skel::{types, OpenUtraceSkel};
use super::{LoadedProbes, Programs, Support};
use crate::plan::PlannedEvents;
use crate::table::FunctionTable;

/// Whether kernel functions (`-k GLOB`) can be traced here; the error names what is missing and
/// what would provide it. They need fentry/fexit programs (BPF trampolines); utrace does not
/// trace them yet on any kernel, and says so where the kernel would allow them.
pub fn check_kernel_functions(globs: &[String]) -> Result<(), ProbeError> {
    let Some(first) = globs.first() else {
        return Ok(());
    };
    let fentry = super::strategy().features.fentry;
    let why = match fentry {
        Support::Yes => "utrace does not trace kernel functions yet (this kernel loads fentry \
                         programs)"
            .to_owned(),
        _ => format!(
            "tracing kernel functions needs fentry/fexit programs (BPF trampolines), which this \
             kernel refuses (fentry: {fentry}): use a kernel that loads them \
             (CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS, CONFIG_DEBUG_INFO_BTF, and no security \
             policy refusing them)"
        ),
    };
    Err(ProbeError::KernelFunctions {
        asked: first.clone(),
        why,
    })
}

/// Which event programs a recording needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventPrograms {
    /// `linux:schedule`'s function id, when off-CPU time is traced.
    pub off_cpu: Option<u32>,
    /// Whether `linux:schedule`'s entries capture the user and kernel stacks (`--stack`).
    pub off_cpu_stack: bool,
    pub syscalls: bool,
    pub usdt: bool,
}

impl EventPrograms {
    /// The programs `events` needs.
    pub fn of(events: &PlannedEvents) -> EventPrograms {
        EventPrograms {
            off_cpu: events.off_cpu,
            off_cpu_stack: events.off_cpu_stack,
            syscalls: !events.syscalls.is_empty(),
            usdt: !events.usdt.is_empty(),
        }
    }

    /// Leaves out of the load the programs not needed, and those of the variant this kernel does
    /// not load (see src/bpf/compat.bpf.h): their verification costs start-up time.
    pub(super) fn choose(self, open: &mut OpenUtraceSkel, legacy: bool) {
        let progs = &mut open.progs;
        let off_cpu = self.off_cpu.is_some();
        progs.off_cpu_switch.set_autoload(off_cpu && !legacy);
        progs.off_cpu_switch_legacy.set_autoload(off_cpu && legacy);
        progs.syscall_entered.set_autoload(self.syscalls && !legacy);
        progs
            .syscall_entered_legacy
            .set_autoload(self.syscalls && legacy);
        progs.syscall_exited.set_autoload(self.syscalls);
        progs.usdt_hit.set_autoload(self.usdt);
    }
}

/// The links of the event programs: dropping it detaches them.
#[derive(Default)]
pub struct EventLinks {
    _links: Vec<Link>,
}

impl LoadedProbes<'_> {
    /// Attaches the events of `events`: the tracepoints (filtered in BPF to the traced
    /// processes), each system call's id in the map, each USDT probe filtered to `pid`.
    pub fn attach_events(
        &self,
        events: &PlannedEvents,
        table: &FunctionTable,
        pid: u32,
    ) -> Result<EventLinks, ProbeError> {
        let mut links = Vec::new();
        let progs = &self.skel.progs;
        let legacy = self.strategy.programs == Programs::Legacy;
        if events.off_cpu.is_some() {
            let program = match legacy {
                true => &progs.off_cpu_switch_legacy,
                false => &progs.off_cpu_switch,
            };
            links.push(program.attach().map_err(load_error)?);
        }
        for &(number, function) in &events.syscalls {
            // Its entries capture the user and kernel stacks (--stack).
            let stack = match table.functions[function as usize].user_stack {
                true => 1 << types::event_bits::KERNEL_EVENT_STACK_BIT.0,
                false => 0,
            };
            let function = function | stack;
            self.skel
                .maps
                .syscall_functions
                .update(
                    &number.to_ne_bytes(),
                    &function.to_ne_bytes(),
                    MapFlags::ANY,
                )
                .map_err(|error| ProbeError::Syscalls { number, error })?;
        }
        if !events.syscalls.is_empty() {
            let program = match legacy {
                true => &progs.syscall_entered_legacy,
                false => &progs.syscall_entered,
            };
            links.push(program.attach().map_err(load_error)?);
            links.push(progs.syscall_exited.attach().map_err(load_error)?);
        }
        for usdt in &events.usdt {
            let opts = UsdtOpts {
                cookie: u64::from(usdt.function),
                ..Default::default()
            };
            let link = progs
                .usdt_hit
                .attach_usdt_with_opts(pid as i32, &usdt.file, &usdt.provider, &usdt.name, opts)
                .map_err(|error| ProbeError::Usdt {
                    probe: format!("{}:{}", usdt.provider, usdt.name),
                    path: usdt.file.display().to_string(),
                    error,
                })?;
            links.push(link);
        }
        Ok(EventLinks { _links: links })
    }
}
