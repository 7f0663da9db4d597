//! The functions a program starts its threads on: what it gives `pthread_create` as the start
//! routine. Such a function runs for as long as its thread does, and a return probe on it stays
//! pending all that time while the thread keeps hitting other probes, which holds up every
//! uprobe release on the machine (see src/probe/release.rs): the plan probes their exits on
//! their instructions instead, as `main`'s.

use std::collections::BTreeSet;

use iced_x86::{Code, FlowControl, Instruction, OpKind, Register};

use super::ElfFile;

/// The function that starts a thread on its third argument.
const THREAD_CREATOR: &str = "pthread_create";

impl ElfFile {
    /// The addresses of the start routines the file's code hands `pthread_create`, through its
    /// PLT stub or its GOT slot: the third argument (`rdx`) set to a constant address just
    /// before the call (`lea rdx, [rip+f]`, `mov edx, f`), as compilers pass a named function.
    /// A start routine read from memory or a register is not known. Empty, without reading the
    /// code, for a file that does not call `pthread_create` itself.
    pub fn thread_start_routines(&self) -> BTreeSet<u64> {
        let mut creators: BTreeSet<u64> = (self.stubs.iter())
            .filter(|stub| stub.target == THREAD_CREATOR)
            .map(|stub| stub.address)
            .collect();
        creators.extend(
            (self.got_slots.iter())
                .filter(|(_, target)| target.name == THREAD_CREATOR)
                .map(|(&slot, _)| slot),
        );
        let mut starts = BTreeSet::new();
        if creators.is_empty() {
            return starts;
        }
        let mut third_argument = None;
        self.for_each_instruction(|instruction| {
            let call = matches!(
                instruction.flow_control(),
                FlowControl::Call | FlowControl::IndirectCall
            );
            if call {
                if let Some(start) = third_argument.filter(|_| calls(instruction, &creators)) {
                    starts.insert(start);
                }
                third_argument = None;
            } else if instruction.flow_control() != FlowControl::Next {
                // Reached from elsewhere after a jump: what rdx holds there is not known.
                third_argument = None;
            } else if writes_rdx(instruction) {
                third_argument = constant_address(instruction);
            }
        });
        starts
    }
}

/// Whether `instruction`, a call, calls one of `targets`: directly, or through its GOT slot.
fn calls(instruction: &Instruction, targets: &BTreeSet<u64>) -> bool {
    match instruction.op0_kind() {
        OpKind::NearBranch64 => targets.contains(&instruction.near_branch_target()),
        OpKind::Memory if instruction.is_ip_rel_memory_operand() => {
            targets.contains(&instruction.ip_rel_memory_address())
        }
        _ => false,
    }
}

/// Whether `instruction` sets rdx (or part of it) as its first operand.
fn writes_rdx(instruction: &Instruction) -> bool {
    instruction.op_count() > 0
        && instruction.op0_kind() == OpKind::Register
        && instruction.op0_register().full_register() == Register::RDX
        && !matches!(
            instruction.mnemonic(),
            iced_x86::Mnemonic::Cmp | iced_x86::Mnemonic::Test | iced_x86::Mnemonic::Push
        )
}

/// The address `instruction` puts in its register, where it is a constant: a `lea` of a
/// rip-relative address, a `mov` of an immediate.
fn constant_address(instruction: &Instruction) -> Option<u64> {
    match instruction.code() {
        Code::Lea_r64_m if instruction.is_ip_rel_memory_operand() => {
            Some(instruction.ip_rel_memory_address())
        }
        Code::Mov_r32_imm32 | Code::Mov_r64_imm64 | Code::Mov_rm64_imm32 => {
            instruction.try_immediate(1).ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Command;

    use super::*;

    /// Compiles test/loop.c (whose `--thread` starts `spin` with pthread_create) with `flags`.
    fn loop_program(flags: &[&str]) -> ElfFile {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("loop");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("test/loop.c");
        let status = Command::new("cc")
            .args(flags)
            .arg("-o")
            .arg(&binary)
            .arg(&source)
            .status()
            .expect("a C compiler");
        assert!(status.success());
        ElfFile::open(&binary).unwrap()
    }

    fn address_of(elf: &ElfFile, name: &str) -> u64 {
        let symbol = elf.symbols.iter().find(|symbol| symbol.name == name);
        symbol.unwrap().address
    }

    /// Through the PLT, through the GOT (`-fno-plt`), and in a program not built as PIE
    /// (`mov edx, imm`): the start routine is found, and nothing else.
    #[test]
    fn the_start_routine_given_to_pthread_create_is_found() {
        for flags in [&["-O2"][..], &["-O2", "-fno-plt"], &["-O0", "-no-pie"]] {
            let elf = loop_program(flags);
            let spin = address_of(&elf, "spin");
            assert_eq!(
                elf.thread_start_routines(),
                BTreeSet::from([spin]),
                "{flags:?}"
            );
        }
    }
}
