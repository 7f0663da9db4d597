//! Where a program's PLT calls can be probed more cheaply than at their stubs.
//!
//! A stub is `[endbr64] [bnd] jmp *slot(%rip)`, which the kernel single-steps (≈20 µs a hit in a
//! VM). The library function the slot leads to often starts with an instruction the kernel
//! emulates (a `push`: under a µs). Probing there sees the same calls and more: every other
//! caller of that function too. The BPF side keeps a hit only when the return address follows a
//! direct `call` of the stub in its file (the executable, or a traced library), which is exactly
//! a call through the stub when nothing else reaches the stub:
//!
//! - the executable is position-independent: a non-PIE one uses PLT addresses as function
//!   pointers, which any code may call (a library always is);
//! - no jump, address computation, immediate or data relocation in the file names the stub, only
//!   direct calls ([`StubUses`]);
//! - the slot's symbol is a plain function of the library it binds to, defined once (a name
//!   defined in several versions binds by the version asked for) with an instruction the kernel
//!   emulates near its start, where the probe goes ([`site::emulated_site`], [`LibraryEntries`]);
//!   or an ifunc, whose implementation is chosen at run time: when the plan knows that choice
//!   (`crate::plan`'s `IfuncChoices`), the implementation, found with its size among the
//!   library's `.symtab` functions (its debug file's), is probed under the same rules
//!   ([`ElfFile::implementation_landing`]).

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use goblin::elf::reloc::R_X86_64_RELATIVE;
use goblin::elf::section_header::SHF_EXECINSTR;
use goblin::elf::sym::{STT_FUNC, STT_GNU_IFUNC};
use goblin::elf::Elf;
use iced_x86::{Code, FlowControl, Instruction, OpKind};

use super::plt::PltStub;
use super::{site, symbols, DebugLookup, ElfFile};

/// What a file does with its PLT stubs.
#[derive(Debug, Default)]
pub struct StubUses {
    /// Position-independent (`ET_DYN`).
    pub pie: bool,
    /// The lowest virtual address of the executable `PT_LOAD` segments: where the kernel's
    /// `mm->start_code` points once the program is loaded, which gives its load bias.
    pub code_vaddr: u64,
    /// How many executable `PT_LOAD` segments the file has.
    pub code_segments: usize,
    /// Stubs some instruction or relocation names other than as the target of a direct call or
    /// of an unconditional jump without prefixes.
    pub named_otherwise: BTreeSet<u64>,
    /// Per stub, the virtual addresses of the unconditional jumps to it (tail calls), each a
    /// plain `jmp rel8`/`jmp rel32`, which the kernel emulates.
    pub tail_jumps: BTreeMap<u64, Vec<u64>>,
}

impl StubUses {
    /// Whether every use of the stub at `address` is a direct call or one of its
    /// [`tail_jumps_to`](Self::tail_jumps_to).
    pub fn only_called_or_jumped(&self, address: u64) -> bool {
        self.pie && !self.named_otherwise.contains(&address)
    }

    /// The addresses of the unconditional jumps to the stub at `address`.
    pub fn tail_jumps_to(&self, address: u64) -> &[u64] {
        self.tail_jumps.get(&address).map_or(&[], Vec::as_slice)
    }
}

impl ElfFile {
    /// How the file uses its PLT stubs: every instruction of its code sections is read (of its
    /// functions and their `.cold` fragments where it has no section headers).
    pub fn stub_uses(&self) -> StubUses {
        let stubs: BTreeSet<u64> = self.stubs.iter().map(|stub| stub.address).collect();
        let mut named_otherwise = self.stubs_in_data.clone();
        let mut tail_jumps: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        self.for_each_instruction(|instruction| match stub_use(instruction, &stubs) {
            Some(StubUse::TailJump(stub)) => {
                tail_jumps.entry(stub).or_default().push(instruction.ip());
            }
            Some(StubUse::Other(stub)) => {
                named_otherwise.insert(stub);
            }
            None => {}
        });
        StubUses {
            pie: self.position_independent,
            code_vaddr: self.code_vaddr(),
            code_segments: self.segments.len(),
            named_otherwise,
            tail_jumps,
        }
    }

    /// The lowest virtual address of the executable `PT_LOAD` segments (see
    /// [`StubUses::code_vaddr`]).
    pub fn code_vaddr(&self) -> u64 {
        self.segments.lowest_vaddr().unwrap_or(0)
    }

    /// The file offset of the code at virtual address `address`.
    pub fn code_offset(&self, address: u64) -> Option<u64> {
        self.segments.file_offset(address)
    }

    /// Where the exported functions of the library are probed.
    pub fn library_entries(&self) -> LibraryEntries {
        let mut landings = HashMap::new();
        for symbol in self.symbols.iter().filter(|s| s.dynamic && s.defined) {
            let landing = self.landing_of(symbol);
            let address = symbol.address;
            match landings.entry(symbol.name.clone()) {
                Entry::Vacant(vacant) => {
                    vacant.insert((address, landing));
                }
                Entry::Occupied(mut seen) if seen.get().0 != address => {
                    seen.insert((address, Landing::Versioned));
                }
                Entry::Occupied(_) => {}
            }
        }
        // Where a name has several versions, a call asking for the default one binds to it.
        let mut defaults = HashMap::new();
        for (name, (_, landing)) in &landings {
            if *landing != Landing::Versioned {
                continue;
            }
            let Some(default) = self.versions.defaults.get(name) else {
                continue;
            };
            let symbol = self.symbols.iter().find(|s| {
                s.dynamic && s.defined && s.name == *name && s.address == default.address
            });
            if let Some(symbol) = symbol {
                let landing = self.landing_of(symbol);
                defaults.insert(name.clone(), (default.version.clone(), landing));
            }
        }
        let landings = landings
            .into_iter()
            .map(|(name, (_, landing))| (name, landing))
            .collect();
        LibraryEntries { landings, defaults }
    }

    /// Where the calls of the exported function `symbol` are probed.
    fn landing_of(&self, symbol: &symbols::Symbol) -> Landing {
        match symbol.kind {
            STT_GNU_IFUNC => Landing::Ifunc,
            _ => match self.emulated_site_of(symbol.address, symbol.size) {
                Some(Some(offset)) => Landing::At(offset),
                Some(None) => Landing::SingleStepped,
                None => Landing::Undefined,
            },
        }
    }
}

impl ElfFile {
    /// The file offset of the emulated site (see [`site::emulated_site`]) of the function of
    /// `size` bytes at `address`: `Some(None)` when it has none, `None` when the address is in
    /// no executable segment.
    fn emulated_site_of(&self, address: u64, size: u64) -> Option<Option<u64>> {
        let offset = self.segments.file_offset(address)?;
        let code = self.code_at(offset, size);
        Some(site::emulated_site(code).map(|site| offset + site))
    }

    /// The library's functions by address, its debug file's included (as `lookup` finds it for
    /// the file's real path `known_as`): an ifunc's implementations are local symbols, which only
    /// `.symtab` names and sizes.
    pub fn implementations(&self, lookup: &DebugLookup, known_as: &Path) -> Implementations {
        let symbols = self.symbols_with_debug_file(lookup, known_as);
        let mut functions: BTreeMap<u64, (Vec<String>, u64)> = BTreeMap::new();
        for function in symbols::defined_functions(&symbols) {
            functions.insert(function.address, (Vec::new(), function.size));
        }
        // Every name at each address: memcpy's implementation is memmove's too, and each stub is
        // best told by its own.
        let sized = symbols.iter().filter(|s| s.kind == STT_FUNC && s.size > 0);
        for symbol in sized {
            if let Some((names, _)) = functions.get_mut(&symbol.address) {
                if !names.contains(&symbol.name) {
                    names.push(symbol.name.clone());
                }
            }
        }
        for (names, _) in functions.values_mut() {
            names.sort();
        }
        Implementations { functions }
    }

    /// Where the calls that land in the function at `address` (an ifunc's implementation, as the
    /// loader chose it) are probed, under the same rules as [`ElfFile::library_entries`].
    /// The implementation is named by its name that has the ifunc's `ifunc` in it
    /// (`__memmove_avx_unaligned_erms` for `memmove`, `__memcpy_avx_unaligned_erms` for
    /// `memcpy`), else by its first.
    pub fn implementation_landing(
        &self,
        implementations: &Implementations,
        address: u64,
        ifunc: &str,
    ) -> ImplementationLanding {
        let Some((names, size)) = implementations.functions.get(&address) else {
            return ImplementationLanding::UnknownSize;
        };
        let own = format!("__{ifunc}_");
        let name = names.iter().find(|name| name.starts_with(&own));
        let Some(name) = name.or(names.first()).cloned() else {
            return ImplementationLanding::UnknownSize;
        };
        match self.emulated_site_of(address, *size) {
            Some(Some(offset)) => ImplementationLanding::At { offset, name },
            Some(None) => ImplementationLanding::SingleStepped { name },
            None => ImplementationLanding::UnknownSize,
        }
    }
}

/// A library's functions with a size, by address (see [`ElfFile::implementations`]).
#[derive(Debug, Default)]
pub struct Implementations {
    /// By address: every name of the function there (sorted), and its size.
    functions: BTreeMap<u64, (Vec<String>, u64)>,
}

impl Implementations {
    /// The names of the function at `address`.
    pub fn names_at(&self, address: u64) -> &[String] {
        self.functions
            .get(&address)
            .map_or(&[], |(names, _)| names.as_slice())
    }
}

/// Where the calls into an ifunc's implementation are probed, or why they are not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImplementationLanding {
    /// The file offset of the implementation's emulated site, and the implementation's name.
    At { offset: u64, name: String },
    /// The implementation has nothing the kernel emulates near its start.
    SingleStepped { name: String },
    /// No function of known size starts there: the library's `.symtab` (its debug file) is
    /// missing, and without a size the walk cannot know the branches into its first bytes.
    UnknownSize,
}

/// The stubs whose addresses the file stores in data (an `R_X86_64_RELATIVE` relocation's
/// addend): function pointers, which any code may call.
pub(super) fn stubs_in_data(elf: &Elf, stubs: &[PltStub]) -> BTreeSet<u64> {
    let stubs: BTreeSet<u64> = stubs.iter().map(|stub| stub.address).collect();
    if stubs.is_empty() {
        return BTreeSet::new();
    }
    elf.dynrelas
        .iter()
        .filter(|reloc| reloc.r_type == R_X86_64_RELATIVE)
        .filter_map(|reloc| reloc.r_addend.and_then(|a| u64::try_from(a).ok()))
        .filter(|addend| stubs.contains(addend))
        .collect()
}

/// The file's code sections but the PLT's (`SHF_EXECINSTR`, not `.plt*`), as (address, size).
pub(super) fn code_sections(elf: &Elf) -> Vec<(u64, u64)> {
    elf.section_headers
        .iter()
        .filter(|section| section.sh_flags & u64::from(SHF_EXECINSTR) != 0)
        .filter(|section| {
            let name = elf.shdr_strtab.get_at(section.sh_name).unwrap_or("");
            !name.starts_with(".plt")
        })
        .map(|section| (section.sh_addr, section.sh_size))
        .collect()
}

/// A use of a PLT stub other than a direct call's.
enum StubUse {
    /// A plain unconditional jump to the stub (`jmp rel8`/`jmp rel32`, no prefix).
    TailJump(u64),
    /// Anything else that names it: a conditional or prefixed jump, an address computation, an
    /// immediate.
    Other(u64),
}

/// How `instruction` uses a stub other than as the target of a direct call, if it does.
fn stub_use(instruction: &Instruction, stubs: &BTreeSet<u64>) -> Option<StubUse> {
    let is_branch = (0..instruction.op_count()).any(|operand| {
        matches!(
            instruction.op_kind(operand),
            OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
        )
    });
    if is_branch && stubs.contains(&instruction.near_branch_target()) {
        let stub = instruction.near_branch_target();
        return match instruction.code() {
            _ if instruction.flow_control() == FlowControl::Call => None,
            // The lengths exclude any prefix, which the kernel would not emulate.
            Code::Jmp_rel8_64 if instruction.len() == 2 => Some(StubUse::TailJump(stub)),
            Code::Jmp_rel32_64 if instruction.len() == 5 => Some(StubUse::TailJump(stub)),
            _ => Some(StubUse::Other(stub)),
        };
    }
    if instruction.is_ip_rel_memory_operand()
        && stubs.contains(&instruction.ip_rel_memory_address())
    {
        return Some(StubUse::Other(instruction.ip_rel_memory_address()));
    }
    (0..instruction.op_count())
        .filter_map(|operand| instruction.try_immediate(operand).ok())
        .find(|value| stubs.contains(value))
        .map(StubUse::Other)
}

/// Where a PLT call's library function is probed, or why it is not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Landing {
    /// The file offset of the function's probe site in the library, an instruction the kernel
    /// emulates.
    At(u64),
    /// The symbol is an ifunc: which implementation runs is chosen at run time.
    Ifunc,
    /// The function's probe site would be single-stepped there too.
    SingleStepped,
    /// The library does not define the symbol as a function.
    Undefined,
    /// The library defines the name more than once, with different versions at different
    /// addresses (`realpath@GLIBC_2.2.5` and `realpath@@GLIBC_2.3`): which one a call binds to
    /// depends on the version the caller asks for, which utrace does not follow.
    Versioned,
}

/// The exported functions of a library, by symbol name (as `.dynsym` spells it), with where
/// each one's calls can be probed.
#[derive(Debug, Default)]
pub struct LibraryEntries {
    landings: HashMap<String, Landing>,
    /// For the names defined in several versions, the default version's name and landing.
    defaults: HashMap<String, (String, Landing)>,
}

impl LibraryEntries {
    pub fn landing(&self, symbol: &str) -> Landing {
        self.landings
            .get(symbol)
            .copied()
            .unwrap_or(Landing::Undefined)
    }

    /// Where the calls of `symbol` land when the caller asks for its version `version`: a name
    /// of several versions binds to the default one (`memcpy@@GLIBC_2.14`) when that is the
    /// version asked for.
    pub fn landing_of_version(&self, symbol: &str, version: Option<&str>) -> Landing {
        match (self.landing(symbol), self.defaults.get(symbol)) {
            (Landing::Versioned, Some((default, landing))) if version == Some(default) => *landing,
            (landing, _) => landing,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use tempfile::TempDir;

    use super::*;
    use crate::elf::ldcache::LdCache;
    use crate::elf::loader::load_order;
    use crate::elf::tests::{compile, readelf_executable_loads};
    use crate::elf::{read_function_symbols, FunctionKind};

    const PLTUSES_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/elf/testdata/pltuses.c");

    fn stub(program: &Path, name: &str) -> u64 {
        let functions = read_function_symbols(program).unwrap();
        let found = functions
            .iter()
            .find(|f| f.kind == FunctionKind::Plt && f.name == name);
        found.unwrap_or_else(|| panic!("{name} missing")).address
    }

    #[test]
    fn stubs_reached_by_tail_jumps_know_their_jumps() {
        let dir = TempDir::new().unwrap();
        let flags = [
            "-O2",
            "-fno-builtin",
            "-fcf-protection=none",
            "-pie",
            "-fPIE",
        ];
        let program = compile(&dir, "cc", PLTUSES_C, "pltuses", &flags);
        let uses = ElfFile::open(&program).unwrap().stub_uses();
        assert!(uses.pie);
        let (getenv, labs) = (stub(&program, "getenv@plt"), stub(&program, "labs@plt"));
        assert!(uses.only_called_or_jumped(getenv));
        assert!(uses.tail_jumps_to(getenv).is_empty());
        assert!(uses.only_called_or_jumped(labs));
        let tail_labs = read_function_symbols(&program).unwrap();
        let tail_labs = tail_labs.iter().find(|f| f.name == "tail_labs").unwrap();
        let jumps = uses.tail_jumps_to(labs);
        assert_eq!(jumps.len(), 1, "{jumps:x?}");
        assert!((tail_labs.address..tail_labs.address + tail_labs.size).contains(&jumps[0]));
        let first_code = readelf_executable_loads(&program)
            .iter()
            .map(|&(_, vaddr, _)| vaddr)
            .min();
        assert_eq!(Some(uses.code_vaddr), first_code);

        // Not position-independent: its PLT addresses are function pointers.
        let fixed = compile(&dir, "cc", PLTUSES_C, "pltuses-fixed", &["-O2", "-no-pie"]);
        let uses = ElfFile::open(&fixed).unwrap().stub_uses();
        assert!(!uses.pie);
        assert!(!uses.only_called_or_jumped(stub(&fixed, "getenv@plt")));
    }

    #[test]
    fn libc_functions_land_where_the_kernel_emulates_their_code() {
        let dir = TempDir::new().unwrap();
        let program = compile(&dir, "cc", PLTUSES_C, "pltuses", &["-O2"]);
        let order = load_order(&program, &LdCache::system());
        let libc = order
            .libraries
            .iter()
            .find(|l| l.name == "libc.so.6")
            .unwrap();
        let entries = ElfFile::open(&libc.path).unwrap().library_entries();
        // malloc saves registers first (after endbr64 in CET builds): emulated.
        let Landing::At(offset) = entries.landing("malloc") else {
            panic!("malloc: {:?}", entries.landing("malloc"));
        };
        let bytes = std::fs::read(&libc.path).unwrap();
        assert!(site::kernel_emulates(&bytes[offset as usize..]));
        // labs computes with movs to its ret; strlen is an ifunc; realpath has two versions.
        assert_eq!(entries.landing("labs"), Landing::SingleStepped);
        assert_eq!(entries.landing("strlen"), Landing::Ifunc);
        assert_eq!(entries.landing("realpath"), Landing::Versioned);
        // A caller asking for the default version (realpath@@GLIBC_2.3) binds to it; one asking
        // for the old one, or for none known, to what utrace does not follow.
        let default = entries.landing_of_version("realpath", Some("GLIBC_2.3"));
        assert!(matches!(default, Landing::At(_)), "{default:?}");
        for old in [Some("GLIBC_2.2.5"), None] {
            let landing = entries.landing_of_version("realpath", old);
            assert_eq!(landing, Landing::Versioned, "{old:?}");
        }
        // memcpy@@GLIBC_2.14 is an ifunc; memcpy@GLIBC_2.2.5 a plain function.
        assert_eq!(entries.landing("memcpy"), Landing::Versioned);
        let memcpy = entries.landing_of_version("memcpy", Some("GLIBC_2.14"));
        assert_eq!(memcpy, Landing::Ifunc);
        // The program asks for the versions it was linked against.
        let program = ElfFile::open(&program).unwrap();
        assert_eq!(program.requested_version("getenv"), Some("GLIBC_2.2.5"));
        assert_eq!(entries.landing("no_such_function"), Landing::Undefined);
    }
}
