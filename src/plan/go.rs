//! Go programs. Go's own stack unwinder (garbage collection, stack growth in `morestack`,
//! `systemstack`) walks every return address on a goroutine's stack and dies on one outside its
//! tables, which is what a uretprobe leaves there (the kernel's trampoline): a Go program gets
//! no return probe at all. Its exits are probed on their `ret` instructions, which leave the
//! stack alone; a function whose exits cannot all be found is traced at its entry only.
//!
//! Go also copies a goroutine's stack when it grows, so a call's return-address slot moves
//! between its entry and its exit, and a goroutine moves between threads: its calls are paired
//! by function within the goroutine ([`Pairing::Goroutine`]).

use super::exits::exit_probes;
use super::ExitPolicy;
use crate::elf::{ElfFile, ExitProbe, FunctionSymbol};

/// How the BPF programs tell which entry an exit closes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pairing {
    /// By thread and return-address slot.
    #[default]
    ReturnSlot,
    /// By goroutine (the `g` that Go's ABI keeps in `r14`) and the slot's distance from the top
    /// of the goroutine's stack: the slot itself moves when Go copies the stack, and a goroutine
    /// moves between threads.
    Goroutine,
}

/// The exit policy of a Go program: exits on their instructions, whatever was `chosen`; says so
/// when the user asked for uretprobes.
pub(super) fn exit_policy(chosen: Option<ExitPolicy>) -> ExitPolicy {
    if chosen == Some(ExitPolicy::Uretprobe) {
        log::warn!(
            "Go program: --exit-probes=uretprobe ignored (a uretprobe's return address crashes \
             Go's stack unwinder); exits are probed on their ret instructions"
        );
    }
    ExitPolicy::Ret
}

/// Where the exits of `functions` of the Go file `elf` are probed: on their instructions, and
/// nowhere (entry only) for a function whose exits cannot all be found.
pub(super) fn go_exit_probes(elf: &ElfFile, functions: &[FunctionSymbol]) -> Vec<ExitProbe> {
    let mut probes = exit_probes(elf, functions, ExitPolicy::Ret, false);
    for probe in &mut probes {
        if matches!(probe, ExitProbe::Uretprobe(_)) {
            *probe = ExitProbe::Sites(Vec::new());
        }
    }
    probes
}

/// Says in one line what a user gets on a Go program, with how many of `exits` are entry only.
pub(super) fn say_go_program(exits: &[ExitProbe]) {
    let entry_only = exits
        .iter()
        .filter(|exit| matches!(exit, ExitProbe::Sites(sites) if sites.is_empty()))
        .count();
    log::warn!(
        "Go program: exits seen at ret instructions ({entry_only} of {} functions entry only, \
         their durations unknown); calls paired by goroutine",
        exits.len()
    );
}
