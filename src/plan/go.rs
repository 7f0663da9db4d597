//! Go programs. Go's own stack unwinder (garbage collection, stack growth in `morestack`,
//! `systemstack`) walks every return address on a goroutine's stack and dies on one outside its
//! tables, which is what a uretprobe leaves there (the kernel's trampoline): a Go program gets
//! no return probe at all. Its exits are probed on their `ret` instructions, which leave the
//! stack alone; a function whose exits cannot all be found is traced at its entry only.
//!
//! Go also copies a goroutine's stack when it grows, so a call's return-address slot moves
//! between its entry and its exit, and a goroutine moves between threads: its calls are paired
//! by function within the goroutine ([`Pairing::Goroutine`]).

use std::collections::HashSet;

use super::exits::{policy_without_uretprobes, say_without_uretprobes};
use super::{ExitPolicy, PlanOptions};
use crate::diagnostics::plural;
use crate::elf::{ElfFile, ExitProbe};
use crate::table::{FunctionId, FunctionKind, FunctionTable};

/// How the BPF programs tell which entry an exit closes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pairing {
    /// By thread and return-address slot.
    #[default]
    ReturnSlot,
    /// By goroutine (the `g` that Go's ABI keeps in `r14`) and the slot's distance from the top
    /// of the goroutine's stack: the slot itself moves when Go copies the stack, and a goroutine
    /// moves between threads. A goroutine is named by its id, read at `goid_offset` in its `g`
    /// where the program's DWARF gives it, else by a number the BPF programs give it.
    Goroutine { goid_offset: Option<u32> },
}

/// The functions of `table` whose calls pair by goroutine: the Go code of the executable
/// `program` (module 0), as Go's function table gives it. Not its C code (cgo's), its PLT stubs
/// or the libraries', in which r14 holds no goroutine's `g`. Where the table cannot be read,
/// every function of the executable but its stubs, as before it was read.
pub(super) fn go_functions(table: &FunctionTable, program: &ElfFile) -> HashSet<FunctionId> {
    let code = program.go_code();
    let in_go_code = |offset: u64| {
        let Some(code) = &code else {
            return true;
        };
        let after = code.partition_point(|range| range.end <= offset);
        code.get(after).is_some_and(|range| range.contains(&offset))
    };
    (table.functions.iter().enumerate())
        .filter(|(_, f)| f.module == 0 && f.kind == FunctionKind::Function)
        .filter(|(_, f)| in_go_code(f.offset))
        .map(|(id, _)| id as FunctionId)
        .collect()
}

/// How messages name a Go program.
const GO_PROGRAM: &str = "Go program";

/// The exit policy of a Go program: exits on their instructions, whatever was `chosen`; says so
/// when the user asked for uretprobes.
pub(super) fn exit_policy(chosen: Option<ExitPolicy>) -> ExitPolicy {
    let why = "a uretprobe's return address crashes Go's stack unwinder";
    policy_without_uretprobes(chosen, GO_PROGRAM, why)
}

/// Says in one line what a user gets on a Go program, with how many of `exits` are entry only
/// and how many of the runtime's functions were left out.
pub(super) fn say_go_program(exits: &[ExitProbe], runtime_left_out: usize) {
    let runtime = match runtime_left_out {
        0 => String::new(),
        count => format!(
            "; {} of the runtime left out, as it switches stacks and goroutines under its calls \
             (-f '{RUNTIME}*' traces them)",
            plural(count as u64, "function", "functions")
        ),
    };
    say_without_uretprobes(
        GO_PROGRAM,
        exits,
        &format!("; calls paired by goroutine{runtime}"),
    );
}

/// The prefix of the Go runtime's functions.
const RUNTIME: &str = "runtime.";

/// Whether function `name` of a Go program is left out by default: the runtime's, unless a `-f`
/// glob names it. The runtime moves goroutines between stacks and threads under its own calls
/// (`mcall`, `systemstack`, `gogo`, `morestack`, the scheduler that never returns, signal
/// handlers that resume elsewhere), so a call of it opened on one stack is often left on
/// another: traced, its times were the run's length (`runtime.memmove`, a leaf, up to 18 s in a
/// 29 s trace of an HTTP server) and two thirds of all the calls, which made the trace 550 times
/// slower than the program. So are the runtime's assembly functions without a package name that
/// switch stacks ([`RUNTIME_SWITCHERS`]). `runtime/internal/...`, the other assembly helpers
/// (`memeqbody`) and the standard library stay.
pub(super) fn runtime_left_out(name: &str, options: &PlanOptions) -> bool {
    let runtime = name.starts_with(RUNTIME)
        || name.starts_with("debugCall")
        || RUNTIME_SWITCHERS.contains(&name);
    runtime && !options.functions.functions.iter().any(|g| g.matches(name))
}

/// The runtime's assembly functions named without `runtime.` that jump to another goroutine's
/// stack or call Go on another stack, so that their calls never return where they were made:
/// `gogo` (2,747 calls left open in a trace of an HTTP server), the `systemstack` switch, cgo's
/// calls into Go and its threads' start (which runs the scheduler), `reflectcall`'s return.
const RUNTIME_SWITCHERS: &[&str] = &[
    "gogo",
    "gosave_systemstack_switch",
    "setg_gcc",
    "crosscall2",
    "crosscall_amd64",
    "callRet",
];
