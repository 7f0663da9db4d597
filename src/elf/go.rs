//! Whether the Go toolchain built a file. A Go program's stack unwinder (garbage collection,
//! stack growth, `systemstack`) walks return addresses it must find in its own tables, which a
//! uretprobe's trampoline is not: planning gives such a program no return probe.

use goblin::elf::Elf;
use iced_x86::{Decoder, DecoderOptions, FlowControl, Mnemonic, Register};

use super::site::{self, ProbeSite, SiteKind};
use super::{ElfFile, FunctionSymbol};
use crate::table::FunctionKind;

/// The section where the Go linker puts the build information (`go version -m` reads it).
const GO_BUILDINFO_SECTION: &str = ".go.buildinfo";

/// The Go runtime's `main`, which every Go program has, stripped of sections or not.
const GO_RUNTIME_MAIN: &str = "runtime.main";

impl ElfFile {
    /// Whether the Go toolchain built the file: it has a `.go.buildinfo` section or defines
    /// `runtime.main`.
    pub fn is_go(&self) -> bool {
        self.go_buildinfo
            || self
                .symbols
                .iter()
                .any(|symbol| symbol.defined && symbol.name == GO_RUNTIME_MAIN)
    }
}

/// Whether `elf` has a `.go.buildinfo` section.
pub(super) fn has_buildinfo_section(elf: &Elf) -> bool {
    elf.section_headers
        .iter()
        .any(|section| elf.shdr_strtab.get_at(section.sh_name) == Some(GO_BUILDINFO_SECTION))
}

/// At most this many instructions open a Go function before its stack check's last branch.
const STACK_CHECK_INSTRUCTIONS: usize = 6;

/// `g.stackguard0`'s offset in Go's `g` (after `stack.lo` and `stack.hi`), stable since Go 1.0.
const STACKGUARD0_OFFSET: i64 = 0x10;

impl ElfFile {
    /// Moves the probe site of each Go function of `functions` past the stack-bound check that
    /// opens it. When a goroutine's stack is too small, the check calls `morestack`, which copies
    /// the stack to a bigger one and jumps back to the function's first instruction: a probe
    /// before the check's branch counts that call twice, one past it counts it once. The check
    /// neither moves the stack pointer nor leaves the function, so the return address is still
    /// where the stack pointer points.
    pub fn move_sites_past_go_stack_checks(&self, functions: &mut [FunctionSymbol]) {
        for function in functions {
            if function.kind != FunctionKind::Function {
                continue;
            }
            let start = function.offset - function.site.offset_in_function;
            let code = self.code_at(start, function.size);
            let Some(past) = past_stack_check(code) else {
                continue;
            };
            function.site = ProbeSite {
                offset_in_function: past,
                kind: SiteKind::AfterGoStackCheck,
            };
            function.offset = start + past;
            function.execution = site::execution_at(code.get(past as usize..).unwrap_or_default());
        }
    }
}

/// The offset, in a function whose machine code is `code`, of the instruction after its Go
/// stack check: a `cmp` of a register with `[r14 + 0x10]` (`g.stackguard0`, Go keeping `g` in
/// r14), then a `jbe`, after at most a few instructions that neither move the stack pointer nor
/// leave the function but to branch to `morestack` (large frames compute the bound first, and
/// huge ones check for wrap-around). `None` for a function without one (`NOSPLIT`, assembly).
pub(super) fn past_stack_check(code: &[u8]) -> Option<u64> {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut compared = false;
    for _ in 0..STACK_CHECK_INSTRUCTIONS {
        if !decoder.can_decode() {
            return None;
        }
        let instruction = decoder.decode();
        match instruction.flow_control() {
            FlowControl::Next => {}
            FlowControl::ConditionalBranch
                if compared && instruction.mnemonic() == Mnemonic::Jbe =>
            {
                return Some(instruction.next_ip());
            }
            FlowControl::ConditionalBranch => continue,
            _ => return None,
        }
        let is_cmp = instruction.mnemonic() == Mnemonic::Cmp;
        let moves_sp = instruction.stack_pointer_increment() != 0
            || (!is_cmp && instruction.op0_register() == Register::RSP);
        if moves_sp || instruction.is_invalid() {
            return None;
        }
        compared = is_cmp
            && instruction.memory_base() == Register::R14
            && instruction.memory_displacement64() as i64 == STACKGUARD0_OFFSET;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::past_stack_check;

    #[test]
    fn the_site_is_past_the_branch_to_morestack() {
        // main.fib: cmp rsp, [r14+0x10]; jbe; sub rsp, 0x18
        let small = [0x49, 0x3b, 0x66, 0x10, 0x76, 0x68, 0x48, 0x83, 0xec, 0x18];
        assert_eq!(past_stack_check(&small), Some(6));
        // main.deep: lea r12, [rsp-0xa0]; cmp r12, [r14+0x10]; jbe rel32; sub rsp, 0x120
        let large = [
            0x4c, 0x8d, 0xa4, 0x24, 0x60, 0xff, 0xff, 0xff, 0x4d, 0x3b, 0x66, 0x10, 0x0f, 0x86,
            0xe9, 0x00, 0x00, 0x00, 0x48, 0x81, 0xec, 0x20, 0x01, 0x00, 0x00,
        ];
        assert_eq!(past_stack_check(&large), Some(18));
    }

    #[test]
    fn a_function_without_a_stack_check_keeps_its_site() {
        // runtime.memmove (assembly): mov rdi, rax; mov rsi, rbx; mov rbx, rcx; test; je
        let memmove = [
            0x48, 0x89, 0xc7, 0x48, 0x89, 0xde, 0x48, 0x89, 0xcb, 0x48, 0x85, 0xdb, 0x0f, 0x84,
            0xf7, 0x00, 0x00, 0x00,
        ];
        assert_eq!(past_stack_check(&memmove), None);
        // push rbp first: the stack pointer moves before any check.
        assert_eq!(
            past_stack_check(&[0x55, 0x49, 0x3b, 0x66, 0x10, 0x76, 0x68]),
            None
        );
        // A check against another offset of r14 is not Go's.
        assert_eq!(
            past_stack_check(&[0x49, 0x3b, 0x66, 0x18, 0x76, 0x68]),
            None
        );
    }
}
