//! How function exits are seen (`--exit-probes`): the policy, and where each function's exit is
//! probed under it.

use std::collections::BTreeSet;

use super::program::OpenedFile;
use super::{ProcessOrigin, WatchSites};
use crate::elf::contexts::SwitcherUse;
use crate::elf::returns::saves_its_return_address;
use crate::elf::{ElfFile, ExitProbe, FunctionSymbol, LeafExits, NoExitSites};
use crate::table::FunctionKind;

/// How function exits are seen (`--exit-probes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExitPolicy {
    /// A probe on each instruction that leaves the function (its `ret`s and tail jumps), and a
    /// uretprobe only where those cannot all be found: the stack is never touched, so C++
    /// exceptions unwind through traced frames.
    Ret,
    /// A uretprobe on every function: the kernel replaces the return address on the stack, which
    /// kills a C++ program whose exception unwinds through the frame.
    #[default]
    Uretprobe,
}

/// Whether a function may keep a uretprobe: where [`ExitPolicy::Uretprobe`] asks for one, or
/// where its exits cannot all be found on its instructions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReturnProbes {
    #[default]
    Allowed,
    /// No uretprobe at all, whatever `--exit-probes` says: the program switches stacks (see
    /// src/elf/contexts.rs), or is Go (see src/plan/go.rs). A function whose exits cannot all be
    /// found on its instructions is traced at its entry only.
    Never,
}

/// An `--exit-probes` value that is neither `ret` nor `uretprobe`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown exit probe kind `{0}`: use ret or uretprobe")]
pub struct UnknownExitPolicy(pub String);

impl std::str::FromStr for ExitPolicy {
    type Err = UnknownExitPolicy;

    fn from_str(name: &str) -> Result<ExitPolicy, UnknownExitPolicy> {
        match name {
            "ret" => Ok(ExitPolicy::Ret),
            "uretprobe" => Ok(ExitPolicy::Uretprobe),
            _ => Err(UnknownExitPolicy(name.to_owned())),
        }
    }
}

impl ExitPolicy {
    /// The policy `chosen` by the user, else uretprobes, except in a process utrace attached to
    /// without seizing it that maps an unwinder (`unwinders` not empty). There utrace may not
    /// pause the process to keep the shadow stack (see src/bpf/shadow.bpf.h), and a uretprobe in
    /// a frame an exception unwinds through kills it.
    pub(super) fn chosen_or_default(
        chosen: Option<ExitPolicy>,
        origin: ProcessOrigin,
        unwinders: &[WatchSites],
    ) -> ExitPolicy {
        if let Some(policy) = chosen {
            return policy;
        }
        if origin == ProcessOrigin::Attached && !unwinders.is_empty() {
            log::debug!(
                "exits probed on their instructions (--exit-probes=ret): the process \
                 maps an unwinder, and utrace can neither stop it nor hold it with ptrace"
            );
            ExitPolicy::Ret
        } else {
            ExitPolicy::Uretprobe
        }
    }
}

impl ExitPolicy {
    /// The policy for a program a traced process execs under `--follow`: as `chosen` by the
    /// user, else the plan's `default`, except when the program maps an unwinder (`unwinders`
    /// not empty). The shadow stack follows only the target's threads, and watches only the
    /// unwinder of the program utrace started (see src/bpf/shadow.bpf.h): elsewhere a uretprobe
    /// in a frame an exception unwinds through kills the process. Probes on instructions never
    /// touch the stack.
    pub(super) fn for_execed_program(
        chosen: Option<ExitPolicy>,
        default: ExitPolicy,
        unwinders: &[WatchSites],
        program: &str,
    ) -> ExitPolicy {
        match chosen {
            Some(policy) => policy,
            None if !unwinders.is_empty() && default == ExitPolicy::Uretprobe => {
                log::debug!(
                    "exits of {program} probed on their instructions (--exit-probes=ret): it \
                     maps an unwinder, and the shadow stack follows only the target"
                );
                ExitPolicy::Ret
            }
            None => default,
        }
    }
}

/// Where the exits of `functions` of `elf` are probed: on their instructions where they can be
/// under [`ExitPolicy::Ret`], with uretprobes otherwise. A function that saves its return address
/// (setjmp) is never given a uretprobe, which would break the `longjmp` back to it: its exits are
/// probed on instructions, or not at all when they cannot be found. Nor are `main` and the start
/// routines the program gives `pthread_create`, where their exits can be found: their return
/// probes would stay pending for as long as the program or the thread runs, which holds up every
/// other tracer's release of uprobes meanwhile (see src/probe/release.rs). Unless `stacks` are
/// captured (`--stack`): the kernel puts the return addresses back into a captured stack by
/// pairing the trampolines it finds there with the thread's pending return probes in order,
/// which is one off where a frameless function (a system call's wrapper) has one; the outermost
/// is the last, and without it the stack loses that function rather than its caller.
pub(super) fn exit_probes(
    elf: &ElfFile,
    functions: &[FunctionSymbol],
    policy: ExitPolicy,
    stacks: bool,
) -> Vec<ExitProbe> {
    let saves =
        |f: &FunctionSymbol| saves_its_return_address(f.plt_symbol.as_deref().unwrap_or(&f.name));
    let mut probes = match policy {
        ExitPolicy::Ret => elf.exit_probes(functions, LeafExits::Uretprobe),
        ExitPolicy::Uretprobe => {
            let thread_starts = match stacks {
                true => BTreeSet::new(),
                false => elf.thread_start_routines(),
            };
            let outermost = |f: &FunctionSymbol| {
                is_main(f)
                    || (f.kind == FunctionKind::Function && thread_starts.contains(&f.address))
            };
            let on_instructions = |f: &FunctionSymbol| saves(f) || (!stacks && outermost(f));
            let chosen: Vec<FunctionSymbol> = functions
                .iter()
                .filter(|f| on_instructions(f))
                .cloned()
                .collect();
            let mut chosen_probes = match chosen.is_empty() {
                true => Vec::new(),
                false => elf.exit_probes(&chosen, LeafExits::Uretprobe),
            }
            .into_iter();
            functions
                .iter()
                .map(|f| match on_instructions(f) {
                    true => chosen_probes.next().expect("one probe per chosen function"),
                    false => ExitProbe::Uretprobe(NoExitSites::UretprobesAsked),
                })
                .collect()
        }
    };
    for (function, probe) in functions.iter().zip(&mut probes) {
        if saves(function) && matches!(probe, ExitProbe::Uretprobe(_)) {
            *probe = ExitProbe::Sites(Vec::new());
        }
    }
    probes
}

/// Where the exits of `functions` of `elf` are probed without a single uretprobe
/// ([`ReturnProbes::Never`]): on their instructions, and nowhere (entry only) for a function whose
/// exits cannot all be found.
pub(super) fn instruction_exit_probes(
    elf: &ElfFile,
    functions: &[FunctionSymbol],
) -> Vec<ExitProbe> {
    let mut probes = elf.exit_probes(functions, LeafExits::Instructions);
    for probe in &mut probes {
        if matches!(probe, ExitProbe::Uretprobe(_)) {
            *probe = ExitProbe::Sites(Vec::new());
        }
    }
    probes
}

/// The function through which the program of `opened` (the executable, then its libraries)
/// switches stacks, if it does: one its executable imports or defines, or one a library imports
/// (the C library defines `swapcontext` for everyone).
pub(super) fn stack_switcher(opened: &[OpenedFile]) -> Option<String> {
    opened.iter().enumerate().find_map(|(position, opened)| {
        let using = match position {
            0 => SwitcherUse::ImportedOrDefined,
            _ => SwitcherUse::Imported,
        };
        let elf = opened.elf.as_ref().ok()?;
        elf.stack_switcher(using).map(str::to_owned)
    })
}

/// The exit policy of a program that gets no uretprobe ([`ReturnProbes::Never`]), named
/// `program` in messages (`Go program`) as it gets none because `why`: exits on their
/// instructions, whatever was `chosen`; says so when the user asked for uretprobes.
pub(super) fn policy_without_uretprobes(
    chosen: Option<ExitPolicy>,
    program: &str,
    why: &str,
) -> ExitPolicy {
    if chosen == Some(ExitPolicy::Uretprobe) {
        log::warn!(
            "{program}: --exit-probes=uretprobe ignored ({why}); exits are probed on their ret \
             instructions"
        );
    }
    ExitPolicy::Ret
}

/// Says in one line what a user gets on `program`, which has no uretprobe, with how many of
/// `exits` are entry only; `more` follows.
pub(super) fn say_without_uretprobes(program: &str, exits: &[ExitProbe], more: &str) {
    let entry_only = exits
        .iter()
        .filter(|exit| matches!(exit, ExitProbe::Sites(sites) if sites.is_empty()))
        .count();
    log::warn!(
        "{program}: exits seen at ret instructions ({entry_only} of {} functions entry only, \
         their durations unknown){more}",
        exits.len()
    );
}

/// The exit policy of a program that switches stacks through `switcher`: exits on their
/// instructions, whatever was `chosen`; says so when the user asked for uretprobes.
pub(super) fn stack_switching_policy(chosen: Option<ExitPolicy>, switcher: &str) -> ExitPolicy {
    let why = "the kernel would return to the frames of one stack from the other";
    policy_without_uretprobes(chosen, &switching_program(switcher), why)
}

/// Says in one line what a user gets on a program that switches stacks through `switcher`, with
/// how many of `exits` are entry only.
pub(super) fn say_stack_switches(switcher: &str, exits: &[ExitProbe]) {
    say_without_uretprobes(&switching_program(switcher), exits, "");
}

/// How messages name a program that switches stacks through `switcher`.
fn switching_program(switcher: &str) -> String {
    format!("the program switches stacks ({switcher})")
}

/// The program's `main`, which returns when the program is about to end.
fn is_main(function: &FunctionSymbol) -> bool {
    function.name == "main" && function.plt_symbol.is_none()
}
