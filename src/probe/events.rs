//! Kernel events and USDT probes (`-E`, src/bpf/kernel_events.bpf.h): their programs are loaded
//! only when asked (see [`EventPrograms`]); the tracepoints are attached with the always-on
//! programs, the USDT probes per file, filtered to the traced process.

use libbpf_rs::btf::types::Typedef;
use libbpf_rs::btf::Btf;
use libbpf_rs::{Link, MapCore, MapFlags, UsdtOpts};

use super::error::{load_error, ProbeError};
use super::interface::skel::{types, OpenUtraceSkel};
use super::strategy::KernelAttach;
use super::{LoadedProbes, Programs};
use crate::plan::{KernelFunctionRequests, PlannedEvents};
use crate::table::FunctionTable;

/// How the kernel functions `requests` asks for (`-k`) are attached here, `None` when it asks
/// for none; found before anything runs: the error names what the kernel lacks and which kernels
/// have it.
pub fn check_kernel_functions(
    requests: &KernelFunctionRequests,
) -> Result<Option<KernelAttach>, ProbeError> {
    match requests.any() {
        true => super::strategy().kernel_functions().map(Some),
        false => Ok(None),
    }
}

/// Whether the time preempted can be recorded by default: the kernel's BTF has the type of
/// `sched_switch`'s arguments that a `tp_btf` program is verified against. Said under `-d` when
/// it cannot, once: the recording goes on without it.
pub fn preemption_recordable() -> bool {
    static RECORDABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *RECORDABLE.get_or_init(|| {
        let btf = Btf::from_vmlinux();
        let found = (btf.as_ref().ok()).and_then(|btf| btf.type_by_name::<Typedef>(SCHED_SWITCH));
        if found.is_none() {
            log::debug!(
                "the kernel cannot load the sched_switch program ({SCHED_SWITCH} not in its \
                 BTF): the time preempted stays in the calls' times"
            );
        }
        found.is_some()
    })
}

/// The type libbpf attaches a `tp_btf/sched_switch` program by.
const SCHED_SWITCH: &str = "btf_trace_sched_switch";

/// Which event programs a recording needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventPrograms {
    /// `linux:schedule`'s function id, when off-CPU time is traced.
    pub off_cpu: Option<u32>,
    /// Whether `linux:schedule`'s entries capture the user and kernel stacks (`--stack`).
    pub off_cpu_stack: bool,
    /// `linux:preempted`'s function id, when the time preempted is recorded apart.
    pub preemption: Option<u32>,
    pub syscalls: bool,
    pub usdt: bool,
    /// How kernel functions (`-k`) are attached, when there are any.
    pub kernel_functions: Option<KernelAttach>,
    /// `-K`: the deepest kernel function recorded, 0 for all.
    pub kernel_depth: u32,
    /// Whether some kernel functions' entries capture the stacks (`--stack`).
    pub kernel_function_stacks: bool,
}

impl EventPrograms {
    /// The programs `events` needs (of `table`'s functions).
    pub fn of(events: &PlannedEvents, table: &FunctionTable) -> Result<EventPrograms, ProbeError> {
        let kernel_functions = match events.kernel_functions.is_empty() {
            true => None,
            false => Some(super::strategy().kernel_functions()?),
        };
        Ok(EventPrograms {
            off_cpu: events.off_cpu,
            off_cpu_stack: events.off_cpu_stack,
            preemption: events.preemption,
            syscalls: !events.syscalls.is_empty(),
            usdt: !events.usdt.is_empty(),
            kernel_functions,
            kernel_depth: events.kernel_depth,
            kernel_function_stacks: (events.kernel_functions.iter())
                .any(|k| table.functions[k.function as usize].user_stack),
        })
    }

    /// Whether the context switches of the traced threads are recorded (`-E offcpu`, or the
    /// time preempted).
    pub fn switches(&self) -> bool {
        self.off_cpu.is_some() || self.preemption.is_some()
    }

    /// Whether the kernel stacks are captured somewhere (`--stack` on a kernel event).
    pub fn kernel_stacks(&self) -> bool {
        self.syscalls || self.off_cpu_stack || self.kernel_function_stacks
    }

    /// Leaves out of the load the programs not needed, and those of the variant this kernel does
    /// not load (see src/bpf/compat.bpf.h): their verification costs start-up time.
    pub(super) fn choose(self, open: &mut OpenUtraceSkel, legacy: bool) {
        let progs = &mut open.progs;
        let off_cpu = self.switches();
        progs.off_cpu_switch.set_autoload(off_cpu && !legacy);
        progs.off_cpu_switch_legacy.set_autoload(off_cpu && legacy);
        progs.syscall_entered.set_autoload(self.syscalls && !legacy);
        progs
            .syscall_entered_legacy
            .set_autoload(self.syscalls && legacy);
        progs.syscall_exited.set_autoload(self.syscalls);
        progs.usdt_hit.set_autoload(self.usdt);
        let multi = self.kernel_functions == Some(KernelAttach::Multi);
        let single = self.kernel_functions == Some(KernelAttach::Single);
        progs.kernel_function_entered_multi.set_autoload(multi);
        progs.kernel_function_returned_multi.set_autoload(multi);
        progs.kernel_function_entered.set_autoload(single);
        progs.kernel_function_returned.set_autoload(single);
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
        let mut links = self.attach_kernel_functions(events, table)?;
        let progs = &self.skel.progs;
        let legacy = self.strategy.programs == Programs::Legacy;
        if events.off_cpu.is_some() || events.preemption.is_some() {
            let program = match legacy {
                true => &progs.off_cpu_switch_legacy,
                false => &progs.off_cpu_switch,
            };
            links.push(program.attach().map_err(load_error)?);
        }
        for &(number, function) in &events.syscalls {
            let function = kernel_event_id(table, function);
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

/// What a kernel event's probe knows it by: its function id, with KERNEL_EVENT_STACK set when
/// its entries capture the user and kernel stacks (`--stack`).
pub(super) fn kernel_event_id(table: &FunctionTable, function: u32) -> u32 {
    match table.functions[function as usize].user_stack {
        true => function | 1 << types::event_bits::KERNEL_EVENT_STACK_BIT.0,
        false => function,
    }
}
