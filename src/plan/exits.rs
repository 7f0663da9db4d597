//! How function exits are seen (`--exit-probes`): the policy, and where each function's exit is
//! probed under it.

use super::{ProcessOrigin, WatchSites};
use crate::elf::returns::saves_its_return_address;
use crate::elf::{ElfFile, ExitProbe, FunctionSymbol, NoExitSites};

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
/// probed on instructions, or not at all when they cannot be found. Nor is `main` where its exits
/// can be found: its return probe would stay pending for the whole recording, which holds up
/// every other tracer's release of uprobes while the program runs (see src/probe/release.rs).
/// Unless `stacks` are captured (`--stack`): the kernel puts the return addresses back into a
/// captured stack by pairing the trampolines it finds there with the thread's pending return
/// probes in order, which is one off where a frameless function (a system call's wrapper) has
/// one; `main`'s is the last, and without it the stack loses `main` rather than its caller.
pub(super) fn exit_probes(
    elf: &ElfFile,
    functions: &[FunctionSymbol],
    policy: ExitPolicy,
    stacks: bool,
) -> Vec<ExitProbe> {
    let saves =
        |f: &FunctionSymbol| saves_its_return_address(f.plt_symbol.as_deref().unwrap_or(&f.name));
    let on_instructions = |f: &FunctionSymbol| saves(f) || (!stacks && is_main(f));
    let mut probes = match policy {
        ExitPolicy::Ret => elf.exit_probes(functions),
        ExitPolicy::Uretprobe => {
            let chosen: Vec<FunctionSymbol> = functions
                .iter()
                .filter(|f| on_instructions(f))
                .cloned()
                .collect();
            let mut chosen_probes = match chosen.is_empty() {
                true => Vec::new(),
                false => elf.exit_probes(&chosen),
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

/// The program's `main`, which returns when the program is about to end.
fn is_main(function: &FunctionSymbol) -> bool {
    function.name == "main" && function.plt_symbol.is_none()
}
