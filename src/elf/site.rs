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

use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, OpAccess, OpKind,
    Register,
};

/// How many leading instructions the walk skips at most before it gives up.
pub const MAX_SKIPPED: usize = 8;

/// Why a probe site is where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SiteKind {
    /// The function's first instruction.
    Entry,
    /// Past leading instructions the kernel cannot probe (LOCK or segment-override prefix), which
    /// are skipped because they cannot change what the probes count.
    AfterUnprobeablePrefix,
}

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

/// The probe site of the function whose machine code is `code` (its bytes from its first
/// instruction to its end, as long as the file has them).
///
/// Decoding starts at the first instruction; the whole function is decoded only when the entry
/// cannot be probed, to find the branches that would forbid a later site.
pub fn choose(code: &[u8]) -> Result<ProbeSite, NoSite> {
    if kernel_can_probe(code) {
        return Ok(ProbeSite::ENTRY);
    }
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
            return Ok(ProbeSite {
                offset_in_function: site,
                kind: SiteKind::AfterUnprobeablePrefix,
            });
        }
    }
    Err(NoSite::TooManyUnprobeable)
}

/// Whether the kernel accepts a uprobe on the instruction that starts `code`, as far as its
/// prefixes go: none of its legacy prefixes may be LOCK or a CS/DS/ES/SS segment override
/// (`is_prefix_bad` in `arch/x86/kernel/uprobes.c`). FS and GS overrides (`0x64`, `0x65`),
/// operand and address size (`0x66`, `0x67`) and REP (`0xf2`, `0xf3`) are fine.
pub fn kernel_can_probe(code: &[u8]) -> bool {
    code.iter()
        .take_while(|&&byte| is_legacy_prefix(byte))
        .all(|&byte| !matches!(byte, 0xf0 | 0x2e | 0x3e | 0x26 | 0x36))
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

/// The first direct branch of the function (jcc, jmp, call, loop, jrcxz, xbegin...) whose
/// target lies in `range`, as (branch offset, target offset).
fn branch_into(code: &[u8], range: std::ops::RangeInclusive<u64>) -> Option<(u64, u64)> {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut instruction = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut instruction);
        let is_near_branch = (0..instruction.op_count()).any(|operand| {
            matches!(
                instruction.op_kind(operand),
                OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
            )
        });
        // Targets before the function wrap around to huge offsets, outside any range here.
        if is_near_branch && range.contains(&instruction.near_branch_target()) {
            return Some((instruction.ip(), instruction.near_branch_target()));
        }
    }
    None
}
