//! PLT stubs, named by the GOT slot they jump through.
//!
//! No stub layout is assumed. Each stub of a PLT section is decoded: an optional `endbr64`
//! (`f3 0f 1e fa`), an optional `bnd` prefix (`f2`), then `jmp *disp32(%rip)` (`ff 25 disp32`).
//! The GOT slot that jump reads is matched against the `r_offset` of the relocations that fill
//! GOT slots, and the relocation's symbol names the stub. This covers, among the layouts seen:
//!
//! - lazy `.plt` (`jmp *slot; push index; jmp PLT0`, 16 bytes), where PLT0 (`push; jmp`) matches
//!   no slot and is left out;
//! - IBT/CET builds: `.plt` holds `endbr64; push index; jmp PLT0` (no jump through a slot, so
//!   nothing matches) and the stubs that are called are `endbr64; jmp *slot` in `.plt.sec`;
//! - MPX builds (`bnd jmp *slot` in `.plt.sec`, called `.plt.bnd` by old binutils);
//! - `.plt.got` (8 or 16 bytes), stubs of functions whose slot is an ordinary `.got` entry
//!   filled by an `R_X86_64_GLOB_DAT` relocation (`__cxa_finalize@plt`);
//! - static executables, whose `.plt` holds 8-byte `jmp *slot; xchg %ax,%ax` stubs for
//!   `R_X86_64_IRELATIVE` slots (GNU ifuncs).

use std::collections::HashMap;

use goblin::elf::reloc::{R_X86_64_GLOB_DAT, R_X86_64_IRELATIVE, R_X86_64_JUMP_SLOT};
use goblin::elf::section_header::{SHT_DYNSYM, SHT_NOBITS, SHT_SYMTAB};
use goblin::elf::sym::STT_GNU_IFUNC;
use goblin::elf::{Elf, RelocSection, SectionHeader, Symtab};
use goblin::strtab::Strtab;

use super::demangle::demangle;
use super::symbols::{merge_aliases, RawFunction, Symbol};

/// The PLT sections stubs are looked for in.
const PLT_SECTIONS: [&str; 5] = [".plt", ".plt.sec", ".plt.bnd", ".plt.got", ".iplt"];

const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
const BND_PREFIX: u8 = 0xf2;
const JMP_RIP_INDIRECT: [u8; 2] = [0xff, 0x25];

/// Step used when a PLT section does not give its entry size: every PLT layout in use aligns
/// its stubs to 8 bytes from the start of the section.
const SCAN_STEP: u64 = 8;
/// The longest stub assumed when the size comes from the distance to the next stub.
const MAX_STUB_SIZE: u64 = 16;

/// One PLT stub: a call into another module, or into an ifunc's chosen implementation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PltStub {
    /// The demangled name of the function the stub jumps to (without `@plt`).
    pub target: String,
    /// The symbol of the slot's relocation as the file spells it (mangled), which the dynamic
    /// loader looks up; `None` for the file's own ifuncs (`R_X86_64_IRELATIVE`).
    pub symbol: Option<String>,
    pub address: u64,
    pub size: u64,
}

/// The PLT stubs of the file, sorted by address; `slots` are its GOT slots
/// ([`got_slot_targets`]).
pub(super) fn stubs(elf: &Elf, bytes: &[u8], slots: &HashMap<u64, SlotTarget>) -> Vec<PltStub> {
    if slots.is_empty() {
        return Vec::new();
    }
    let mut stubs = Vec::new();
    for section in &elf.section_headers {
        let name = elf.shdr_strtab.get_at(section.sh_name).unwrap_or("");
        if !PLT_SECTIONS.contains(&name) || section.sh_type == SHT_NOBITS {
            continue;
        }
        if let Some(code) = section_bytes(bytes, section) {
            stubs.extend(section_stubs(
                code,
                section.sh_addr,
                section.sh_entsize,
                slots,
            ));
        }
    }
    stubs.sort_by_key(|stub| stub.address);
    stubs.dedup_by_key(|stub| stub.address);
    stubs
}

/// The stubs of one PLT section at virtual address `base`: every entry that decodes to a jump
/// through a known GOT slot.
fn section_stubs(
    code: &[u8],
    base: u64,
    entsize: u64,
    slots: &HashMap<u64, SlotTarget>,
) -> Vec<PltStub> {
    let known_size = (8..=64).contains(&entsize);
    let step = if known_size { entsize } else { SCAN_STEP };
    let mut found: Vec<(u64, &SlotTarget)> = Vec::new(); // (offset in section, target)
    let mut offset = 0u64;
    while offset < code.len() as u64 {
        let Some(entry) = usize::try_from(offset).ok().and_then(|at| code.get(at..)) else {
            break;
        };
        let target = base
            .checked_add(offset)
            .and_then(|address| jump_slot(entry, address))
            .and_then(|slot| slots.get(&slot));
        if let Some(target) = target {
            found.push((offset, target));
        }
        offset += step;
    }

    let section_end = code.len() as u64;
    let mut stubs = Vec::with_capacity(found.len());
    for (i, &(offset, target)) in found.iter().enumerate() {
        let size = if known_size {
            entsize
        } else {
            let next = found.get(i + 1).map_or(section_end, |&(next, _)| next);
            next.saturating_sub(offset).min(MAX_STUB_SIZE)
        };
        if let Some(address) = base.checked_add(offset) {
            stubs.push(PltStub {
                target: target.name.clone(),
                symbol: target.symbol.clone(),
                address,
                size,
            });
        }
    }
    stubs
}

/// The GOT slot that the stub starting at `code` (at virtual address `address`) jumps through:
/// `[endbr64] [bnd] jmp *disp32(%rip)`, the slot being the end of the `jmp` plus `disp32`.
/// `None` when the stub starts with anything else.
pub(super) fn jump_slot(code: &[u8], address: u64) -> Option<u64> {
    let mut at = 0usize;
    if code.starts_with(&ENDBR64) {
        at += ENDBR64.len();
    }
    if code.get(at) == Some(&BND_PREFIX) {
        at += 1;
    }
    if code.get(at..at + 2)? != JMP_RIP_INDIRECT {
        return None;
    }
    let disp = code.get(at + 2..at + 6)?;
    let disp = i32::from_le_bytes(disp.try_into().ok()?);
    let next_instruction = address.checked_add(u64::try_from(at + 6).ok()?)?;
    next_instruction.checked_add_signed(i64::from(disp))
}

/// The function a GOT slot ends up holding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SlotTarget {
    /// Demangled.
    pub name: String,
    /// The relocation's symbol, raw; `None` for `R_X86_64_IRELATIVE`.
    pub symbol: Option<String>,
}

/// The GOT slots filled by PLT-related relocations, each with the function it ends up holding.
pub(super) fn got_slot_targets(elf: &Elf, symbols: &[Symbol]) -> HashMap<u64, SlotTarget> {
    let ifuncs = ifunc_names(symbols);
    let mut slots = HashMap::new();
    let dynamic = [&elf.pltrelocs, &elf.dynrelas];
    for relocs in dynamic {
        add_slots(
            &mut slots,
            relocs,
            Some((&elf.dynsyms, &elf.dynstrtab)),
            &ifuncs,
        );
    }
    // Relocation sections found through the section headers: the same as above for dynamic
    // files, and the only ones in static executables (`.rela.plt` with IRELATIVE entries).
    for (index, relocs) in &elf.shdr_relocs {
        let symbols = elf
            .section_headers
            .get(*index)
            .and_then(|section| elf.section_headers.get(section.sh_link as usize))
            .and_then(|linked| match linked.sh_type {
                SHT_DYNSYM => Some((&elf.dynsyms, &elf.dynstrtab)),
                SHT_SYMTAB => Some((&elf.syms, &elf.strtab)),
                _ => None,
            });
        add_slots(&mut slots, relocs, symbols, &ifuncs);
    }
    slots
}

fn add_slots(
    slots: &mut HashMap<u64, SlotTarget>,
    relocs: &RelocSection,
    symbols: Option<(&Symtab, &Strtab)>,
    ifuncs: &HashMap<u64, &str>,
) {
    for reloc in relocs.iter() {
        if slots.contains_key(&reloc.r_offset) {
            continue;
        }
        let target = match reloc.r_type {
            R_X86_64_JUMP_SLOT | R_X86_64_GLOB_DAT => symbols
                .and_then(|(symtab, strtab)| strtab.get_at(symtab.get(reloc.r_sym)?.st_name))
                .filter(|name| !name.is_empty())
                .map(|symbol| SlotTarget {
                    name: demangle(symbol),
                    symbol: Some(symbol.to_owned()),
                }),
            R_X86_64_IRELATIVE => {
                // No symbol: the addend is the address of the ifunc's resolver, which is where
                // the ifunc symbol points. Without one, name it as objdump does.
                let resolver = reloc.r_addend.unwrap_or(0);
                Some(SlotTarget {
                    name: u64::try_from(resolver)
                        .ok()
                        .and_then(|address| ifuncs.get(&address))
                        .map_or_else(|| format!("*ABS*+{resolver:#x}"), |name| demangle(name)),
                    symbol: None,
                })
            }
            _ => None,
        };
        if let Some(target) = target {
            slots.insert(reloc.r_offset, target);
        }
    }
}

/// The `STT_GNU_IFUNC` symbols by address, one name per address.
fn ifunc_names(symbols: &[Symbol]) -> HashMap<u64, &str> {
    let ifuncs = symbols
        .iter()
        .filter(|symbol| symbol.kind == STT_GNU_IFUNC && symbol.address != 0)
        .map(|symbol| RawFunction {
            name: &symbol.name,
            address: symbol.address,
            size: symbol.size,
            binding: symbol.binding,
        });
    merge_aliases(ifuncs)
        .into_iter()
        .map(|ifunc| (ifunc.address, ifunc.name))
        .collect()
}

/// The bytes of a section in the file, or `None` when the header points outside the file.
fn section_bytes<'a>(bytes: &'a [u8], section: &SectionHeader) -> Option<&'a [u8]> {
    let start = usize::try_from(section.sh_offset).ok()?;
    let size = usize::try_from(section.sh_size).ok()?;
    bytes.get(start..start.checked_add(size)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_jump_behind_endbr64_and_bnd() {
        // jmp *0x2fca(%rip) at 0x1030: slot 0x1036 + 0x2fca
        let plain = [
            0xff, 0x25, 0xca, 0x2f, 0, 0, 0x68, 0, 0, 0, 0, 0xe9, 0xe0, 0xff, 0xff, 0xff,
        ];
        assert_eq!(jump_slot(&plain, 0x1030), Some(0x4000));
        // endbr64; jmp *0x2f56(%rip) at 0x10a0: slot 0x10aa + 0x2f56
        let ibt = [
            0xf3, 0x0f, 0x1e, 0xfa, 0xff, 0x25, 0x56, 0x2f, 0, 0, 0x66, 0x0f, 0x1f, 0x44, 0, 0,
        ];
        assert_eq!(jump_slot(&ibt, 0x10a0), Some(0x4000));
        // bnd jmp *0x10(%rip) at 0x100: slot 0x107 + 0x10
        let bnd = [0xf2, 0xff, 0x25, 0x10, 0, 0, 0, 0x90];
        assert_eq!(jump_slot(&bnd, 0x100), Some(0x117));
        // endbr64; bnd jmp *-0x20(%rip) at 0x100: slot 0x10b - 0x20
        let both = [
            0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0xe0, 0xff, 0xff, 0xff,
        ];
        assert_eq!(jump_slot(&both, 0x100), Some(0xeb));
    }

    #[test]
    fn rejects_what_is_not_a_jump_through_a_slot() {
        // PLT0: push GOT+8(%rip); jmp *GOT+16(%rip)
        let plt0 = [0xff, 0x35, 0xca, 0x2f, 0, 0, 0xff, 0x25, 0xcc, 0x2f, 0, 0];
        assert_eq!(jump_slot(&plt0, 0x1020), None);
        // IBT lazy entry: endbr64; push $0; jmp PLT0
        let lazy = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x68, 0, 0, 0, 0, 0xe9, 0xe2, 0xff, 0xff, 0xff,
        ];
        assert_eq!(jump_slot(&lazy, 0x1030), None);
        // cut short
        assert_eq!(jump_slot(&[0xff, 0x25, 0x10, 0], 0x100), None);
        assert_eq!(jump_slot(&[0xf3, 0x0f, 0x1e, 0xfa], 0x100), None);
        assert_eq!(jump_slot(&[], 0x100), None);
        // an address that would overflow
        assert_eq!(jump_slot(&[0xff, 0x25, 0x7f, 0, 0, 0], u64::MAX - 2), None);
    }

    #[test]
    fn stubs_are_found_with_and_without_an_entry_size() {
        let slot = |name: &str| SlotTarget {
            name: name.to_owned(),
            symbol: Some(name.to_owned()),
        };
        let slots: HashMap<u64, SlotTarget> = [(0x2000, slot("a")), (0x2008, slot("b"))]
            .into_iter()
            .collect();
        // Two 8-byte stubs (static `.plt`): jmp *slot(%rip); xchg %ax,%ax
        let mut code = Vec::new();
        for (address, slot) in [(0x1000u64, 0x2000u64), (0x1008, 0x2008)] {
            let disp = i32::try_from(slot - (address + 6)).unwrap();
            code.extend_from_slice(&[0xff, 0x25]);
            code.extend_from_slice(&disp.to_le_bytes());
            code.extend_from_slice(&[0x66, 0x90]);
        }
        let expected = vec![
            PltStub {
                target: "a".into(),
                symbol: Some("a".into()),
                address: 0x1000,
                size: 8,
            },
            PltStub {
                target: "b".into(),
                symbol: Some("b".into()),
                address: 0x1008,
                size: 8,
            },
        ];
        assert_eq!(section_stubs(&code, 0x1000, 0, &slots), expected);
        assert_eq!(section_stubs(&code, 0x1000, 8, &slots), expected);
        // A slot nobody relocates names nothing.
        assert!(section_stubs(&code, 0x1000, 8, &HashMap::new()).is_empty());
    }
}
