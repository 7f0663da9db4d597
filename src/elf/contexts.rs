//! Whether a program switches stacks: user-level context switches (`swapcontext`,
//! `setcontext`) and the coroutine libraries' own (boost.context, libco) move the stack pointer
//! to another stack and return there.
//!
//! The kernel keeps a thread's pending uretprobes as one list, last in first out, and pairs each
//! return through its trampoline with the newest instance, dropping those whose stack pointer
//! lies below the current one as left by a `longjmp`. Frames of two stacks interleave in that
//! list: a uretprobe prepared on a stack higher in memory drops the instances of the frames
//! suspended on a lower one (their return addresses stay the trampoline), and a return on one
//! stack is given the return address of a frame of the other. The program then jumps into the
//! wrong code, or gets SIGILL when no instance is left. A program that switches stacks gets no
//! uretprobe (see src/plan/exits.rs).

use super::ElfFile;

/// The functions that leave the current stack for another and return on it later (or never).
const STACK_SWITCHERS: [&str; 5] = [
    "swapcontext",
    "setcontext",
    "jump_fcontext",
    "ontop_fcontext",
    "coctx_swap",
];

/// Whether the function called `symbol` (as the file spells it, `@plt`/`@lib` naming aside)
/// switches to another stack: a call of it may return on a stack other than its caller's, and
/// the next event after its entry may be on another stack.
pub fn switches_stacks(symbol: &str) -> bool {
    let name = symbol.split('@').next().unwrap_or(symbol);
    STACK_SWITCHERS.contains(&name)
}

/// Which of a file's symbols of a stack-switching function tell that the program switches stacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitcherUse {
    /// The file imports it (a program or library calling the C library's `swapcontext`).
    Imported,
    /// The file imports or defines it (the executable, linked with it statically).
    ImportedOrDefined,
}

impl ElfFile {
    /// The first function the file uses, as `using` says, that switches stacks (its name
    /// without a symbol version).
    pub fn stack_switcher(&self, using: SwitcherUse) -> Option<&str> {
        self.symbols
            .iter()
            .filter(|symbol| !symbol.defined || using == SwitcherUse::ImportedOrDefined)
            .map(|symbol| symbol.name.split('@').next().unwrap_or(&symbol.name))
            .find(|name| switches_stacks(name))
    }
}
