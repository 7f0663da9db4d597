//! Calls into shared libraries that take no PLT stub: `call *slot(%rip)` (`ff 15 disp32`, after
//! any prefix), reading the function's address from its GOT slot. Code built with `-fno-plt`
//! calls its libraries this way, and so does Rust's. No stub means no probe site in the caller's
//! file: such calls are only seen where they land, in the library (see `crate::plan`'s
//! landings), where the BPF program keeps a hit when the instruction before its return address
//! is such a call reading the slot of the function's symbol.

use std::collections::BTreeMap;

use iced_x86::{Code, Instruction, Register};

use super::ElfFile;

/// The calls through one GOT slot, filled by a relocation with a function's symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GotCall {
    /// The demangled name of the function the slot holds.
    pub target: String,
    /// The relocation's symbol as the file spells it (mangled): what the loader looks up.
    pub symbol: String,
    /// The slot's virtual address.
    pub slot: u64,
    /// How many `call *slot(%rip)` instructions the file's code has.
    pub call_sites: usize,
}

impl ElfFile {
    /// The GOT slots the file's code calls through, sorted by slot: every instruction of its
    /// code sections is read (of its functions and their `.cold` fragments where it has no
    /// section headers). The entry point's code is left out: its call of
    /// `__libc_start_main`, which never returns, hands the process to the C library, which
    /// calls `main`; it is no call of the program's.
    pub fn got_calls(&self) -> Vec<GotCall> {
        if self.got_slots.is_empty() {
            return Vec::new();
        }
        let entry_code = self.entry_code();
        let mut sites: BTreeMap<u64, usize> = BTreeMap::new();
        self.for_each_instruction(|instruction| {
            let slot = called_slot(instruction).filter(|_| !entry_code.contains(&instruction.ip()));
            if let Some(slot) = slot {
                *sites.entry(slot).or_default() += 1;
            }
        });
        sites
            .into_iter()
            .filter_map(|(slot, call_sites)| {
                let target = self.got_slots.get(&slot)?;
                Some(GotCall {
                    target: target.name.clone(),
                    symbol: target.symbol.clone()?,
                    slot,
                    call_sites,
                })
            })
            .collect()
    }
}

impl ElfFile {
    /// The addresses of the function at the entry point (`_start`), as its symbol sizes it;
    /// without one, the next [`ENTRY_CODE_SIZE`] bytes.
    fn entry_code(&self) -> std::ops::Range<u64> {
        let functions = super::symbols::defined_functions(&self.symbols);
        let sized = functions
            .iter()
            .find(|f| f.address == self.entry && f.size > 0);
        let size = sized.map_or(ENTRY_CODE_SIZE, |f| f.size);
        self.entry..self.entry.saturating_add(size)
    }
}

/// The bytes after the entry point taken as its code when no symbol sizes it: glibc's `_start`
/// makes its one call within its first 48.
const ENTRY_CODE_SIZE: u64 = 48;

/// The memory slot `instruction` calls through when it is `call *disp32(%rip)`: its last six
/// bytes are `ff 15 disp32`, which the BPF program reads before a return address.
fn called_slot(instruction: &Instruction) -> Option<u64> {
    let rip_relative = instruction.memory_base() == Register::RIP;
    (instruction.code() == Code::Call_rm64 && rip_relative)
        .then(|| instruction.ip_rel_memory_address())
}

#[cfg(test)]
mod tests {
    use iced_x86::{Decoder, DecoderOptions};

    use super::*;

    fn decoded(code: &[u8], address: u64) -> Instruction {
        Decoder::with_ip(64, code, address, DecoderOptions::NONE).decode()
    }

    #[test]
    fn calls_through_a_rip_relative_slot_name_the_slot() {
        // call *0x2fca(%rip) at 0x1000: slot 0x1006 + 0x2fca
        let call = decoded(&[0xff, 0x15, 0xca, 0x2f, 0, 0], 0x1000);
        assert_eq!(called_slot(&call), Some(0x3fd0));
        // notrack call *0x10(%rip): the prefix comes before ff 15
        let notrack = decoded(&[0x3e, 0xff, 0x15, 0x10, 0, 0, 0], 0x1000);
        assert_eq!(called_slot(&notrack), Some(0x1017));
    }

    #[test]
    fn other_indirect_branches_name_no_slot() {
        // jmp *0x10(%rip) (a tail call through the slot), call *%rax, call *(%rax),
        // mov 0x10(%rip),%rax
        let others: [&[u8]; 4] = [
            &[0xff, 0x25, 0x10, 0, 0, 0],
            &[0xff, 0xd0],
            &[0xff, 0x10],
            &[0x48, 0x8b, 0x05, 0x10, 0, 0, 0],
        ];
        for code in others {
            assert_eq!(called_slot(&decoded(code, 0x1000)), None, "{code:x?}");
        }
    }
}
