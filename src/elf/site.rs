//! Where in a function its probes go.
//!
//! The entry uprobe and, through it, the return probe of a function normally sit on its first
//! instruction. The x86 kernel refuses to place a uprobe on an instruction with a LOCK prefix
//! (`0xf0`) or a CS/DS/ES/SS segment-override prefix (`0x2e`, `0x3e`, `0x26`, `0x36`), and with
//! `uprobe_multi` the refusal is silent: the function is never traced. A function compiled to
//! start with an atomic update (`lock addq $1, counter(%rip)`) is the common case.
//!
//! [`choose`] walks a function's first instructions and returns the first site that counts
//! exactly what the entry would count. A probe at a later instruction is equivalent to one at the
//! entry when every instruction it skips
//!
//! - falls through to the next one (no branch, call, return, jump, interrupt of any kind),
//! - leaves the stack pointer and the stack slots above it alone (the return probe finds the
//!   return address at `[rsp]` when it fires), and
//! - is not the target of a branch of the function: control must reach the site only through
//!   the entry. A branch to the entry itself is fine: it would fire an entry probe just the same.
//!
//! Only direct (near) branches of the function itself are seen; indirect jumps through tables and
//! jumps from other functions into the first few bytes of this one are not, as compilers do not
//! emit them.
//!
//! [`SiteKind`] says why the site is where it is; other reasons to move a site (performance,
//! such as skipping `endbr64`) are new kinds and new steps of the walk.

use crate::table::Execution;
use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess,
    OpKind, Register,
};

/// How many leading instructions the walk skips at most before it gives up.
pub const MAX_SKIPPED: usize = 8;

/// How many leading instructions the walk to an emulated site skips at most: more than
/// [`MAX_SKIPPED`], as straight-line code is often longer than a few prefixes (libpython's
/// PyObject_GC_Del computes with 11 instructions before its `je`), and the walk is cheap.
pub const MAX_STRAIGHT_LINE: usize = 16;

/// Why a probe site is where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SiteKind {
    /// The function's first instruction.
    Entry,
    /// Past leading instructions the kernel cannot probe (LOCK or segment-override prefix), which
    /// are skipped because they cannot change what the probes count.
    AfterUnprobeablePrefix,
    /// Past a leading `endbr64`, which the kernel single-steps (tens of µs in a VM), onto the
    /// next instruction, which it often emulates (a `push`: under a µs).
    AfterEndbr64,
    /// Past leading straight-line instructions (`test %rsi,%rsi`, `mov %rdi,%rsi`, loads such
    /// as `mov 0x8(%rdi),%rdx` and `cmpl $0,0x10(%rip)`, and an `endbr64` before them) onto the
    /// first instruction the kernel emulates (a `je`): the skipped ones do not branch, write no
    /// memory, neither read nor change the stack or its pointer, and fault, if at all, only on
    /// the address they read, before the call is counted (see `straight_line_step`). Bit
    /// `n - 1` of `changed_arguments` is set when one writes the register of argument `n` (1 to
    /// 6), which the site then does not see as the entry did.
    AfterStraightLine { changed_arguments: u8 },
    /// Past the stack-bound check that opens a Go function (`cmp rsp, g.stackguard0; jbe
    /// morestack`): when the stack must grow, `morestack` jumps back to the entry, which a probe
    /// there would count twice (see `src/elf/go.rs`).
    AfterGoStackCheck,
}

/// Why a function's probe site is an instruction the kernel single-steps (≈5 µs a hit) rather
/// than one it emulates (≈1 µs): what stopped the walk from the entry to an emulated instruction
/// (see `straight_line_step`). Sorted as `record -d` lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SingleStepCause {
    /// An instruction moves or writes the stack pointer (`sub $0x18,%rsp`, `push $0`, `pop`).
    ChangesStackPointer,
    /// An instruction writes memory (a store, `lock add`, `xchg` with memory).
    WritesMemory,
    /// An indirect jump or call (`jmp *0x30(%rax)`, a tail call through a table).
    IndirectBranch,
    /// A `ret`: the function returns before any emulated instruction.
    Returns,
    /// Another instruction that may not be skipped: a read of the stack, a string instruction,
    /// a division, a CS/DS/ES/SS segment override, a trap, undecodable bytes.
    OtherInstruction,
    /// No emulated instruction within [`MAX_STRAIGHT_LINE`] instructions, or before the function
    /// ends.
    NoEmulatedInstruction,
    /// A branch of the function, or of its `.cold` fragments, lands among the instructions
    /// before the emulated one or on it: control could reach it without passing the entry.
    BranchIntoSkipped,
    /// `--probe-at-entry` keeps the probe on the first instruction.
    KeptAtEntry,
}

impl std::fmt::Display for SingleStepCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SingleStepCause::ChangesStackPointer => "start by changing rsp",
            SingleStepCause::WritesMemory => "start by writing memory",
            SingleStepCause::IndirectBranch => "start with an indirect jump or call",
            SingleStepCause::Returns => "return before an emulated instruction",
            SingleStepCause::OtherInstruction => {
                "start with another instruction no probe may skip (a stack read, division, \
                 string instruction, trap, segment override)"
            }
            SingleStepCause::NoEmulatedInstruction => {
                "have no emulated instruction within reach of the walk"
            }
            SingleStepCause::BranchIntoSkipped => "are branched into before their emulated one",
            SingleStepCause::KeptAtEntry => "are kept at the entry by --probe-at-entry",
        })
    }
}

/// Which sites [`choose`] may pick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SitePolicy {
    /// The cheapest site that counts the same as the entry.
    #[default]
    Best,
    /// The entry, unless the kernel cannot probe it at all (`--probe-at-entry`, to compare).
    Entry,
}

/// `endbr64`: the landing pad that CET builds put at every function entry.
const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// Where a function's entry probe (and with it the return probe) goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeSite {
    /// Bytes from the function's first instruction to the probed instruction.
    pub offset_in_function: u64,
    pub kind: SiteKind,
}

impl ProbeSite {
    /// The function's first instruction.
    pub const ENTRY: ProbeSite = ProbeSite {
        offset_in_function: 0,
        kind: SiteKind::Entry,
    };
}

/// Why a function has no probe site: its first instruction cannot be probed, and no later one is
/// provably equivalent. Offsets are from the function's first instruction.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoSite {
    #[error("the bytes at +{offset:#x} do not decode as an x86_64 instruction")]
    Undecodable { offset: u64 },

    #[error("the unprobeable instruction at +{offset:#x} {why}, so no probe may skip it")]
    Unskippable { offset: u64, why: &'static str },

    #[error(
        "a branch at +{from:#x} lands on +{to:#x}, among the instructions a later probe would \
         skip"
    )]
    BranchInto { from: u64, to: u64 },

    #[error("every instruction up to the end of the function is unprobeable")]
    EndOfFunction,

    #[error("its first {MAX_SKIPPED} instructions are all unprobeable")]
    TooManyUnprobeable,
}

/// A function's probe site, and what it costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChosenSite {
    pub site: ProbeSite,
    /// Why the kernel single-steps the instruction at the site; `None` when it emulates it.
    pub single_stepped: Option<SingleStepCause>,
}

impl ChosenSite {
    /// How the kernel runs the instruction under the probe.
    pub fn execution(&self) -> Execution {
        match self.single_stepped {
            None => Execution::Emulated,
            Some(_) => Execution::SingleStepped,
        }
    }
}

/// The probe site of the function whose machine code is `code` (its bytes from its first
/// instruction to its end, as long as the file has them).
///
/// Decoding starts at the first instruction; the whole function is decoded only when the site
/// moves, to find the branches that would forbid a later site.
pub fn choose(code: &[u8], policy: SitePolicy) -> Result<ProbeSite, NoSite> {
    choose_beside(code, policy, &[]).map(|chosen| chosen.site)
}

/// [`choose`], for a function into which code elsewhere in the file (its `.cold` fragments,
/// another function) branches to `outside_targets` (offsets in the function), which no moved
/// site may skip; and why the site is single-stepped, if it is.
pub fn choose_beside(
    code: &[u8],
    policy: SitePolicy,
    outside_targets: &[u64],
) -> Result<ChosenSite, NoSite> {
    if kernel_emulates(code) {
        return Ok(ChosenSite {
            site: ProbeSite::ENTRY,
            single_stepped: None,
        });
    }
    // A site the kernel emulates, past straight-line instructions, is worth more than any
    // other: an emulated trap instead of a single-step.
    let cause = match policy {
        SitePolicy::Entry => SingleStepCause::KeptAtEntry,
        SitePolicy::Best => match straight_line_site(code) {
            Ok((offset_in_function, _))
                if outside_targets
                    .iter()
                    .any(|target| (1..=offset_in_function).contains(target)) =>
            {
                SingleStepCause::BranchIntoSkipped
            }
            Ok((offset_in_function, changed_arguments)) => {
                let kind = match offset_in_function == 4 && code.starts_with(&ENDBR64) {
                    true => SiteKind::AfterEndbr64,
                    false => SiteKind::AfterStraightLine { changed_arguments },
                };
                let site = ProbeSite {
                    offset_in_function,
                    kind,
                };
                return Ok(ChosenSite {
                    site,
                    single_stepped: None,
                });
            }
            Err(cause) => cause,
        },
    };
    let site = first_probeable_site(code, policy)?;
    let at_site = usize::try_from(site.offset_in_function)
        .ok()
        .and_then(|offset| code.get(offset..))
        .unwrap_or_default();
    Ok(ChosenSite {
        site,
        // Past an unprobeable first instruction or endbr64 the site may still be emulated.
        single_stepped: (!kernel_emulates(at_site)).then_some(cause),
    })
}

/// The site of a function with no emulated site past straight-line instructions: the entry, or
/// past an `endbr64` or instructions the kernel cannot probe.
fn first_probeable_site(code: &[u8], policy: SitePolicy) -> Result<ProbeSite, NoSite> {
    // endbr64 changes neither the stack nor control flow, and indirect calls land on the entry
    // (that is what it is for), so they pass a later site too: the walk below may skip it under
    // the same rules as an unprobeable instruction. Where it cannot, the entry is still fine.
    let skip_endbr64 = policy == SitePolicy::Best && code.starts_with(&ENDBR64);
    if kernel_can_probe(code) && !skip_endbr64 {
        return Ok(ProbeSite::ENTRY);
    }
    match walk_to_site(code) {
        Ok(offset_in_function) => Ok(ProbeSite {
            offset_in_function,
            kind: if skip_endbr64 {
                SiteKind::AfterEndbr64
            } else {
                SiteKind::AfterUnprobeablePrefix
            },
        }),
        Err(_) if skip_endbr64 => Ok(ProbeSite::ENTRY),
        Err(no_site) => Err(no_site),
    }
}

/// Skips the leading instructions while that is provably the same as entering (see
/// [`unskippable`]), to the first one the kernel can probe; its offset.
fn walk_to_site(code: &[u8]) -> Result<u64, NoSite> {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut factory = InstructionInfoFactory::new();
    let mut instruction = Instruction::default();
    for _ in 0..MAX_SKIPPED {
        // The instruction at `offset` cannot be probed: skip it if that is safe.
        let offset = decoder.ip();
        if !decoder.can_decode() {
            return Err(NoSite::EndOfFunction);
        }
        decoder.decode_out(&mut instruction);
        if instruction.is_invalid() {
            return Err(NoSite::Undecodable { offset });
        }
        if let Some(why) = unskippable(&instruction, &mut factory) {
            return Err(NoSite::Unskippable { offset, why });
        }

        let site = decoder.ip();
        let rest = usize::try_from(site)
            .ok()
            .and_then(|site| code.get(site..))
            .unwrap_or_default();
        if rest.is_empty() {
            return Err(NoSite::EndOfFunction);
        }
        if kernel_can_probe(rest) {
            // Any branch into (entry, site] reaches the site without passing the entry; later
            // sites would only widen that range, so there is no point walking on.
            if let Some((from, to)) = branch_into(code, 1..=site) {
                return Err(NoSite::BranchInto { from, to });
            }
            // The site itself must decode, or the kernel refuses it as well.
            let mut at_site = Decoder::with_ip(64, rest, site, DecoderOptions::NONE);
            if at_site.decode().is_invalid() {
                return Err(NoSite::Undecodable { offset: site });
            }
            return Ok(site);
        }
    }
    Err(NoSite::TooManyUnprobeable)
}

/// Whether the kernel accepts a uprobe on the instruction that starts `code`, as far as its
/// prefixes go: none of its legacy prefixes may be LOCK or a CS/DS/ES/SS segment override
/// (`is_prefix_bad` in `arch/x86/kernel/uprobes.c`). FS and GS overrides (`0x64`, `0x65`),
/// operand and address size (`0x66`, `0x67`) and REP (`0xf2`, `0xf3`) are fine. Nor may it be a
/// trap (`int3`, `int n`, `into`, `int1`, which `good_insns_64` leaves out): Go's
/// `runtime.abort` starts with `int $3`. Nor may it be VEX, EVEX or XOP encoded (AVX: glibc's
/// `__memset_avx2_unaligned` starts with `vmovd`): the kernel checks such an instruction's opcode
/// byte against its table of one-byte opcodes, where most are refused (`vmovd`'s `6e` is `outs`
/// there). A command utrace starts maps its files after the probes are attached, so the kernel
/// skips such a probe without a word; elsewhere one refused offset fails a whole `uprobe_multi`
/// link.
pub fn kernel_can_probe(code: &[u8]) -> bool {
    let prefixes = code
        .iter()
        .take_while(|&&byte| is_legacy_prefix(byte))
        .count();
    let legacy_ok = code[..prefixes]
        .iter()
        .all(|&byte| !matches!(byte, 0xf0 | 0x2e | 0x3e | 0x26 | 0x36));
    let refused_opcode = match code.get(prefixes..) {
        Some([0xcc | 0xcd | 0xce | 0xf1, ..]) => true,
        Some([0xc4 | 0xc5 | 0x62, ..]) => true,
        // `8f /0` is `pop r/m`; with another ModRM reg field, an XOP prefix.
        Some([0x8f, modrm, ..]) => modrm & 0x38 != 0,
        _ => false,
    };
    legacy_ok && !refused_opcode
}

/// How the kernel runs the instruction that starts `code` under a uprobe: emulated when
/// [`kernel_emulates`] says so, single-stepped out of line otherwise.
pub fn execution_at(code: &[u8]) -> Execution {
    if kernel_emulates(code) {
        Execution::Emulated
    } else {
        Execution::SingleStepped
    }
}

/// The first instruction of the function whose machine code is `code` that the kernel emulates
/// (see [`kernel_emulates`]), when control reaches it from the entry only through instructions a
/// probe may skip under the rules of the walk past unprobeable instructions (`unskippable`,
/// which lets stores off the stack through, where `straight_line_step` does not); its offset in
/// the function. `None` when there is none within [`MAX_SKIPPED`] instructions.
pub fn emulated_site(code: &[u8]) -> Option<u64> {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut factory = InstructionInfoFactory::new();
    let mut instruction = Instruction::default();
    for _ in 0..=MAX_SKIPPED {
        let offset = decoder.ip();
        let rest = code.get(usize::try_from(offset).ok()?..)?;
        if kernel_emulates(rest) {
            return (offset == 0 || branch_into(code, 1..=offset).is_none()).then_some(offset);
        }
        if !decoder.can_decode() {
            return None;
        }
        decoder.decode_out(&mut instruction);
        if instruction.is_invalid() || unskippable(&instruction, &mut factory).is_some() {
            return None;
        }
    }
    None
}

/// The first instruction of the function whose machine code is `code` that the kernel
/// emulates, past leading straight-line instructions that read no more than memory (see
/// [`SiteKind::AfterStraightLine`] and [`straight_line_step`]) with no branch of the function
/// into them: its offset, and which argument registers the skipped instructions write. When
/// there is none within [`MAX_STRAIGHT_LINE`] instructions, why: what makes the entry
/// single-stepped.
/// Only called when the entry itself is not emulated.
fn straight_line_site(code: &[u8]) -> Result<(u64, u8), SingleStepCause> {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut factory = InstructionInfoFactory::new();
    let mut instruction = Instruction::default();
    let mut changed_arguments = 0;
    for _ in 0..MAX_STRAIGHT_LINE {
        if !decoder.can_decode() {
            return Err(SingleStepCause::NoEmulatedInstruction);
        }
        decoder.decode_out(&mut instruction);
        if instruction.is_invalid() {
            return Err(SingleStepCause::OtherInstruction);
        }
        changed_arguments |= straight_line_step(&instruction, &mut factory)?;
        let site = decoder.ip();
        let rest = usize::try_from(site)
            .ok()
            .and_then(|site| code.get(site..))
            .unwrap_or_default();
        if kernel_emulates(rest) {
            return match branch_into(code, 1..=site) {
                None => Ok((site, changed_arguments)),
                Some(_) => Err(SingleStepCause::BranchIntoSkipped),
            };
        }
    }
    Err(SingleStepCause::NoEmulatedInstruction)
}

/// The registers that pass arguments 1 to 6 (System V).
const ARGUMENT_REGISTERS: [Register; 6] = [
    Register::RDI,
    Register::RSI,
    Register::RDX,
    Register::RCX,
    Register::R8,
    Register::R9,
];

/// Whether a probe after `instruction` counts what a probe before it would, and leaves the
/// program as it was: if so, the argument registers it writes (bit `n - 1` for argument `n`),
/// else why not. It must
///
/// - fall through to the next instruction (no branch, call, return, trap),
/// - write no memory: a store may hit the return address the return probe is to find at
///   `[rsp]`, or anything else the program then reads differently than it would have (`lock`
///   and `xchg` with memory write it too),
/// - neither move nor write the stack pointer, nor read the stack: an entry probe's return probe
///   swaps the return address at `[rsp]` for its trampoline, and a skipped read of it (setjmp's
///   saved PC, a hand-written return through a register) would then see the real one and return
///   past the return probe,
/// - not be a string instruction (`rep movs`, `lods`, `cmps`: they loop and may write),
/// - use no CS/DS/ES/SS segment override. FS and GS overrides are fine: they read the thread's
///   own TLS (`mov %fs:0x28,%rax`, the stack protector's canary), which the probes neither
///   use nor change, and the kernel checks the prefixes of the probed instruction only, which
///   is the emulated one after,
/// - not fault but by the address it reads: no division (a zero divisor), privileged
///   instruction, cpuid or rdtsc (which the process may ask to trap: ARCH_SET_CPUID,
///   PR_SET_TSC).
///
/// A load may fault on its address, a bad pointer. Before the site it faults exactly as it would
/// untraced, and the call has not been counted yet: no entry event, no return probe set up, so
/// nothing is left unpaired whether the program dies, or a SIGSEGV handler `siglongjmp`s out of
/// the call (the call is then not counted at all, where an entry probe would have counted a call
/// that never returned) or retries the load (which then reaches the site once).
fn straight_line_step(
    instruction: &Instruction,
    factory: &mut InstructionInfoFactory,
) -> Result<u8, SingleStepCause> {
    match instruction.flow_control() {
        FlowControl::Next => {}
        FlowControl::Return => return Err(SingleStepCause::Returns),
        FlowControl::IndirectBranch | FlowControl::IndirectCall => {
            return Err(SingleStepCause::IndirectBranch)
        }
        _ => return Err(SingleStepCause::OtherInstruction),
    }
    let info = factory.info(instruction);
    let is_rsp = |register: Register| register.full_register() == Register::RSP;
    let writes_rsp =
        (info.used_registers().iter()).any(|used| is_rsp(used.register()) && writes(used.access()));
    if instruction.stack_pointer_increment() != 0 || writes_rsp {
        return Err(SingleStepCause::ChangesStackPointer);
    }
    let memory = info.used_memory();
    if instruction.has_lock_prefix() || memory.iter().any(|used| writes(used.access())) {
        return Err(SingleStepCause::WritesMemory);
    }
    let reads_stack = (memory.iter()).any(|used| is_rsp(used.base()) || is_rsp(used.index()));
    // A division faults on a zero divisor, a privileged instruction always in user mode, cpuid
    // and rdtsc where the process asked them to (ARCH_SET_CPUID, PR_SET_TSC).
    let may_fault = matches!(
        instruction.mnemonic(),
        Mnemonic::Div | Mnemonic::Idiv | Mnemonic::Cpuid | Mnemonic::Rdtsc | Mnemonic::Rdtscp
    ) || instruction.is_privileged();
    let odd_segment = !matches!(
        instruction.segment_prefix(),
        Register::None | Register::FS | Register::GS
    );
    if reads_stack || may_fault || odd_segment || instruction.is_string_instruction() {
        return Err(SingleStepCause::OtherInstruction);
    }
    let written = (info.used_registers().iter()).filter(|used| writes(used.access()));
    let mut changed_arguments = 0;
    for register in written.map(|used| used.register().full_register()) {
        if let Some(index) = ARGUMENT_REGISTERS.iter().position(|&r| r == register) {
            changed_arguments |= 1 << index;
        }
    }
    Ok(changed_arguments)
}

/// Whether the kernel runs the instruction that starts `code` without single-stepping it (its
/// uprobe then costs well under a µs instead of tens in a VM): a `push` of a register, a `nop`,
/// a relative `call`, `jmp` or conditional jump, without prefixes other than REX.B on a push
/// and one operand-size prefix on a nop (`push_setup_xol_ops`, `branch_setup_xol_ops` and the
/// nop emulation in `arch/x86/kernel/uprobes.c`). Measured on 6.18 by
/// tools/emulation_table.sh (the table in the README): `66 90` and `66 0f 1f 44 00 00` are
/// emulated, `66 66 0f 1f 84 …` (GCC's padding) is single-stepped.
pub fn kernel_emulates(code: &[u8]) -> bool {
    matches!(
        code,
        // push %reg, push %r8..%r15
        [0x41, 0x50..=0x57, ..] | [0x50..=0x57, ..]
        // nop, nopl/nopw, xchg %ax,%ax (66 90)
        | [0x90, ..] | [0x0f, 0x1f, ..] | [0x66, 0x90, ..] | [0x66, 0x0f, 0x1f, ..]
        // call, jmp, jcc (rel8 and rel32)
        | [0xe8 | 0xe9 | 0xeb | 0x70..=0x7f, ..] | [0x0f, 0x80..=0x8f, ..]
    )
}

fn is_legacy_prefix(byte: u8) -> bool {
    matches!(
        byte,
        0xf0 | 0xf2 | 0xf3 | 0x2e | 0x36 | 0x3e | 0x26 | 0x64 | 0x65 | 0x66 | 0x67
    )
}

/// Why a probe placed after `instruction` could count differently than one before it, if it
/// could.
fn unskippable(
    instruction: &Instruction,
    factory: &mut InstructionInfoFactory,
) -> Option<&'static str> {
    if instruction.flow_control() != FlowControl::Next {
        return Some("branches, calls, returns or traps");
    }
    if instruction.stack_pointer_increment() != 0 {
        return Some("moves the stack pointer");
    }
    let info = factory.info(instruction);
    let is_rsp = |register: Register| register.full_register() == Register::RSP;
    if info
        .used_registers()
        .iter()
        .any(|used| is_rsp(used.register()) && writes(used.access()))
    {
        return Some("writes the stack pointer");
    }
    // The return probe takes the return address from `[rsp]` when it fires.
    if info
        .used_memory()
        .iter()
        .any(|used| is_rsp(used.base()) && writes(used.access()))
    {
        return Some("writes to the stack");
    }
    None
}

fn writes(access: OpAccess) -> bool {
    matches!(
        access,
        OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite
    )
}

/// The targets of the direct branches (jcc, jmp, call, loop, jrcxz, xbegin...) of `code`, which
/// starts at virtual address `address`.
pub fn direct_branch_targets(code: &[u8], address: u64) -> impl Iterator<Item = u64> + '_ {
    let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    let mut instruction = Instruction::default();
    std::iter::from_fn(move || loop {
        if !decoder.can_decode() {
            return None;
        }
        decoder.decode_out(&mut instruction);
        // Only near branches have a target: a cheaper test than the operand kinds.
        let target = instruction.near_branch_target();
        if target != 0 && is_direct_branch(&instruction) {
            return Some(target);
        }
    })
}

/// The first direct branch of the function (jcc, jmp, call, loop, jrcxz, xbegin...) whose
/// target lies in `range`, as (branch offset, target offset).
fn branch_into(code: &[u8], range: std::ops::RangeInclusive<u64>) -> Option<(u64, u64)> {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut instruction = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut instruction);
        let is_near_branch = is_direct_branch(&instruction);
        // Targets before the function wrap around to huge offsets, outside any range here.
        if is_near_branch && range.contains(&instruction.near_branch_target()) {
            return Some((instruction.ip(), instruction.near_branch_target()));
        }
    }
    None
}

/// Whether `instruction` is a direct near branch (jcc, jmp, call, loop, jrcxz, xbegin...).
fn is_direct_branch(instruction: &Instruction) -> bool {
    (0..instruction.op_count()).any(|operand| {
        matches!(
            instruction.op_kind(operand),
            OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
        )
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use tempfile::TempDir;

    use super::*;
    use crate::elf::tests::{
        check_against_binutils, compile, expected_offset, parse_label, readelf_executable_loads,
        run,
    };
    use crate::elf::{read_elf_functions, FunctionKind};

    const ATOMIC_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/elf/testdata/atomic.c");

    /// `lock addq $1, 0(%rip)`: 9 bytes the kernel refuses to probe.
    const LOCK_ADD: [u8; 9] = [0xf0, 0x48, 0x83, 0x05, 0, 0, 0, 0, 0x01];
    /// `lock xadd %rax, 0(%rip)`: 9 bytes.
    const LOCK_XADD: [u8; 9] = [0xf0, 0x48, 0x0f, 0xc1, 0x05, 0, 0, 0, 0];
    const MOV_EAX_RSI: [u8; 2] = [0x8b, 0x06];
    const TEST_EAX: [u8; 2] = [0x85, 0xc0];
    const PUSH_RBX: [u8; 1] = [0x53];
    const RET: [u8; 1] = [0xc3];

    fn code(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    fn moved(offset_in_function: u64) -> Result<ProbeSite, NoSite> {
        Ok(ProbeSite {
            offset_in_function,
            kind: SiteKind::AfterUnprobeablePrefix,
        })
    }

    /// The site the default policy picks.
    fn choose(code: &[u8]) -> Result<ProbeSite, NoSite> {
        super::choose(code, SitePolicy::Best)
    }

    #[test]
    fn endbr64_is_skipped_where_the_next_instruction_counts_the_same() {
        let after = Ok(ProbeSite {
            offset_in_function: 4,
            kind: SiteKind::AfterEndbr64,
        });
        let function = code(&[&ENDBR64, &PUSH_RBX, &MOV_EAX_RSI, &RET]);
        assert_eq!(choose(&function), after);
        // --probe-at-entry keeps the entry.
        assert_eq!(
            super::choose(&function, SitePolicy::Entry),
            Ok(ProbeSite::ENTRY)
        );
        // A loop back to just after endbr64 would pass the site without a call.
        let jne_4 = [0x75, 0xfb]; // at 7: jne 4
        assert_eq!(
            choose(&code(&[&ENDBR64, &PUSH_RBX, &TEST_EAX, &jne_4, &RET])),
            Ok(ProbeSite::ENTRY)
        );
        // A next instruction the kernel refuses is skipped too, under the same rules.
        assert_eq!(
            choose(&code(&[&ENDBR64, &LOCK_ADD, &RET])),
            Ok(ProbeSite {
                offset_in_function: 13,
                kind: SiteKind::AfterEndbr64,
            })
        );
        // Nothing after it: the entry.
        assert_eq!(choose(&ENDBR64), Ok(ProbeSite::ENTRY));
    }

    #[test]
    fn straight_line_register_instructions_are_skipped_to_an_emulated_branch() {
        let test_rsi = [0x48, 0x85, 0xf6]; // test %rsi,%rsi
        let je = [0x74, 0x01]; // je +1 (onto the ret)
        let js = [0x78, 0x01]; // js +1
        let mov_eax_edi = [0x89, 0xf8]; // mov %edi,%eax
        let straight_changing = |offset_in_function, changed_arguments| {
            Ok(ProbeSite {
                offset_in_function,
                kind: SiteKind::AfterStraightLine { changed_arguments },
            })
        };
        let straight = |offset_in_function| straight_changing(offset_in_function, 0);
        // libpython's shapes: `test %rsi,%rsi; je`, `mov; test; js`, behind endbr64 too.
        assert_eq!(choose(&code(&[&test_rsi, &je, &RET, &RET])), straight(3));
        let mov_test_js = code(&[&mov_eax_edi, &TEST_EAX, &js, &RET, &RET]);
        assert_eq!(choose(&mov_test_js), straight(4));
        let behind_endbr64 = code(&[&ENDBR64, &mov_eax_edi, &TEST_EAX, &js, &RET, &RET]);
        assert_eq!(choose(&behind_endbr64), straight(8));
        // --probe-at-entry keeps the entry; an emulated entry stays.
        assert_eq!(
            super::choose(&mov_test_js, SitePolicy::Entry),
            Ok(ProbeSite::ENTRY)
        );
        assert_eq!(
            choose(&code(&[&PUSH_RBX, &TEST_EAX, &js, &RET])),
            Ok(ProbeSite::ENTRY)
        );
        // Code elsewhere in the file (a .cold fragment, another function) branching into the
        // skipped instructions.
        assert_eq!(
            super::choose_beside(&mov_test_js, SitePolicy::Best, &[2]).map(|c| c.site),
            Ok(ProbeSite::ENTRY)
        );
        assert_eq!(
            super::choose_beside(&mov_test_js, SitePolicy::Best, &[5]).map(|c| c.site),
            straight(4)
        );
        // PyMem_Malloc's `mov %rdi,%rsi; test %rdi,%rdi; js`: argument 2's register changes.
        let mov_rsi_rdi = [0x48, 0x89, 0xfe];
        let test_rdi = [0x48, 0x85, 0xff];
        assert_eq!(
            choose(&code(&[&mov_rsi_rdi, &test_rdi, &js, &RET, &RET])),
            straight_changing(6, 0b10)
        );
        // Not skipped: a write of the stack pointer, a division (it faults on zero), a branch
        // into the range.
        let not_skipped: [(&[u8], &str); 2] = [
            (&[0x48, 0x89, 0xc4], "mov %rax,%rsp"),
            (&[0xf6, 0xf1], "div %cl"),
        ];
        for (first, what) in not_skipped {
            assert_eq!(
                choose(&code(&[first, &TEST_EAX, &js, &RET, &RET])),
                Ok(ProbeSite::ENTRY),
                "{what}"
            );
        }
        let jne_2 = [0x75, 0xfb]; // at 7: jne 2, the test
        assert_eq!(
            choose(&code(&[&mov_eax_edi, &TEST_EAX, &js, &RET, &jne_2, &RET])),
            Ok(ProbeSite::ENTRY)
        );
        // Nothing emulated before the ret: the entry.
        assert_eq!(
            choose(&code(&[&mov_eax_edi, &TEST_EAX, &RET])),
            Ok(ProbeSite::ENTRY)
        );
    }

    /// The site of `first` then `test %rax,%rax; je`, and why it is single-stepped if it is.
    fn chosen_before_test_je(first: &[u8]) -> Result<ChosenSite, NoSite> {
        let test_rax = [0x48, 0x85, 0xc0];
        let je = [0x74, 0x01];
        super::choose_beside(
            &code(&[first, &test_rax, &je, &RET, &RET]),
            SitePolicy::Best,
            &[],
        )
    }

    fn after_straight_line(offset_in_function: u64, changed_arguments: u8) -> ChosenSite {
        ChosenSite {
            site: ProbeSite {
                offset_in_function,
                kind: SiteKind::AfterStraightLine { changed_arguments },
            },
            single_stepped: None,
        }
    }

    fn at_entry_because(cause: SingleStepCause) -> Result<ChosenSite, NoSite> {
        Ok(ChosenSite {
            site: ProbeSite::ENTRY,
            single_stepped: Some(cause),
        })
    }

    #[test]
    fn loads_are_skipped_to_an_emulated_branch() {
        // libpython's hottest single-stepped entries, as 6.18's Debian build has them.
        let je = [0x74, 0x01];
        let test_rax = [0x48, 0x85, 0xc0];
        let test_rdx = [0x48, 0x85, 0xd2];
        // Their instructions before the emulated one, the site's offset, the arguments changed.
        let shapes: [(&[&[u8]], u64, u8, &str); 4] = [
            (
                &[
                    &[0x48, 0x8b, 0x57, 0x08],
                    &[0x31, 0xc0],
                    &[0xf6, 0x82, 0xa9, 0, 0, 0, 0x40],
                ],
                13,
                0b100,
                "PyObject_IS_GC: mov 0x8(%rdi),%rdx; xor %eax,%eax; testb $0x40,0xa9(%rdx)",
            ),
            (
                &[&[0x48, 0x8b, 0x97, 0x58, 1, 0, 0], &test_rdx],
                10,
                0b100,
                "PyType_IsSubtype: mov 0x158(%rdi),%rdx; test %rdx,%rdx",
            ),
            (
                &[&[0x8b, 0x87, 0xa8, 0, 0, 0], &[0x83, 0xf8, 0x31]],
                9,
                0,
                "_PyTrash_begin: mov 0xa8(%rdi),%eax; cmp $0x31,%eax",
            ),
            (
                &[
                    &[0x48, 0x8b, 0x05, 0, 0, 0, 0],
                    &[0x48, 0x8b, 0x80, 0x40, 0x02, 0, 0],
                    &test_rax,
                ],
                17,
                0,
                "PyErr_Occurred's loads: mov 0x0(%rip),%rax; mov 0x240(%rax),%rax; test",
            ),
        ];
        for (before, offset, changed_arguments, what) in shapes {
            let function = code(&[&before.concat(), &je, &RET, &RET]);
            assert_eq!(
                super::choose_beside(&function, SitePolicy::Best, &[]),
                Ok(after_straight_line(offset, changed_arguments)),
                "{what}"
            );
        }
        let skipped: [(&[u8], u8, &str); 6] = [
            (&[0x48, 0x8b, 0x47, 0xf0], 0, "mov -0x10(%rdi),%rax"),
            (
                &[0x48, 0x8b, 0x3f],
                0b1,
                "mov (%rdi),%rdi: argument 1 changes",
            ),
            (&[0x48, 0x3b, 0x37], 0, "cmp (%rdi),%rsi"),
            (&[0x83, 0x3d, 0, 0, 0, 0, 0], 0, "cmpl $0,0x0(%rip)"),
            (
                &[0x48, 0x8d, 0x77, 0x08],
                0b10,
                "lea 0x8(%rdi),%rsi: no memory at all",
            ),
            // The thread's own TLS: the stack protector's canary.
            (
                &[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0],
                0,
                "mov %fs:0x28,%rax",
            ),
        ];
        for (first, changed_arguments, what) in skipped {
            let offset = (first.len() + test_rax.len()) as u64;
            assert_eq!(
                chosen_before_test_je(first),
                Ok(after_straight_line(offset, changed_arguments)),
                "{what}"
            );
        }
    }

    #[test]
    fn stores_stack_changes_and_branches_are_not_skipped() {
        let refused: [(&[u8], SingleStepCause, &str); 11] = [
            (
                &[0x48, 0x89, 0x07],
                SingleStepCause::WritesMemory,
                "mov %rax,(%rdi)",
            ),
            (
                &[0x48, 0x83, 0x07, 0x01],
                SingleStepCause::WritesMemory,
                "addq $1,(%rdi)",
            ),
            (
                &[0x48, 0x87, 0x07],
                SingleStepCause::WritesMemory,
                "xchg %rax,(%rdi)",
            ),
            (&[0xf3, 0xa4], SingleStepCause::WritesMemory, "rep movsb"),
            (
                &[0x48, 0x83, 0xec, 0x18],
                SingleStepCause::ChangesStackPointer,
                "sub $0x18,%rsp",
            ),
            (&[0x5b], SingleStepCause::ChangesStackPointer, "pop %rbx"),
            // The return address the return probe swaps for its trampoline.
            (
                &[0x48, 0x8b, 0x04, 0x24],
                SingleStepCause::OtherInstruction,
                "mov (%rsp),%rax",
            ),
            (
                &[0xf3, 0xa6],
                SingleStepCause::OtherInstruction,
                "repe cmpsb: a string",
            ),
            (
                &[0xac],
                SingleStepCause::OtherInstruction,
                "lodsb: a string",
            ),
            (
                &[0x48, 0xf7, 0x37],
                SingleStepCause::OtherInstruction,
                "divq (%rdi)",
            ),
            // A clone before the site would count the call in both processes.
            (&[0x0f, 0x05], SingleStepCause::OtherInstruction, "syscall"),
        ];
        for (first, cause, what) in refused {
            assert_eq!(
                chosen_before_test_je(first),
                at_entry_because(cause),
                "{what}"
            );
        }
        // _Py_Dealloc: mov 0x8(%rdi),%rax; jmp *0x30(%rax).
        let dealloc = [0x48, 0x8b, 0x47, 0x08, 0xff, 0x60, 0x30];
        assert_eq!(
            super::choose_beside(&dealloc, SitePolicy::Best, &[]),
            at_entry_because(SingleStepCause::IndirectBranch)
        );
        // A getter: mov 0x10(%rdi),%rax; ret.
        let getter = [0x48, 0x8b, 0x47, 0x10, 0xc3];
        assert_eq!(
            super::choose_beside(&getter, SitePolicy::Best, &[]),
            at_entry_because(SingleStepCause::Returns)
        );
        // A `ds` load is skipped by no straight-line walk, and `lock addq $1,0(%rip)` writes
        // memory; the kernel cannot probe either, so the probe moves past them onto the
        // single-stepped `test`.
        let unprobeable: [(&[u8], SingleStepCause); 2] = [
            (&[0x3e, 0x48, 0x8b, 0x07], SingleStepCause::OtherInstruction),
            (&LOCK_ADD, SingleStepCause::WritesMemory),
        ];
        for (first, cause) in unprobeable {
            let site = ProbeSite {
                offset_in_function: first.len() as u64,
                kind: SiteKind::AfterUnprobeablePrefix,
            };
            assert_eq!(
                chosen_before_test_je(first),
                Ok(ChosenSite {
                    site,
                    single_stepped: Some(cause),
                }),
                "{first:x?}"
            );
        }
        // Past `lock` straight onto a push: emulated.
        assert_eq!(
            super::choose_beside(&code(&[&LOCK_ADD, &PUSH_RBX, &RET]), SitePolicy::Best, &[])
                .map(|chosen| chosen.single_stepped),
            Ok(None)
        );
        // A branch back onto the `test` after the load, or onto the `je`.
        let load = [0x48, 0x8b, 0x47, 0x08]; // mov 0x8(%rdi),%rax
        let test_rax = [0x48, 0x85, 0xc0];
        let je = [0x74, 0x01];
        let jne_4 = [0x75, 0xf6]; // at 12: jne 4
        let jne_7 = [0x75, 0xf9]; // at 12: jne 7, the site
        for back in [jne_4, jne_7] {
            let function = code(&[&load, &test_rax, &je, &RET, &PUSH_RBX, &back, &RET]);
            assert_eq!(
                super::choose_beside(&function, SitePolicy::Best, &[]),
                at_entry_because(SingleStepCause::BranchIntoSkipped),
                "{back:x?}"
            );
        }
        // From a .cold fragment.
        let function = code(&[&load, &test_rax, &je, &RET, &RET]);
        assert_eq!(
            super::choose_beside(&function, SitePolicy::Best, &[4]),
            at_entry_because(SingleStepCause::BranchIntoSkipped)
        );
        assert_eq!(
            super::choose_beside(&function, SitePolicy::Entry, &[]),
            at_entry_because(SingleStepCause::KeptAtEntry)
        );
        // The emulated `je` one past the most the walk skips.
        let mut far = [load; MAX_STRAIGHT_LINE + 1].concat();
        far.extend_from_slice(&code(&[&je, &RET, &RET]));
        assert_eq!(
            super::choose_beside(&far, SitePolicy::Best, &[]),
            at_entry_because(SingleStepCause::NoEmulatedInstruction)
        );
    }

    #[test]
    fn probeable_entries_stay() {
        assert_eq!(
            choose(&code(&[&PUSH_RBX, &MOV_EAX_RSI, &RET])),
            Ok(ProbeSite::ENTRY)
        );
        // `sub $8, %rsp` first, a lock later: the entry is probeable.
        let sub_rsp = [0x48, 0x83, 0xec, 0x08];
        let add_rsp = [0x48, 0x83, 0xc4, 0x08];
        assert_eq!(
            choose(&code(&[&sub_rsp, &LOCK_ADD, &add_rsp, &RET])),
            Ok(ProbeSite::ENTRY)
        );
        // `mov %fs:0x28, %rax`: FS and GS overrides are fine.
        let fs_load = [0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0];
        assert_eq!(choose(&code(&[&fs_load, &RET])), Ok(ProbeSite::ENTRY));
        // `rep stosb`, `data16 nop`: REP and operand-size prefixes are fine.
        assert_eq!(choose(&[0xf3, 0xaa, 0xc3]), Ok(ProbeSite::ENTRY));
        assert_eq!(choose(&[0x66, 0x90, 0xc3]), Ok(ProbeSite::ENTRY));
        // Nothing to decode: nothing to say against the entry.
        assert_eq!(choose(&[]), Ok(ProbeSite::ENTRY));
    }

    #[test]
    fn vector_encoded_instructions_are_unprobeable() {
        // vmovd %esi,%xmm0 (VEX2), vpbroadcastb %xmm0,%ymm0 (VEX3), vmovdqu64 (EVEX).
        assert!(!kernel_can_probe(&[0xc5, 0xf9, 0x6e, 0xc6]));
        assert!(!kernel_can_probe(&[0xc4, 0xe2, 0x7d, 0x78, 0xc0]));
        assert!(!kernel_can_probe(&[0x62, 0xe1, 0xfe, 0x48, 0x6f, 0x06]));
        // pop (%rax) is 8f /0; another reg field makes 8f an XOP prefix.
        assert!(kernel_can_probe(&[0x8f, 0x00]));
        assert!(!kernel_can_probe(&[0x8f, 0xe8, 0x78, 0xcd, 0xc1, 0x00]));
        // A vector instruction moves the probe to the next one: glibc's AVX2 memset.
        let memset = [0xc5, 0xf9, 0x6e, 0xc6, 0x48, 0x89, 0xf8, 0xc3];
        assert_eq!(choose(&memset).map(|site| site.offset_in_function), Ok(4));
    }

    #[test]
    fn bad_prefixes_are_the_kernels() {
        for prefix in [0xf0, 0x2e, 0x3e, 0x26, 0x36] {
            assert!(
                !kernel_can_probe(&[prefix, 0x48, 0x8b, 0x06]),
                "{prefix:#x}"
            );
            // Behind other legacy prefixes too.
            assert!(
                !kernel_can_probe(&[0x66, prefix, 0x8b, 0x06]),
                "{prefix:#x}"
            );
        }
        for prefix in [0x64, 0x65, 0x66, 0x67, 0xf2, 0xf3] {
            assert!(kernel_can_probe(&[prefix, 0x48, 0x8b, 0x06]), "{prefix:#x}");
        }
        // A prefix byte after the opcode (an immediate) is not a prefix.
        assert!(kernel_can_probe(&[0xb0, 0xf0]), "mov $0xf0, %al");
    }

    #[test]
    fn emulated_instructions_are_the_kernels() {
        for code in [
            &PUSH_RBX[..],
            &[0x41, 0x54],             // push %r12
            &[0x90],                   // nop
            &[0x0f, 0x1f, 0x44, 0, 0], // nopl 0(%rax,%rax,1)
            &[0xe8, 0, 0, 0, 0],       // call rel32
            &[0xe9, 0, 0, 0, 0],       // jmp rel32
            &[0xeb, 0],                // jmp rel8
            &[0x74, 0],                // je rel8
            &[0x0f, 0x84, 0, 0, 0, 0], // je rel32
        ] {
            assert!(kernel_emulates(code), "{code:x?}");
        }
        for code in [
            &MOV_EAX_RSI[..],
            &TEST_EAX,
            &RET,
            &ENDBR64,
            &[0xff, 0x25, 0, 0, 0, 0], // jmp *0(%rip)
            &[0x66, 0x53],             // push %bx
            &[0x48, 0x83, 0xec, 0x08], // sub $8, %rsp
            &[],
        ] {
            assert!(!kernel_emulates(code), "{code:x?}");
        }
    }

    #[test]
    fn emulated_sites_are_found_past_skippable_instructions() {
        assert_eq!(emulated_site(&code(&[&PUSH_RBX, &RET])), Some(0));
        assert_eq!(emulated_site(&code(&[&ENDBR64, &PUSH_RBX, &RET])), Some(4));
        // cmp $0x1f, %edi; ja +0x3b: the conditional jump (pthread_getspecific).
        let cmp_ja = [0x83, 0xff, 0x1f, 0x77, 0x3b];
        assert_eq!(emulated_site(&code(&[&cmp_ja, &RET])), Some(3));
        // mov; neg; cmovs; ret (labs): nothing emulated before the ret.
        let labs = [0x48, 0x89, 0xf8, 0x48, 0xf7, 0xd8, 0x48, 0x0f, 0x48, 0xc7];
        assert_eq!(emulated_site(&code(&[&labs, &RET])), None);
        // sub $8, %rsp first: the stack moves.
        let sub_rsp = [0x48, 0x83, 0xec, 0x08];
        assert_eq!(emulated_site(&code(&[&sub_rsp, &PUSH_RBX, &RET])), None);
        // A loop back into the skipped instructions.
        let jne_0 = [0x75, 0xfb]; // at 3: jne 0... lands on 0, the entry: fine
        assert_eq!(emulated_site(&code(&[&TEST_EAX, &[0x90], &jne_0])), Some(2));
        let jne_1 = [0x75, 0xfc]; // at 3: jne 1, the nop: skipped by no one, but a target
        assert_eq!(
            emulated_site(&code(&[&MOV_EAX_RSI, &[0x90], &jne_1])),
            None,
            "a branch lands on the site"
        );
    }

    #[test]
    fn lock_first_moves_to_the_next_instruction() {
        assert_eq!(choose(&code(&[&LOCK_ADD, &MOV_EAX_RSI, &RET])), moved(9));
        assert_eq!(choose(&code(&[&LOCK_ADD, &RET])), moved(9));
        // `push` is probeable: the site is the push, which is not skipped.
        assert_eq!(choose(&code(&[&LOCK_ADD, &PUSH_RBX, &RET])), moved(9));
        assert_eq!(
            choose(&code(&[&LOCK_ADD, &LOCK_ADD, &MOV_EAX_RSI, &RET])),
            moved(18)
        );
    }

    #[test]
    fn segment_overrides_first_move_too() {
        // `ds mov (%rsi), %rax` and `cs mov (%rsi), %rax`.
        assert_eq!(choose(&[0x3e, 0x48, 0x8b, 0x06, 0xc3]), moved(4));
        assert_eq!(choose(&[0x2e, 0x48, 0x8b, 0x06, 0xc3]), moved(4));
    }

    #[test]
    fn branches_into_the_skipped_range_forbid_the_move() {
        // 0: lock xadd; 9: test %eax,%eax; 11: jne 9; 13: ret.
        let jne_9 = [0x75, 0xfc];
        assert_eq!(
            choose(&code(&[&LOCK_XADD, &TEST_EAX, &jne_9, &RET])),
            Err(NoSite::BranchInto { from: 11, to: 9 })
        );
        // A branch into the skipped instruction's middle (a 32-bit jmp back to 4).
        let jmp_4 = [0xe9, 0xf5, 0xff, 0xff, 0xff];
        assert_eq!(
            choose(&code(&[&LOCK_ADD, &RET, &jmp_4])),
            Err(NoSite::BranchInto { from: 10, to: 4 })
        );
        // Back to the entry: it passes the skipped instruction again, as an entry probe would
        // fire again.
        let dec_ecx = [0xff, 0xc9];
        let jne_0 = [0x75, 0xf3];
        assert_eq!(
            choose(&code(&[&LOCK_ADD, &dec_ecx, &jne_0, &RET])),
            moved(9)
        );
        // Past the site: the probe has fired by then.
        let jne_11 = [0x75, 0xfe];
        assert_eq!(
            choose(&code(&[&LOCK_XADD, &TEST_EAX, &jne_11, &RET])),
            moved(9)
        );
    }

    #[test]
    fn unprobeable_instructions_that_change_control_or_stack_stay() {
        let cases: [(&[u8], &str); 5] = [
            // lock xadd %rsp, 0(%rip)
            (
                &[0xf0, 0x48, 0x0f, 0xc1, 0x25, 0, 0, 0, 0],
                "writes the stack pointer",
            ),
            // ds pop %rbx
            (&[0x3e, 0x5b], "moves the stack pointer"),
            // notrack jmp *%rax
            (&[0x3e, 0xff, 0xe0], "branches, calls, returns or traps"),
            // ds call *%rax
            (&[0x3e, 0xff, 0xd0], "branches, calls, returns or traps"),
            // lock addq $1, (%rsp)
            (&[0xf0, 0x48, 0x83, 0x04, 0x24, 0x01], "writes to the stack"),
        ];
        for (first, why) in cases {
            assert_eq!(
                choose(&code(&[first, &MOV_EAX_RSI, &RET])),
                Err(NoSite::Unskippable { offset: 0, why }),
                "{first:x?}"
            );
        }
        // The second one of two.
        assert_eq!(
            choose(&code(&[&LOCK_ADD, &[0x3e, 0x5b], &RET])),
            Err(NoSite::Unskippable {
                offset: 9,
                why: "moves the stack pointer"
            })
        );
    }

    #[test]
    fn pushes_nops_and_relative_branches_are_emulated() {
        let emulated: [&[u8]; 7] = [
            &[0x55],
            &[0x41, 0x57],
            &[0x90],
            &[0xe8, 0, 0, 0, 0],
            &[0xeb, 0],
            &[0x74, 0],
            &[0x0f, 0x84, 0, 0, 0, 0],
        ];
        for code in emulated {
            assert_eq!(execution_at(code), Execution::Emulated, "{code:x?}");
        }
        let stepped: [&[u8]; 5] = [&ENDBR64, &RET, &[0x48, 0x89, 0xf8], &[0xff, 0x25], &[]];
        for code in stepped {
            assert_eq!(execution_at(code), Execution::SingleStepped, "{code:x?}");
        }
    }

    /// The rows of the README's table of what the kernel emulates, measured on 6.18 by
    /// tools/emulation_table.sh: utrace's classification of each, which the table's "utrace
    /// assumes" column prints (`uprobe-floor --classify`), must be what the kernel did.
    #[test]
    fn the_measured_table_is_what_utrace_assumes() {
        let emulated: [&[u8]; 14] = [
            &[0x55],                               // push %rbp
            &[0x53],                               // push %rbx
            &[0x41, 0x54],                         // push %r12
            &[0x90],                               // nop
            &[0x66, 0x90],                         // xchg %ax,%ax
            &[0x0f, 0x1f, 0x00],                   // nopl (%rax)
            &[0x0f, 0x1f, 0x40, 0x00],             // nopl 0x0(%rax)
            &[0x0f, 0x1f, 0x44, 0x00, 0x00],       // nopl 0x0(%rax,%rax,1)
            &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00], // nopw 0x0(%rax,%rax,1)
            &[0xeb, 0x00],                         // jmp rel8
            &[0xe9, 0, 0, 0, 0],                   // jmp rel32
            &[0xe8, 1, 0, 0, 0],                   // call rel32
            &[0x74, 0x00],                         // je rel8
            &[0x0f, 0x84, 0, 0, 0, 0],             // je rel32
        ];
        for code in emulated {
            assert!(kernel_can_probe(code), "{code:x?}");
            assert_eq!(execution_at(code), Execution::Emulated, "{code:x?}");
        }
        let stepped: [&[u8]; 15] = [
            &[0x6a, 0x00],                                                 // push $0x0
            &[0x66, 0x66, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0],                // data16 nopw
            &[0x48, 0x8d, 0x76, 0x00],                                     // lea 0x0(%rsi),%rsi
            &ENDBR64,                                                      // endbr64
            &RET,                                                          // ret
            &[0x48, 0x89, 0xf8],                                           // mov %rdi,%rax
            &[0x48, 0x8b, 0x07],                                           // mov (%rdi),%rax
            &[0x48, 0x8d, 0x47, 0x08],                                     // lea 0x8(%rdi),%rax
            &[0x48, 0x83, 0xec, 0x08],                                     // sub $0x8,%rsp
            &[0x31, 0xc0],                                                 // xor %eax,%eax
            &[0xb8, 1, 0, 0, 0],                                           // mov $0x1,%eax
            &[0x48, 0x85, 0xf6],                                           // test %rsi,%rsi
            &[0x48, 0x83, 0xff, 0x01],                                     // cmp $0x1,%rdi
            &[0x48, 0xb8, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11], // movabs
            &[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0],                // mov %fs:0x28,%rax
        ];
        for code in stepped {
            assert!(kernel_can_probe(code), "{code:x?}");
            assert_eq!(execution_at(code), Execution::SingleStepped, "{code:x?}");
        }
        let refused: [&[u8]; 2] = [
            &[0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0], // cs nopw
            &[0xf0, 0x48, 0x83, 0x07, 0x01],                // lock addq $0x1,(%rdi)
        ];
        for code in refused {
            assert!(!kernel_can_probe(code), "{code:x?}");
        }
    }

    #[test]
    fn walk_has_limits() {
        let mut eight = [LOCK_ADD; MAX_SKIPPED].concat();
        eight.extend_from_slice(&RET);
        assert_eq!(choose(&eight), moved(9 * MAX_SKIPPED as u64));
        let mut nine = [LOCK_ADD; MAX_SKIPPED + 1].concat();
        nine.extend_from_slice(&RET);
        assert_eq!(choose(&nine), Err(NoSite::TooManyUnprobeable));
        assert_eq!(choose(&LOCK_ADD), Err(NoSite::EndOfFunction));
        assert_eq!(
            choose(&LOCK_ADD[..4]),
            Err(NoSite::Undecodable { offset: 0 })
        );
        // The site itself cut short.
        assert_eq!(
            choose(&code(&[&LOCK_ADD, &[0x48, 0x8b]])),
            Err(NoSite::Undecodable { offset: 9 })
        );
    }

    /// `objdump -d -w`: each label's instruction addresses, in order.
    fn instruction_addresses(path: &std::path::Path) -> BTreeMap<String, Vec<u64>> {
        let text = run("objdump", &["-d", "-w", path.to_str().unwrap()]);
        let mut functions: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let mut current = None;
        for line in text.lines() {
            if let Some((_, label)) = parse_label(line) {
                current = Some(label);
            } else if let (Some(label), Some((address, _))) = (&current, line.split_once(":\t")) {
                if let Ok(address) = u64::from_str_radix(address.trim(), 16) {
                    functions.entry(label.clone()).or_default().push(address);
                }
            } else if line.trim().is_empty() {
                current = None;
            }
        }
        functions
    }

    /// Functions that begin with an atomic increment are probed at their second instruction.
    #[test]
    fn atomic_first_functions_are_probed_after_the_lock() {
        let dir = TempDir::new().unwrap();
        let variants: [(&str, &[&str]); 2] = [
            ("pie", &["-fcf-protection=none"]),
            ("shared", &["-fcf-protection=none", "-shared", "-fPIC"]),
        ];
        for (variant, flags) in variants {
            let path = compile(&dir, "cc", ATOMIC_C, &format!("atomic-{variant}"), flags);
            let what = path.display();
            let elf = read_elf_functions(&path).unwrap();
            check_against_binutils(&path, &elf);
            assert_eq!(elf.unprobeable, [], "{what}");

            let loads = readelf_executable_loads(&path);
            let instructions = instruction_addresses(&path);
            let disassembly = run("objdump", &["-d", "-w", path.to_str().unwrap()]);
            let function = |name: &str| {
                elf.functions
                    .iter()
                    .find(|f| f.name == name && f.kind == FunctionKind::Function)
                    .unwrap_or_else(|| panic!("{what}: {name} missing"))
            };
            for name in ["count_hit", "count_miss"] {
                let f = function(name);
                let addresses = &instructions[name];
                assert_eq!(addresses[0], f.address, "{what}: {name}");
                // The compiler did what the fixture is about.
                let first = disassembly
                    .lines()
                    .find(|line| line.trim_start().starts_with(&format!("{:x}:", f.address)))
                    .unwrap();
                assert!(first.contains("lock add"), "{what}: {name} starts {first}");

                let entry = expected_offset(&loads, f.address).unwrap();
                assert_eq!(f.offset, entry + 9, "{what}: {name} past `lock addq`");
                assert_eq!(
                    Some(f.offset),
                    expected_offset(&loads, addresses[1]),
                    "{what}: {name} at objdump's second instruction"
                );
                assert_eq!(
                    f.site,
                    ProbeSite {
                        offset_in_function: 9,
                        kind: SiteKind::AfterUnprobeablePrefix
                    }
                );
            }
            for name in ["plain_total", "main"] {
                let f = function(name);
                assert_eq!(f.site, ProbeSite::ENTRY, "{what}: {name}");
                assert_eq!(
                    Some(f.offset),
                    expected_offset(&loads, f.address),
                    "{what}: {name}"
                );
            }
        }
    }
}
