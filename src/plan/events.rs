//! Events beside the user functions (`-E`): off-CPU intervals (`sched:sched_switch`), system
//! calls (`raw_syscalls`) and USDT probes. Each becomes a pseudo-function of the function table,
//! numbered after the program's functions, so the BPF programs write ordinary events for it and
//! every report shows it: `linux:schedule` and `sys_NAME` in a module `[kernel]`, `usdt:P:N` in
//! the file that carries the probe.
//!
//! System calls are named from the x86_64 table of `asm/unistd_64.h` (numbers are ABI: they never
//! change), not from the kernel: without tracefs there is no per-syscall tracepoint to list, the
//! kernel's BTF has no enum of the numbers, and `sys_call_table` holds addresses only.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::kernel_functions::KernelFunctionRequests;
use super::syscall_names::SYSCALLS;
use super::{PlanError, ProbePlan, TracedFile};
use crate::elf::{ElfFile, ExitProbe};
use crate::filter::{split_list, Glob, GlobError};
use crate::table::{FunctionId, FunctionKind, ProbeClass, TracedFunction};
use crate::value::{ValueFormat, ValueSource, ValueSpec};

/// The module of the kernel's pseudo-functions.
pub const KERNEL_MODULE: &str = "[kernel]";
/// The module of utrace's own pseudo-functions.
pub const TRACER_MODULE: &str = "[utrace]";
/// The pseudo-function of the time utrace holds a thread stopped to write its stack (the shadow
/// stack's repair, for C++ exceptions and Rust panics).
pub const STACK_REPAIR_FUNCTION: &str = "[utrace: stack repair]";
pub use crate::table::{OFF_CPU_FUNCTION, PREEMPTION_FUNCTION};
/// The most arguments of a USDT probe captured (`<sys/sdt.h>` passes at most 12).
pub const USDT_ARGUMENTS_MAX: usize = 12;
/// System call numbers the BPF side can trace: its map's size.
pub const SYSCALL_NUMBERS: u32 = 512;

/// What `-E` asks for.
#[derive(Clone, Debug, Default)]
pub struct EventRequests {
    /// `tracepoint:sched:sched_switch` (or `offcpu`).
    pub off_cpu: bool,
    /// Record the time the threads are preempted, to take it out of the calls it falls in
    /// (the default where the kernel has the program; `off_cpu` records it among the rest).
    pub preemption: bool,
    /// The system calls asked for, by number.
    pub syscalls: BTreeSet<u32>,
    /// `usdt:PROVIDER:NAME` patterns.
    pub usdt: Vec<UsdtPattern>,
    /// Kernel functions (`-k`, `-K`).
    pub kernel_functions: KernelFunctionRequests,
}

/// One `usdt:PROVIDER:NAME` (globs in both).
#[derive(Clone, Debug)]
pub struct UsdtPattern {
    /// As given, for messages.
    pub text: String,
    pub provider: Glob,
    pub name: Glob,
}

/// An `-E` value that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum EventRequestError {
    #[error(
        "-E '{0}': unknown event: use offcpu (tracepoint:sched:sched_switch), syscalls \
         (tracepoint:syscalls:sys_enter_NAME, globs) or usdt:PROVIDER:NAME"
    )]
    Unknown(String),
    #[error("-E '{0}': no x86_64 system call matches (names as in sys_enter_write)")]
    NoSyscall(String),
    #[error("-E '{text}': {source}")]
    Glob { text: String, source: GlobError },
}

impl EventRequests {
    /// Parses the `-E` values (repeatable, comma lists).
    pub fn parse(values: &[String]) -> Result<EventRequests, EventRequestError> {
        let mut requests = EventRequests::default();
        for value in values {
            for item in split_list(value) {
                requests.add(item)?;
            }
        }
        Ok(requests)
    }

    /// Whether anything is asked.
    pub fn any(&self) -> bool {
        self.off_cpu
            || !self.syscalls.is_empty()
            || !self.usdt.is_empty()
            || self.kernel_functions.any()
    }

    fn add(&mut self, item: &str) -> Result<(), EventRequestError> {
        let glob = |text: &str| {
            Glob::new(text).map_err(|source| EventRequestError::Glob {
                text: item.to_owned(),
                source,
            })
        };
        let parts: Vec<&str> = item.split(':').collect();
        match parts.as_slice() {
            ["offcpu"] | ["tracepoint", "sched", "sched_switch"] => self.off_cpu = true,
            ["syscalls"] | ["tracepoint", "syscalls" | "raw_syscalls", "*"] => {
                self.syscalls
                    .extend(SYSCALLS.iter().map(|&(number, _)| number));
            }
            ["tracepoint", "syscalls", name] => {
                let name = glob(name)?;
                let matching = SYSCALLS.iter().filter(|(_, syscall)| {
                    name.matches(&format!("sys_enter_{syscall}"))
                        || name.matches(&format!("sys_exit_{syscall}"))
                });
                let before = self.syscalls.len();
                self.syscalls.extend(matching.map(|&(number, _)| number));
                if self.syscalls.len() == before && !SYSCALLS.iter().any(|(_, s)| name.matches(s)) {
                    return Err(EventRequestError::NoSyscall(item.to_owned()));
                }
            }
            ["usdt", "*"] => self.usdt.push(UsdtPattern {
                text: item.to_owned(),
                provider: glob("*")?,
                name: glob("*")?,
            }),
            ["usdt", provider, name] => self.usdt.push(UsdtPattern {
                text: item.to_owned(),
                provider: glob(provider)?,
                name: glob(name)?,
            }),
            _ => return Err(EventRequestError::Unknown(item.to_owned())),
        }
        Ok(())
    }
}

/// The name of system call `number`'s pseudo-function (`sys_write`).
pub fn syscall_function_name(number: u32) -> String {
    match SYSCALLS.binary_search_by_key(&number, |&(n, _)| n) {
        Ok(index) => format!("sys_{}", SYSCALLS[index].1),
        Err(_) => format!("sys_{number}"),
    }
}

/// Whether `name` is a system call's pseudo-function (`sys_write`), not a kernel function's.
pub fn is_syscall_function_name(name: &str) -> bool {
    name.strip_prefix("sys_")
        .is_some_and(|call| SYSCALLS.iter().any(|&(_, known)| known == call))
}

/// The events planned, by function id.
#[derive(Clone, Debug, Default)]
pub struct PlannedEvents {
    /// `linux:schedule`'s id, when off-CPU time is traced.
    pub off_cpu: Option<FunctionId>,
    /// Whether `linux:schedule`'s entries capture the user and kernel stacks (`--stack`).
    pub off_cpu_stack: bool,
    /// `linux:preempted`'s id, when the time preempted is recorded apart (without `-E offcpu`).
    pub preemption: Option<FunctionId>,
    /// (system call number, function id) of each system call traced.
    pub syscalls: Vec<(u32, FunctionId)>,
    /// The USDT probes to attach.
    pub usdt: Vec<PlannedUsdt>,
    /// The kernel functions traced (`-k`).
    pub kernel_functions: Vec<PlannedKernelFunction>,
    /// The kernel functions `-k` matched that the kernel cannot trace, by name.
    pub untraceable_kernel_functions: Vec<String>,
    /// `-K`: the deepest kernel function recorded below a system call, 0 for every one.
    pub kernel_depth: u32,
    /// `[utrace: stack repair]`'s id, when the program maps an unwinder, whose shadow stack
    /// utrace may stop a thread to repair.
    pub stack_repair: Option<FunctionId>,
}

impl PlannedEvents {
    pub fn is_empty(&self) -> bool {
        self.off_cpu.is_none()
            && self.preemption.is_none()
            && self.syscalls.is_empty()
            && self.usdt.is_empty()
            && self.kernel_functions.is_empty()
    }
}

/// One kernel function traced (`-k`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedKernelFunction {
    pub function: FunctionId,
    /// Its symbol, as the kernel lists it.
    pub symbol: String,
}

/// One USDT probe of a file: all its sites, one function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedUsdt {
    pub function: FunctionId,
    /// The file, as it is opened.
    pub file: PathBuf,
    pub provider: String,
    pub name: String,
}

/// A USDT pattern that matches no probe of the traced files.
#[derive(Debug, thiserror::Error)]
#[error(
    "-E '{pattern}': no USDT probe of {files} matches (list a file's probes with `utrace info \
     --list-usdt FILE`)"
)]
pub struct NoUsdtProbe {
    pub pattern: String,
    /// The traced files, as a list for the message.
    pub files: String,
}

/// Adds the pseudo-functions `requests` asks for to `plan`, after its functions: the kernel's
/// in a module `[kernel]`, each USDT probe of `files` (the traced files, by module index) in its
/// file's module.
pub(super) fn plan(
    requests: &EventRequests,
    files: &[(u32, &TracedFile, &ElfFile)],
    plan: &mut ProbePlan,
) -> Result<PlannedEvents, PlanError> {
    let mut planned = PlannedEvents::default();
    let kernel = &requests.kernel_functions;
    let kernel_functions = match kernel.any() {
        true => Some(kernel.matching()?),
        false => None,
    };
    let preemption = requests.preemption && !requests.off_cpu;
    if requests.off_cpu || preemption || !requests.syscalls.is_empty() || kernel_functions.is_some()
    {
        let module = plan.table.push_module(KERNEL_MODULE.to_owned());
        plan.files.push(TracedFile {
            path: KERNEL_MODULE.to_owned(),
            open_path: PathBuf::from(KERNEL_MODULE),
        });
        if requests.off_cpu {
            let id = add_function(
                plan,
                OFF_CPU_FUNCTION.to_owned(),
                module,
                FunctionKind::Kernel,
            );
            planned.off_cpu = Some(id);
        }
        if preemption {
            let name = PREEMPTION_FUNCTION.to_owned();
            let id = add_function(plan, name, module, FunctionKind::Preemption);
            planned.preemption = Some(id);
        }
        let returned = ValueSpec::new(ValueSource::Return, ValueFormat::Signed);
        for &number in &requests.syscalls {
            let name = syscall_function_name(number);
            let id = add_function(plan, name, module, FunctionKind::Kernel);
            plan.table.functions[id as usize].values = vec![returned];
            planned.syscalls.push((number, id));
        }
        if let Some(matched) = kernel_functions {
            for symbol in matched.traceable {
                let id = add_function(plan, symbol.clone(), module, FunctionKind::Kernel);
                plan.table.functions[id as usize].probes = kernel.probes;
                planned.kernel_functions.push(PlannedKernelFunction {
                    function: id,
                    symbol,
                });
            }
            planned.untraceable_kernel_functions = matched.untraceable;
            planned.kernel_depth = kernel.depth;
        }
    }
    for pattern in &requests.usdt {
        let mut matched = false;
        for &(module, file, elf) in files {
            for note in elf.usdt_notes() {
                if !pattern.provider.matches(&note.provider) || !pattern.name.matches(&note.name) {
                    continue;
                }
                matched = true;
                let known = planned.usdt.iter().any(|usdt| {
                    usdt.file == file.open_path
                        && usdt.provider == note.provider
                        && usdt.name == note.name
                });
                if known {
                    // Another site of a probe planned: one function for all.
                    continue;
                }
                let name = format!("usdt:{}:{}", note.provider, note.name);
                let id = add_function(plan, name, module, FunctionKind::Event);
                let count = note.argument_count().min(USDT_ARGUMENTS_MAX);
                plan.table.functions[id as usize].values = (1..=count as u8)
                    .map(|n| ValueSpec::new(ValueSource::Argument(n), ValueFormat::Signed))
                    .collect();
                planned.usdt.push(PlannedUsdt {
                    function: id,
                    file: file.open_path.clone(),
                    provider: note.provider.clone(),
                    name: note.name.clone(),
                });
            }
        }
        if !matched {
            let names: Vec<&str> = files.iter().map(|(_, f, _)| f.path.as_str()).collect();
            return Err(NoUsdtProbe {
                pattern: pattern.text.clone(),
                files: names.join(", "),
            }
            .into());
        }
    }
    Ok(planned)
}

/// Adds `[utrace: stack repair]` to `plan`, in a module `[utrace]`: the time the recorder holds a
/// thread stopped to write its stack, written as a call where it happened.
pub(super) fn plan_stack_repair(plan: &mut ProbePlan) -> FunctionId {
    let module = plan.table.push_module(TRACER_MODULE.to_owned());
    plan.files.push(TracedFile {
        path: TRACER_MODULE.to_owned(),
        open_path: PathBuf::from(TRACER_MODULE),
    });
    let name = STACK_REPAIR_FUNCTION.to_owned();
    add_function(plan, name, module, FunctionKind::Tracer)
}

/// Appends a pseudo-function; returns its id.
fn add_function(plan: &mut ProbePlan, name: String, module: u32, kind: FunctionKind) -> FunctionId {
    plan.table.functions.push(TracedFunction {
        name,
        module,
        offset: 0,
        size: 0,
        kind,
        probes: ProbeClass::default(),
        values: Vec::new(),
        user_stack: false,
        argument_names: Vec::new(),
        source: None,
        detached: None,
    });
    // Never probed as user code: no exit site.
    plan.exits.push(ExitProbe::Sites(Vec::new()));
    (plan.table.functions.len() - 1) as FunctionId
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(values: &[&str]) -> Result<EventRequests, EventRequestError> {
        let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        EventRequests::parse(&values)
    }

    #[test]
    fn off_cpu_has_a_short_form() {
        assert!(parse(&["offcpu"]).unwrap().off_cpu);
        assert!(parse(&["tracepoint:sched:sched_switch"]).unwrap().off_cpu);
    }

    #[test]
    fn system_calls_by_tracepoint_name_and_glob() {
        let write = parse(&["tracepoint:syscalls:sys_enter_write"]).unwrap();
        assert_eq!(write.syscalls.iter().collect::<Vec<_>>(), [&1]);
        let exit = parse(&["tracepoint:syscalls:sys_exit_write"]).unwrap();
        assert_eq!(exit.syscalls, write.syscalls);
        let reads = parse(&["tracepoint:syscalls:sys_enter_*read*"]).unwrap();
        let names: Vec<String> = reads
            .syscalls
            .iter()
            .map(|&n| syscall_function_name(n))
            .collect();
        assert!(names.contains(&"sys_read".to_owned()), "{names:?}");
        assert!(names.contains(&"sys_pread64".to_owned()), "{names:?}");
        assert!(!names.contains(&"sys_write".to_owned()), "{names:?}");
        assert_eq!(parse(&["syscalls"]).unwrap().syscalls.len(), SYSCALLS.len());
        assert_eq!(
            parse(&["tracepoint:syscalls:*"]).unwrap().syscalls.len(),
            SYSCALLS.len()
        );
    }

    #[test]
    fn usdt_patterns_and_lists() {
        let requests = parse(&["usdt:myapp:tick,usdt:*"]).unwrap();
        assert_eq!(requests.usdt.len(), 2);
        assert!(requests.usdt[0].name.matches("tick"));
        assert!(requests.usdt[1].provider.matches("anything"));
    }

    #[test]
    fn unknown_events_are_refused() {
        for bad in [
            "tracepoint:sched:sched_wakeup",
            "kprobe:vfs_read",
            "usdt:onlyone",
            "bogus",
        ] {
            let error = parse(&[bad]).unwrap_err();
            assert!(
                matches!(error, EventRequestError::Unknown(_)),
                "{bad}: {error}"
            );
        }
        let error = parse(&["tracepoint:syscalls:sys_enter_nosuchcall"]).unwrap_err();
        assert!(matches!(error, EventRequestError::NoSyscall(_)), "{error}");
    }

    #[test]
    fn system_call_names() {
        assert!(is_syscall_function_name("sys_write"));
        assert!(
            !is_syscall_function_name("sys_ni_syscall") && !is_syscall_function_name("vfs_write")
        );
        assert_eq!(syscall_function_name(1), "sys_write");
        assert_eq!(syscall_function_name(35), "sys_nanosleep");
        assert_eq!(syscall_function_name(511), "sys_511");
    }
}
