//! Where a function's exit can be seen without a uretprobe.
//!
//! A uretprobe replaces the return address on the stack with the kernel's trampoline. When a C++
//! exception unwinds through that frame, the unwinder reads the trampoline's address, finds no
//! unwind information for it and calls `std::terminate`. A probe on each instruction that leaves
//! the function changes nothing on the stack, so the unwinder sees the program as it is.
//!
//! [`exit_sites`] decodes a function and returns every instruction that leaves it: each `ret`,
//! and each direct `jmp` to the start of a function (a tail call: the caller's frame is gone
//! once it jumps, so the jump is its exit and the callee appears as its sibling). A function
//! whose exits cannot all be found this way keeps a uretprobe ([`NoExitSites`] says why): a jump
//! through a register or memory can be a tail call (unless it is a `switch`'s, through a table of
//! offsets to the function's own code), and a conditional jump out of the function is a tail
//! call only when taken.
//!
//! A function that makes no call and no tail jump keeps its uretprobe: no exception can start
//! below its frame, and a uretprobe costs far less than a probe on `ret`, which the kernel
//! single-steps (measured on 6.18 in a VM: about 1 µs per call against 20 µs).
//!
//! A PLT stub jumps into its library, which returns straight to the stub's caller: its exit is
//! the instruction after each `call` of the stub in the file ([`plt_return_sites`]).
//!
//! GCC moves unlikely code into `foo.cold` fragments that `foo` jumps into (exception handlers,
//! error paths). A fragment is part of the function's body: it may jump back into the function,
//! call anything, or never return; if it leaves the function itself (a `ret` or a jump out), its
//! exits would be the function's, and the function keeps a uretprobe instead.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind, Register};

/// Whether the function called `symbol` (as the file spells it, `@plt`/`@lib` naming aside)
/// saves its own return address to resume there later: `setjmp` and its kin, `getcontext`,
/// `swapcontext`. A uretprobe has replaced that address with the kernel's trampoline by then, so
/// the later `longjmp` or `setcontext` would land on the trampoline with no return pending: such
/// a function must have its exit probed on instructions, with the return address left alone.
pub fn saves_its_return_address(symbol: &str) -> bool {
    const SAVERS: [&str; 8] = [
        "setjmp",
        "_setjmp",
        "__setjmp",
        "sigsetjmp",
        "__sigsetjmp",
        "savectx",
        "getcontext",
        "swapcontext",
    ];
    let name = symbol.split('@').next().unwrap_or(symbol);
    SAVERS.contains(&name)
}

/// Why a function's exits cannot all be probed on its own instructions. Addresses are virtual
/// addresses in the ELF file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoExitSites {
    #[error("the bytes at {address:#x} do not decode as an x86_64 instruction")]
    Undecodable { address: u64 },

    #[error("the indirect jump at {address:#x} may be a jump table or a tail call")]
    IndirectJump { address: u64 },

    #[error("the conditional jump at {address:#x} leaves the function for {target:#x}")]
    ConditionalExit { address: u64, target: u64 },

    #[error("the jump at {address:#x} lands on {target:#x}, inside no function")]
    JumpOutside { address: u64, target: u64 },

    #[error("the fragment at {fragment:#x} leaves the function by itself at {address:#x}")]
    FragmentExit { fragment: u64, address: u64 },

    #[error("it makes no call and no tail jump, so no exception unwinds through its frame")]
    Leaf,

    #[error("the jump at {address:#x} goes to it: its return goes to a caller never seen")]
    PltTailJump { address: u64 },

    #[error("uretprobes were asked for (--exit-probes=uretprobe)")]
    UretprobesAsked,

    #[error("the instruction after its call at {address:#x} has a prefix the kernel cannot probe")]
    UnprobeableReturnSite { address: u64 },

    #[error("its calls are probed where they land, whose return probe sees their return")]
    ProbedWhereItLands,
}

/// The code of one ELF file as far as exits are concerned: where functions start, where the
/// fragments split off them lie, and their bytes.
pub struct CodeIndex<'a> {
    /// Start addresses of every function and PLT stub of the file: a jump to one is a tail call.
    starts: BTreeSet<u64>,
    /// `foo.cold` fragments: start address → size.
    fragments: BTreeMap<u64, u64>,
    /// The bytes at a virtual address, as many as asked for and the file has.
    code: Box<dyn Fn(u64, u64) -> &'a [u8] + 'a>,
}

impl<'a> CodeIndex<'a> {
    pub fn new(
        starts: BTreeSet<u64>,
        fragments: BTreeMap<u64, u64>,
        code: impl Fn(u64, u64) -> &'a [u8] + 'a,
    ) -> CodeIndex<'a> {
        CodeIndex {
            starts,
            fragments,
            code: Box::new(code),
        }
    }

    /// The fragment that contains `address`, as (start, size).
    fn fragment_at(&self, address: u64) -> Option<(u64, u64)> {
        let (&start, &size) = self.fragments.range(..=address).next_back()?;
        (address - start < size).then_some((start, size))
    }

    /// Whether a jump from the code at `from` (a function's or a fragment's start) to `target`
    /// outside it stays in the same function: between a function and a `.cold` fragment (the
    /// catch code GCC moves out jumps back into its function), to no function's start.
    fn same_function(&self, from: u64, target: u64) -> bool {
        !self.starts.contains(&target)
            && (self.fragments.contains_key(&from) || self.fragment_at(target).is_some())
    }
}

/// Where the exits of a function that calls nothing (a leaf) are seen: no exception unwinds
/// through its frame, so a uretprobe, cheaper than a probe on each `ret`, is safe there unless
/// the program switches stacks (see src/elf/contexts.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeafExits {
    Uretprobe,
    Instructions,
}

/// The addresses of the instructions that leave the function at `address` with `size` bytes:
/// its `ret`s and its tail jumps, in address order.
pub fn exit_sites(
    index: &CodeIndex,
    address: u64,
    size: u64,
    leaves: LeafExits,
) -> Result<Vec<u64>, NoExitSites> {
    let body = address..address.saturating_add(size);
    let mut exits = Vec::new();
    let mut fragments = Vec::new();
    let mut calls = false;
    let mut tail_jumps = false;
    let mut jumps = IndirectJumps::default();
    for instruction in decode((index.code)(address, size), address) {
        let instruction = instruction?;
        let at = instruction.ip();
        jumps.follow(&instruction);
        match instruction.flow_control() {
            FlowControl::Return => exits.push(at),
            FlowControl::Call | FlowControl::IndirectCall => calls = true,
            FlowControl::IndirectBranch if jumps.is_switch(index, &body) => {}
            FlowControl::IndirectBranch if jumps.is_tail_call(index) => {
                tail_jumps = true;
                exits.push(at);
            }
            FlowControl::IndirectBranch => {
                return Err(NoExitSites::IndirectJump { address: at });
            }
            FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                let target = instruction.near_branch_target();
                // A jump to its own start runs its entry probe again: a call, as a tail call
                // to another function is (SQLite's sqlite3WhereSplit ends in one).
                if body.contains(&target) && target != address {
                    continue;
                }
                if let Some(fragment) = index.fragment_at(target) {
                    fragments.push(fragment);
                } else if instruction.flow_control() == FlowControl::ConditionalBranch {
                    return Err(NoExitSites::ConditionalExit {
                        address: at,
                        target,
                    });
                } else if index.starts.contains(&target) {
                    tail_jumps = true;
                    exits.push(at);
                } else {
                    return Err(NoExitSites::JumpOutside {
                        address: at,
                        target,
                    });
                }
            }
            _ => {}
        }
    }
    fragments.sort_unstable();
    fragments.dedup();
    for &(start, size) in &fragments {
        check_fragment(index, &body, start, size)?;
    }
    // Calls made from a cold fragment count too: an exception can come from them.
    if !calls && !tail_jumps && fragments.is_empty() && leaves == LeafExits::Uretprobe {
        return Err(NoExitSites::Leaf);
    }
    Ok(exits)
}

/// How many instructions before an indirect jump are looked at: where a switch's table entry is
/// loaded (the compiler may put an unrelated one or two in between), or a tail call's frame
/// given back.
const SWITCH_SETUP: usize = 4;

/// How many of a switch table's first entries must land in the function for its jump to be
/// taken for a switch's.
const SWITCH_ENTRIES_CHECKED: u64 = 2;

/// What a function's code has shown so far of where its indirect jumps go. Two kinds are known:
///
/// - a `switch`'s jump through a table of 32-bit offsets from the table, as GCC and Clang make it
///   in position-independent code; it stays in the function:
///
///   ```text
///   lea    base, [rip + table]          (often hoisted to the function's start)
///   movsxd target, dword ptr [base + index*4]
///   add    target, base
///   jmp    target
///   ```
///
/// - a tail call through a pointer: a jump through memory with no index into a table
///   (`jmp [rax + 0x20]`, `jmp [rip + slot]`), or through a register right after the function
///   gave its frame back (`pop`, `add rsp`); it leaves the function.
///
/// Any other (a computed `goto`, a frameless function's jump through a register) may be either.
#[derive(Default)]
struct IndirectJumps {
    /// The last instructions, newest last (the jump itself once it is reached).
    recent: VecDeque<Instruction>,
    /// The address each register was last set to with a `lea` relative to rip.
    rip_addresses: Vec<(Register, u64)>,
}

impl IndirectJumps {
    /// Takes the next instruction of the function, in address order.
    fn follow(&mut self, instruction: &Instruction) {
        if self.recent.len() > SWITCH_SETUP {
            self.recent.pop_front();
        }
        self.recent.push_back(*instruction);
        if instruction.mnemonic() == Mnemonic::Lea && instruction.is_ip_rel_memory_operand() {
            let register = instruction.op0_register().full_register();
            self.rip_addresses.retain(|&(r, _)| r != register);
            self.rip_addresses
                .push((register, instruction.ip_rel_memory_address()));
        }
    }

    /// The last instruction followed (the jump), and those before it, oldest first.
    fn jump_and_before(
        &self,
    ) -> Option<(&Instruction, impl DoubleEndedIterator<Item = &Instruction>)> {
        let jump = self.recent.back()?;
        Some((jump, self.recent.range(..self.recent.len() - 1)))
    }

    /// Whether the last instruction followed, an indirect jump in the function whose code is
    /// `body`, is a switch's: it lands in the function's own code, already decoded, so it is
    /// no exit. The table's first entries, read from the file, must land there too, else the
    /// jump is taken for one that may leave.
    fn is_switch(&self, index: &CodeIndex, body: &std::ops::Range<u64>) -> bool {
        let Some((jump, before)) = self.jump_and_before() else {
            return false;
        };
        if jump.op0_kind() != OpKind::Register {
            return false;
        }
        let target = jump.op0_register().full_register();
        let mut earlier = before.rev();
        let Some(base) = earlier.find_map(|i| {
            let adds = i.mnemonic() == Mnemonic::Add
                && i.op0_kind() == OpKind::Register
                && i.op1_kind() == OpKind::Register
                && i.op0_register().full_register() == target;
            adds.then(|| i.op1_register().full_register())
        }) else {
            return false;
        };
        let loads_entry = |i: &Instruction| {
            i.mnemonic() == Mnemonic::Movsxd
                && i.op0_register().full_register() == target
                && i.op1_kind() == OpKind::Memory
                && i.memory_base().full_register() == base
                && i.memory_index_scale() == 4
        };
        if !earlier.any(loads_entry) {
            return false;
        }
        let Some(&(_, table)) = self.rip_addresses.iter().find(|&&(r, _)| r == base) else {
            return false;
        };
        (0..SWITCH_ENTRIES_CHECKED).all(|n| {
            let entry = table.wrapping_add(n * 4);
            <[u8; 4]>::try_from((index.code)(entry, 4)).is_ok_and(|offset| {
                let offset = i64::from(i32::from_le_bytes(offset));
                body.contains(&table.wrapping_add_signed(offset))
            })
        })
    }

    /// Whether the last instruction followed, an indirect jump that is no switch's, is a tail
    /// call through a pointer, which the kernel can probe as the function's exit.
    fn is_tail_call(&self, index: &CodeIndex) -> bool {
        let Some((jump, mut before)) = self.jump_and_before() else {
            return false;
        };
        if !crate::elf::site::kernel_can_probe((index.code)(jump.ip(), jump.len() as u64)) {
            return false;
        }
        match jump.op0_kind() {
            OpKind::Memory => jump.memory_index() == Register::None,
            OpKind::Register => before.any(|i| {
                i.mnemonic() == Mnemonic::Pop
                    || (i.mnemonic() == Mnemonic::Add && i.op0_register() == Register::RSP)
            }),
            _ => false,
        }
    }
}

/// The exit sites of the PLT stubs at `stubs`: for each, the instruction after every direct
/// `call` of it in `code` (the file's functions and fragments, as (address, size)). A stub that
/// is also jumped to is left to a uretprobe: its return goes to a caller never seen.
///
/// Some instructions after a call are no return site: after a call that never returns (to
/// `__cxa_throw`, `_Unwind_Resume`, `abort`), the next byte is another function, a branch target
/// or a landing pad. The first two are left out, and so are other exits of the caller, which
/// would need two events from one probe. A landing pad is not seen: when an exception lands
/// there, the probe reports an exit of the stub that never returns; the replayer then closes the
/// frames above that stub's open call, if any, early. Counts stay exact; those times do not.
pub fn plt_return_sites(
    index: &CodeIndex,
    code: &[(u64, u64)],
    stubs: &BTreeSet<u64>,
) -> BTreeMap<u64, Result<Vec<u64>, NoExitSites>> {
    let mut sites: BTreeMap<u64, Result<Vec<u64>, NoExitSites>> =
        stubs.iter().map(|&stub| (stub, Ok(Vec::new()))).collect();
    fn refuse(
        sites: &mut BTreeMap<u64, Result<Vec<u64>, NoExitSites>>,
        stub: u64,
        reason: NoExitSites,
    ) {
        if let Some(entry) = sites.get_mut(&stub) {
            *entry = Err(reason);
        }
    }
    let mut found = Vec::new();
    for &(start, size) in code {
        let end = start.saturating_add(size);
        // Instructions control reaches other than by falling through, and those that leave.
        let mut landings = BTreeSet::new();
        let mut returns: Vec<(u64, u64)> = Vec::new();
        // Instructions the kernel refuses a probe on (LOCK, segment prefixes): no return site.
        let mut unprobeable = BTreeSet::new();
        let bytes = (index.code)(start, size);
        for instruction in decode(bytes, start) {
            let Ok(instruction) = instruction else { break };
            let at = (instruction.ip() - start) as usize;
            if !crate::elf::site::kernel_can_probe(&bytes[at..]) {
                unprobeable.insert(instruction.ip());
            }
            let target = instruction.near_branch_target();
            match instruction.flow_control() {
                FlowControl::Call if stubs.contains(&target) && instruction.next_ip() < end => {
                    returns.push((target, instruction.next_ip()));
                }
                FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch
                    if stubs.contains(&target) =>
                {
                    let address = instruction.ip();
                    refuse(&mut sites, target, NoExitSites::PltTailJump { address });
                }
                FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                    landings.insert(target);
                    if !(start..end).contains(&target) && !index.same_function(start, target) {
                        landings.insert(instruction.ip());
                    }
                }
                FlowControl::Return | FlowControl::IndirectBranch => {
                    landings.insert(instruction.ip());
                }
                _ => {}
            }
        }
        for (stub, site) in returns {
            if unprobeable.contains(&site) {
                refuse(
                    &mut sites,
                    stub,
                    NoExitSites::UnprobeableReturnSite { address: site },
                );
            }
            found.push((stub, site, landings.contains(&site)));
        }
    }
    for (stub, site, shared) in found {
        if let (Some(Ok(list)), false) = (sites.get_mut(&stub), shared) {
            list.push(site);
        }
    }
    sites
}

/// A fragment may go back into the function's body, stay in itself, or call: anything that
/// leaves both would be an exit of the function found only here.
fn check_fragment(
    index: &CodeIndex,
    body: &std::ops::Range<u64>,
    start: u64,
    size: u64,
) -> Result<(), NoExitSites> {
    let fragment = start..start.saturating_add(size);
    for instruction in decode((index.code)(start, size), start) {
        let instruction = instruction?;
        let leaves = match instruction.flow_control() {
            FlowControl::Return | FlowControl::IndirectBranch => true,
            FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                let target = instruction.near_branch_target();
                !body.contains(&target) && !fragment.contains(&target)
            }
            _ => false,
        };
        if leaves {
            return Err(NoExitSites::FragmentExit {
                fragment: start,
                address: instruction.ip(),
            });
        }
    }
    Ok(())
}

/// The instructions of `code`, which starts at `address`; an undecodable one ends the walk with
/// an error.
fn decode(
    code: &[u8],
    address: u64,
) -> impl Iterator<Item = Result<Instruction, NoExitSites>> + '_ {
    let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || !decoder.can_decode() {
            return None;
        }
        let instruction = decoder.decode();
        if instruction.is_invalid() {
            failed = true;
            return Some(Err(NoExitSites::Undecodable {
                address: instruction.ip(),
            }));
        }
        Some(Ok(instruction))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: u64 = 0x1000;

    #[test]
    fn setjmp_and_its_kin_save_their_return_address() {
        for name in [
            "_setjmp",
            "__sigsetjmp@plt",
            "setjmp@libc.so.6",
            "getcontext",
        ] {
            assert!(saves_its_return_address(name), "{name}");
        }
        for name in ["longjmp", "siglongjmp@plt", "setjmp_helper", "vfork"] {
            assert!(!saves_its_return_address(name), "{name}");
        }
    }

    /// An index over `code` placed at `BASE`, with the given function starts and fragments.
    fn index<'a>(code: &'a [u8], starts: &[u64], fragments: &[(u64, u64)]) -> CodeIndex<'a> {
        CodeIndex::new(
            starts.iter().copied().collect(),
            fragments.iter().copied().collect(),
            move |address, size| {
                let start = (address - BASE) as usize;
                let end = (start + size as usize).min(code.len());
                &code[start..end]
            },
        )
    }

    #[test]
    fn every_ret_is_an_exit() {
        // 0: call 5; 5: test %edi,%edi; 7: je 10; 9: ret; 10: xor %eax,%eax; 12: ret
        let code = [
            0xe8, 0, 0, 0, 0, 0x85, 0xff, 0x74, 0x01, 0xc3, 0x31, 0xc0, 0xc3,
        ];
        let index = index(&code, &[BASE], &[]);
        assert_eq!(
            exit_sites(&index, BASE, 13, LeafExits::Uretprobe),
            Ok(vec![BASE + 9, BASE + 12])
        );
        // Without the call, no exception can unwind through it: a uretprobe is cheaper.
        let index = super::tests::index(&code[5..], &[BASE], &[]);
        assert_eq!(
            exit_sites(&index, BASE, 8, LeafExits::Uretprobe),
            Err(NoExitSites::Leaf)
        );
        let on_instructions = exit_sites(&index, BASE, 8, LeafExits::Instructions);
        assert_eq!(on_instructions, Ok(vec![BASE + 4, BASE + 7]));
    }

    #[test]
    fn a_stub_returning_onto_a_locked_instruction_keeps_its_uretprobe() {
        // 0: call 16 (stub A); 5: mov %eax,%ebx; 7: call 24 (stub B); 12: lock incl (%rax);
        // 15: ret; 16: stub A; 24: stub B
        let mut code = vec![
            0xe8, 0x0b, 0, 0, 0, 0x89, 0xc3, 0xe8, 0x0c, 0, 0, 0, 0xf0, 0xff, 0x00, 0xc3,
        ];
        code.resize(32, 0x90);
        let index = index(&code, &[BASE, BASE + 16, BASE + 24], &[]);
        let stubs = BTreeSet::from([BASE + 16, BASE + 24]);
        let sites = plt_return_sites(&index, &[(BASE, 16)], &stubs);
        assert_eq!(sites[&(BASE + 16)], Ok(vec![BASE + 5]));
        // The kernel refuses a probe on a LOCK-prefixed instruction: attaching would fail.
        assert_eq!(
            sites[&(BASE + 24)],
            Err(NoExitSites::UnprobeableReturnSite { address: BASE + 12 })
        );
    }

    #[test]
    fn a_stub_called_in_a_cold_fragment_returns_where_it_jumps_back() {
        // f at 0: call 16 (stub); 5: nop; 6: ret; 7: nop;
        // f.cold at 8: call 16 (stub); 13: jmp 6 (back into f); stub at 16
        let mut code = vec![
            0xe8, 0x0b, 0, 0, 0, 0x90, 0xc3, 0x90, 0xe8, 0x03, 0, 0, 0, 0xeb, 0xf7,
        ];
        code.resize(24, 0x90);
        let index = index(&code, &[BASE, BASE + 16], &[(BASE + 8, 7)]);
        let stubs = BTreeSet::from([BASE + 16]);
        let sites = plt_return_sites(&index, &[(BASE, 8), (BASE + 8, 7)], &stubs);
        // The `jmp` back is no exit of f: the catch code GCC moved out returns from
        // __cxa_end_catch@plt onto it.
        assert_eq!(sites[&(BASE + 16)], Ok(vec![BASE + 5, BASE + 13]));
    }

    #[test]
    fn a_jump_to_its_own_start_is_a_self_tail_call() {
        // f at 0: call 0 (itself); 5: jmp 0 (its own start: the entry probe runs again)
        let code = [0xe8, 0xfb, 0xff, 0xff, 0xff, 0xeb, 0xf9];
        let index = index(&code, &[BASE], &[]);
        assert_eq!(
            exit_sites(&index, BASE, 7, LeafExits::Uretprobe),
            Ok(vec![BASE + 5])
        );
    }

    #[test]
    fn a_jump_to_a_function_start_is_a_tail_call() {
        // f at 0: jmp 8 (g); 5: nop x3; g at 8: ret
        let code = [0xeb, 0x06, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0xc3];
        let index = index(&code, &[BASE, BASE + 8], &[]);
        assert_eq!(
            exit_sites(&index, BASE, 8, LeafExits::Uretprobe),
            Ok(vec![BASE])
        );
        // Without a function there, the jump goes nowhere known.
        let index = super::tests::index(&code, &[BASE], &[]);
        assert_eq!(
            exit_sites(&index, BASE, 8, LeafExits::Uretprobe),
            Err(NoExitSites::JumpOutside {
                address: BASE,
                target: BASE + 8
            })
        );
    }

    /// A switch's jump through a table of offsets, at 14, whose table (at 20) is
    /// `first_entry`, then the offset of 17.
    fn switch(first_entry: i32) -> Vec<u8> {
        let mut code = vec![
            0x48, 0x8d, 0x0d, 0x0d, 0, 0, 0, // 0: lea 0xd(%rip),%rcx (the table at 20)
            0x48, 0x63, 0x04, 0x81, // 7: movslq (%rcx,%rax,4),%rax
            0x48, 0x01, 0xc8, // 11: add %rcx,%rax
            0xff, 0xe0, // 14: jmp *%rax
            0xc3, // 16: ret (case 0)
            0x31, 0xc0, 0xc3, // 17: xor %eax,%eax; 19: ret (case 1)
        ];
        code.extend(first_entry.to_le_bytes());
        code.extend((-3i32).to_le_bytes());
        code
    }

    #[test]
    fn a_switchs_jump_through_its_table_stays_in_the_function() {
        let code = switch(-4);
        let index = index(&code, &[BASE], &[]);
        assert_eq!(
            exit_sites(&index, BASE, 20, LeafExits::Instructions),
            Ok(vec![BASE + 16, BASE + 19])
        );
        // A table whose entry lands outside is no switch's as far as is known.
        let code = switch(100);
        let index = super::tests::index(&code, &[BASE], &[]);
        assert_eq!(
            exit_sites(&index, BASE, 20, LeafExits::Instructions),
            Err(NoExitSites::IndirectJump { address: BASE + 14 })
        );
    }

    #[test]
    fn a_switch_table_loaded_at_the_start_is_found() {
        // 0: lea 0x11(%rip),%rcx (the table at 24); 7: push %rbx; 8: nop x 3;
        // 11: movslq (%rcx,%rax,4),%rax; 15: add %rcx,%rax; 18: jmp *%rax;
        // 20: pop %rbx; 21: ret (case 0); 22: pop %rbx; 23: ret (case 1)
        let mut code = vec![
            0x48, 0x8d, 0x0d, 0x11, 0, 0, 0, 0x53, 0x90, 0x90, 0x90, 0x48, 0x63, 0x04, 0x81, 0x48,
            0x01, 0xc8, 0xff, 0xe0, 0x5b, 0xc3, 0x5b, 0xc3,
        ];
        code.extend((-4i32).to_le_bytes());
        code.extend((-2i32).to_le_bytes());
        let index = index(&code, &[BASE], &[]);
        assert_eq!(
            exit_sites(&index, BASE, 24, LeafExits::Instructions),
            Ok(vec![BASE + 21, BASE + 23])
        );
    }

    #[test]
    fn a_jump_through_a_pointer_is_a_tail_call() {
        // 0: call 5; 5: jmp *0x20(%rax)
        let code = [0xe8, 0, 0, 0, 0, 0xff, 0x60, 0x20];
        let index = index(&code, &[BASE], &[]);
        assert_eq!(
            exit_sites(&index, BASE, 8, LeafExits::Uretprobe),
            Ok(vec![BASE + 5])
        );
        // 0: push %rbx; 1: call 6; 6: pop %rbx; 7: jmp *%rax: the frame given back first.
        let code = [0x53, 0xe8, 0, 0, 0, 0, 0x5b, 0xff, 0xe0];
        let index = super::tests::index(&code, &[BASE], &[]);
        assert_eq!(
            exit_sites(&index, BASE, 9, LeafExits::Uretprobe),
            Ok(vec![BASE + 7])
        );
        // Through a table of pointers (an index): a computed goto or a switch, not known.
        // 0: call 5; 5: jmp *(%rdx,%rax,8)
        let code = [0xe8, 0, 0, 0, 0, 0xff, 0x24, 0xc2];
        let index = super::tests::index(&code, &[BASE], &[]);
        assert_eq!(
            exit_sites(&index, BASE, 8, LeafExits::Uretprobe),
            Err(NoExitSites::IndirectJump { address: BASE + 5 })
        );
    }

    #[test]
    fn indirect_and_conditional_exits_keep_a_uretprobe() {
        // jmp *%rax
        let code = [0xff, 0xe0];
        let index = index(&code, &[BASE], &[]);
        assert_eq!(
            exit_sites(&index, BASE, 2, LeafExits::Uretprobe),
            Err(NoExitSites::IndirectJump { address: BASE })
        );
        // 0: jne 4 (g); 2: ret; 3: nop; g at 4: ret
        let code = [0x75, 0x02, 0xc3, 0x90, 0xc3];
        let index = super::tests::index(&code, &[BASE, BASE + 4], &[]);
        assert_eq!(
            exit_sites(&index, BASE, 4, LeafExits::Uretprobe),
            Err(NoExitSites::ConditionalExit {
                address: BASE,
                target: BASE + 4
            })
        );
    }

    #[test]
    fn cold_fragments_belong_to_their_function() {
        // f at 0: je 6 (cold); 2: xor %eax,%eax; 4: ret; 5: nop;
        // cold at 6: mov $1,%eax (5 bytes); 11: jmp 4 (back into f)
        let code = [
            0x74, 0x04, 0x31, 0xc0, 0xc3, 0x90, 0xb8, 0x01, 0, 0, 0, 0xeb, 0xf7,
        ];
        let index = index(&code, &[BASE], &[(BASE + 6, 7)]);
        assert_eq!(
            exit_sites(&index, BASE, 6, LeafExits::Uretprobe),
            Ok(vec![BASE + 4])
        );
        // The same fragment ending in its own ret: that ret would be f's exit.
        let mut code = code;
        code[11] = 0xc3;
        let index = super::tests::index(&code, &[BASE], &[(BASE + 6, 6)]);
        assert_eq!(
            exit_sites(&index, BASE, 6, LeafExits::Uretprobe),
            Err(NoExitSites::FragmentExit {
                fragment: BASE + 6,
                address: BASE + 11
            })
        );
    }

    #[test]
    fn undecodable_code_keeps_a_uretprobe() {
        // A lone REX prefix at the end.
        let code = [0x90, 0x48];
        let index = index(&code, &[BASE], &[]);
        assert_eq!(
            exit_sites(&index, BASE, 2, LeafExits::Uretprobe),
            Err(NoExitSites::Undecodable { address: BASE + 1 })
        );
    }
}
