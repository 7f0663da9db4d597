//! Go programs. Go's own stack unwinder (garbage collection, stack growth in `morestack`,
//! `systemstack`) walks every return address on a goroutine's stack and dies on one outside its
//! tables, which is what a uretprobe leaves there (the kernel's trampoline): a Go program gets
//! no return probe at all. Its exits are probed on their `ret` instructions, which leave the
//! stack alone; a function whose exits cannot all be found is traced at its entry only.
//!
//! Go also copies a goroutine's stack when it grows, so a call's return-address slot moves
//! between its entry and its exit, and a goroutine moves between threads: its calls are paired
//! by function within the goroutine ([`Pairing::Goroutine`]).

use super::exits::{policy_without_uretprobes, say_without_uretprobes};
use super::ExitPolicy;
use crate::elf::ExitProbe;

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

/// How messages name a Go program.
const GO_PROGRAM: &str = "Go program";

/// The exit policy of a Go program: exits on their instructions, whatever was `chosen`; says so
/// when the user asked for uretprobes.
pub(super) fn exit_policy(chosen: Option<ExitPolicy>) -> ExitPolicy {
    let why = "a uretprobe's return address crashes Go's stack unwinder";
    policy_without_uretprobes(chosen, GO_PROGRAM, why)
}

/// Says in one line what a user gets on a Go program, with how many of `exits` are entry only.
pub(super) fn say_go_program(exits: &[ExitProbe]) {
    say_without_uretprobes(GO_PROGRAM, exits, "; calls paired by goroutine");
}
