//! [`ElfFile`]: one traced file, read and parsed once, asked every question planning has.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use goblin::elf::header::{self, Header, ET_DYN};
use goblin::elf::Elf;

use super::debug_file::{DebugLinks, DebugLookup, SymbolSource};
use super::frames::EhFrameSection;
use super::mapped::{FileBytes, MappedFile};
use super::plt::{self, PltStub, SlotTarget};
use super::prototypes::{self, DwarfError, Prototype};
use super::segments::LoadSegments;
use super::source_lines;
use super::symbols::{self, Symbol};
use super::versions::SymbolVersions;
use super::{plt_calls, ElfError};
use crate::table::SourceLine;

/// Where the symbols of a file came from, and how many functions each table gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolOrigin {
    /// The `.symtab` read: the file's own, a debug file's, MiniDebugInfo's, or none.
    pub source: SymbolSource,
    /// The functions of that `.symtab`.
    pub from_source: usize,
    /// The functions of `.dynsym`.
    pub from_dynsym: usize,
    pub plt_stubs: usize,
}

impl std::fmt::Display for SymbolOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.source {
            SymbolSource::DynsymOnly => write!(f, "{}", self.source)?,
            _ => write!(f, "{} functions from {}", self.from_source, self.source)?,
        }
        write!(
            f,
            ", {} from .dynsym, {} PLT stubs",
            self.from_dynsym, self.plt_stubs
        )
    }
}

/// One x86_64 ELF file (executable or shared library): its bytes, and what goblin parsed of
/// them, kept so that each question (its functions, their exits, its exports, its PLT stubs'
/// uses, its unwinder) is answered without reading or parsing the file again.
pub struct ElfFile {
    path: PathBuf,
    pub(super) bytes: FileBytes,
    /// The entry point (`_start`).
    pub(super) entry: u64,
    /// `ET_DYN`: a position-independent executable, or a shared library.
    pub(super) position_independent: bool,
    /// The executable segments.
    pub(super) segments: LoadSegments,
    /// Every loaded segment: where the tables of `switch` jumps are read (src/elf/returns.rs).
    loaded: LoadSegments,
    /// The function symbols of `.symtab` and `.dynsym`.
    pub(super) symbols: Vec<Symbol>,
    /// The GOT slots that relocations fill with a function's address, by virtual address.
    pub(super) got_slots: HashMap<u64, SlotTarget>,
    /// The PLT stubs, sorted by address.
    pub(super) stubs: Vec<PltStub>,
    /// The stubs whose addresses a data relocation stores (function pointers to stubs).
    pub(super) stubs_in_data: BTreeSet<u64>,
    /// The code sections outside the PLT (`.text`, `.init`...), as (address, size): all the
    /// code, where function symbols may leave some out (a stripped library's local functions).
    pub(super) code_sections: Vec<(u64, u64)>,
    /// Its call frame information, where code starts and ends without symbols.
    eh_frame: Option<EhFrameSection>,
    /// The file has a `.go.buildinfo` section: the Go toolchain built it.
    pub(super) go_buildinfo: bool,
    /// The USDT probe sites of `.note.stapsdt`.
    pub(super) usdt_notes: Vec<super::usdt::UsdtNote>,
    /// What points to the file's symbols elsewhere (build id, debug link, MiniDebugInfo).
    debug_links: DebugLinks,
    /// Where the symbols beside `.dynsym` came from.
    symbol_source: SymbolSource,
    /// The versions of `.dynsym`'s symbols: asked for, and defined as the default.
    pub(super) versions: SymbolVersions,
}

impl ElfFile {
    /// Reads and parses the file at `path`. Only 64-bit x86_64 executables and shared libraries
    /// are accepted.
    pub fn open(path: &Path) -> Result<ElfFile, ElfError> {
        ElfFile::parsed(path, read_file(path)?)
    }

    /// Reads and parses the file opened as `open`, named `name` in errors and messages (a
    /// process's file opened through `/proc/PID/map_files`, named by its path).
    pub fn open_as(open: &Path, name: &Path) -> Result<ElfFile, ElfError> {
        ElfFile::parsed(name, read_file(open)?)
    }

    /// Parses `bytes`, the contents of the file at `path` (which only names it in errors).
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<ElfFile, ElfError> {
        ElfFile::parsed(path, FileBytes::Owned(bytes))
    }

    fn parsed(path: &Path, bytes: FileBytes) -> Result<ElfFile, ElfError> {
        let elf = parse(path, &bytes)?;
        let symbols = symbols::function_symbols(&elf);
        let got_slots = plt::got_slot_targets(&elf, &symbols);
        let stubs = plt::stubs(&elf, &bytes, &got_slots);
        let stubs_in_data = plt_calls::stubs_in_data(&elf, &stubs);
        let code_sections = plt_calls::code_sections(&elf);
        let eh_frame = EhFrameSection::of(&elf);
        let entry = elf.entry;
        let position_independent = elf.header.e_type == ET_DYN;
        let segments = LoadSegments::executable(&elf.program_headers);
        let loaded = LoadSegments::all(&elf.program_headers);
        let go_buildinfo = super::go::has_buildinfo_section(&elf);
        let usdt_notes = super::usdt::notes(&elf, &bytes);
        let debug_links = DebugLinks::of(&elf, &bytes);
        let versions = SymbolVersions::of(&elf);
        let symbol_source = match symbols.iter().any(|s| !s.dynamic) {
            true => SymbolSource::OwnSymtab,
            false => SymbolSource::DynsymOnly,
        };
        Ok(ElfFile {
            path: path.to_owned(),
            bytes,
            entry,
            position_independent,
            segments,
            loaded,
            symbols,
            got_slots,
            stubs,
            stubs_in_data,
            code_sections,
            eh_frame,
            go_buildinfo,
            usdt_notes,
            debug_links,
            symbol_source,
            versions,
        })
    }

    /// Whether the file defines a function symbol spelled `name` (mangled), without planning
    /// its functions.
    pub fn defines_function(&self, name: &str) -> bool {
        self.symbols.iter().any(|s| s.defined && s.name == name)
    }

    /// Whether the instruction at file offset `offset` is a `ret` (`c3`, `c2 imm16`, `f3 c3`,
    /// `f2 c3`): an exit site where the return value is in rax, unlike a tail jump.
    pub fn is_return_at(&self, offset: u64) -> bool {
        matches!(
            self.code_at(offset, 2),
            [0xc3, ..] | [0xc2, ..] | [0xf3 | 0xf2, 0xc3]
        )
    }

    /// Where the file has no `.symtab` function symbols, takes those of its separate debug
    /// file or MiniDebugInfo, as `lookup` finds them (see [`debug_file`](super::debug_file)),
    /// else those of a Go program's function table.
    /// `known_as` is the file's real path, where its debug link is looked for (a running
    /// process's file is opened through `/proc/PID/map_files`).
    pub fn load_debug_symbols(&mut self, lookup: &DebugLookup, known_as: &Path) {
        if self.symbol_source != SymbolSource::DynsymOnly {
            return;
        }
        let started = std::time::Instant::now();
        let found = lookup.symbols_for(known_as, &self.bytes, &self.debug_links);
        log::debug!(
            "looked for the symbols of stripped {} in {:.1} ms",
            known_as.display(),
            started.elapsed().as_secs_f64() * 1e3
        );
        // A stripped Go program still names every function in the table its runtime needs.
        let found =
            found.or_else(|| Some((SymbolSource::GoFunctionTable, self.go_table_symbols()?)));
        if let Some((source, mut symbols)) = found {
            symbols.retain(|s| s.defined);
            self.symbols.retain(|s| s.dynamic);
            self.symbols.splice(0..0, symbols);
            self.symbol_source = source;
        }
    }

    /// The function symbols of the file, with those of its separate debug file or MiniDebugInfo
    /// (as `lookup` finds them, `known_as` being the file's real path) where it has no
    /// `.symtab` and [`ElfFile::load_debug_symbols`] did not take them already.
    pub(super) fn symbols_with_debug_file(
        &self,
        lookup: &DebugLookup,
        known_as: &Path,
    ) -> std::borrow::Cow<'_, [Symbol]> {
        if self.symbol_source != SymbolSource::DynsymOnly {
            return std::borrow::Cow::Borrowed(&self.symbols);
        }
        let found = lookup.symbols_for(known_as, &self.bytes, &self.debug_links);
        let mut symbols = found.map(|(_, symbols)| symbols).unwrap_or_default();
        symbols.retain(|s| s.defined);
        symbols.extend(self.symbols.iter().cloned());
        std::borrow::Cow::Owned(symbols)
    }

    /// The file's GNU build id.
    pub fn build_id(&self) -> Option<&[u8]> {
        self.debug_links.build_id.as_deref()
    }

    /// The version of `symbol` (a name it needs from elsewhere) the file asks for.
    pub fn requested_version(&self, symbol: &str) -> Option<&str> {
        self.versions.requested.get(symbol).map(String::as_str)
    }

    /// The names of the ifuncs the file exports (`STT_GNU_IFUNC` in `.dynsym`, defined).
    pub fn exported_ifuncs(&self) -> Vec<&str> {
        let ifuncs = self.symbols.iter().filter(|s| s.dynamic && s.defined);
        let ifuncs = ifuncs.filter(|s| s.kind == goblin::elf::sym::STT_GNU_IFUNC);
        ifuncs.map(|s| s.name.as_str()).collect()
    }

    /// Where the file's symbols came from, and how many functions each table gave.
    pub fn symbol_origin(&self) -> SymbolOrigin {
        let count = |dynamic: bool| {
            let table: Vec<Symbol> = self
                .symbols
                .iter()
                .filter(|s| s.dynamic == dynamic)
                .cloned()
                .collect();
            symbols::defined_functions(&table).len()
        };
        SymbolOrigin {
            source: self.symbol_source.clone(),
            from_source: count(false),
            from_dynsym: count(true),
            plt_stubs: self.stubs.len(),
        }
    }

    /// The prototypes DWARF gives the file's functions, by entry address (see
    /// [`prototypes`](super::prototypes)): from the file's own `.debug_info`, or where it has
    /// none, from the debug file its symbols were taken from by [`ElfFile::load_debug_symbols`]
    /// (so only for a stripped file whose debug file was found). Failures are warned of, and
    /// give no prototypes.
    pub fn prototypes(&self) -> HashMap<u64, Prototype> {
        self.read_dwarf("arguments are not shown", prototypes::read_prototypes)
    }

    /// The source lines of the functions that start at `addresses` (virtual addresses), by
    /// address (see [`source_lines`](super::source_lines)): from the file's own line tables, or
    /// where it has none, from its debug file, as for [`ElfFile::prototypes`]. Failures are
    /// warned of, and give no lines.
    pub fn source_lines(&self, addresses: &[u64]) -> HashMap<u64, SourceLine> {
        self.read_dwarf("source lines are not shown", |bytes| {
            source_lines::read_source_lines(bytes, addresses)
        })
    }

    /// What `read` finds in the DWARF of the file, or where the file's own gives nothing, in
    /// that of the debug file its symbols were taken from. Failures are warned of, saying that
    /// `consequence`, and give nothing.
    fn read_dwarf<K, V>(
        &self,
        consequence: &str,
        read: impl Fn(&[u8]) -> Result<HashMap<K, V>, DwarfError>,
    ) -> HashMap<K, V> {
        let read = |path: &Path, bytes: &[u8]| {
            read(bytes).unwrap_or_else(|error| {
                log::warn!(
                    "the DWARF of {} is not read: {error}; {consequence}",
                    path.display()
                );
                HashMap::new()
            })
        };
        let own = read(&self.path, &self.bytes);
        if !own.is_empty() {
            return own;
        }
        match &self.symbol_source {
            SymbolSource::DebugFile(debug) | SymbolSource::Debuginfod(debug) => {
                match std::fs::read(debug) {
                    Ok(bytes) => read(debug, &bytes),
                    Err(error) => {
                        log::warn!(
                            "cannot read the debug file {} ({error}): {consequence}",
                            debug.display()
                        );
                        HashMap::new()
                    }
                }
            }
            _ => own,
        }
    }

    /// The USDT probe sites the file carries (`.note.stapsdt`).
    pub fn usdt_notes(&self) -> &[super::usdt::UsdtNote] {
        &self.usdt_notes
    }

    /// The path the file was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bytes at file offset `offset`, `size` of them as far as the file has them.
    pub(super) fn code_at(&self, offset: u64, size: u64) -> &[u8] {
        super::code_at(&self.bytes, offset, size)
    }

    /// The file's code as (address, size) ranges: its code sections but the PLT's, or, where it
    /// has no section headers, its functions and their `.cold` fragments.
    pub(super) fn code_ranges(&self) -> Vec<(u64, u64)> {
        match self.code_sections.is_empty() {
            false => self.code_sections.clone(),
            true => super::symbols::defined_functions(&self.symbols)
                .into_iter()
                .chain(super::symbols::cold_fragments(&self.symbols))
                .map(|function| (function.address, function.size))
                .collect(),
        }
    }

    /// Decodes every instruction of the file's code ([`ElfFile::code_ranges`]), handing each to
    /// `visit`.
    pub(super) fn for_each_instruction(&self, mut visit: impl FnMut(&iced_x86::Instruction)) {
        use iced_x86::{Decoder, DecoderOptions, Instruction};
        let mut instruction = Instruction::default();
        for (address, size) in self.code_ranges() {
            let Some(offset) = self.segments.file_offset(address) else {
                continue;
            };
            let bytes = self.code_at(offset, size);
            let mut decoder = Decoder::with_ip(64, bytes, address, DecoderOptions::NONE);
            while decoder.can_decode() {
                decoder.decode_out(&mut instruction);
                visit(&instruction);
            }
        }
    }

    /// The code a stripped file (only `.dynsym`'s symbols) has no symbol for, as (address, size)
    /// ranges: the FDEs of its `.eh_frame` that start in a code section (not the PLT's) outside
    /// `covered`, the ranges of its symbols. Empty for a file with a symbol table, whose
    /// symbols cover its code. A call frame information that cannot be read is warned of, and
    /// gives what was read before the damage.
    pub(super) fn code_without_symbols(&self, covered: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let Some(eh_frame) = self
            .eh_frame
            .filter(|_| self.symbol_source == SymbolSource::DynsymOnly)
        else {
            return Vec::new();
        };
        let ranges = eh_frame.code_ranges(&self.bytes).unwrap_or_else(|error| {
            log::warn!(
                "the call frame information (.eh_frame) of {} is not read: {error}; the \
                 returns of its PLT calls from code without symbols are not seen",
                self.path.display()
            );
            Vec::new()
        });
        let mut covered = covered.to_vec();
        covered.sort_unstable();
        ranges
            .into_iter()
            .filter(|&(start, _)| {
                inside(&self.code_sections, start) && !inside_sorted(&covered, start)
            })
            .collect()
    }

    /// For each of `ranges` ((first, last, tag): addresses, not overlapping) that a direct jump
    /// or call anywhere in the file's code targets: (tag, one such target).
    pub(super) fn branches_into(&self, ranges: &[(u64, u64, usize)]) -> Vec<(usize, u64)> {
        if ranges.is_empty() {
            return Vec::new();
        }
        let mut ranges = ranges.to_vec();
        ranges.sort_unstable();
        let mut found = std::collections::BTreeMap::new();
        for (address, size) in self.code_ranges() {
            for target in
                super::site::direct_branch_targets(self.code_at_address(address, size), address)
            {
                let after = ranges.partition_point(|&(first, _, _)| first <= target);
                if let Some(&(_, last, tag)) = after.checked_sub(1).map(|i| &ranges[i]) {
                    if target <= last {
                        found.entry(tag).or_insert(target);
                    }
                }
            }
        }
        found.into_iter().collect()
    }

    /// The bytes at virtual address `address`, `size` of them as far as the file has them; none
    /// outside the executable segments.
    pub(super) fn code_at_address(&self, address: u64, size: u64) -> &[u8] {
        self.segments
            .file_offset(address)
            .map_or(&[][..], |offset| self.code_at(offset, size))
    }

    /// The bytes at virtual address `address`, `size` of them as far as the file has them, code
    /// or data; none outside the loaded segments.
    pub(super) fn loaded_at_address(&self, address: u64, size: u64) -> &[u8] {
        self.loaded
            .file_offset(address)
            .map_or(&[][..], |offset| self.code_at(offset, size))
    }
}

/// Whether `address` lies in one of `ranges` ((address, size)).
fn inside(ranges: &[(u64, u64)], address: u64) -> bool {
    ranges
        .iter()
        .any(|&(start, size)| (start..start.saturating_add(size)).contains(&address))
}

/// [`inside`] for `ranges` sorted by address and not overlapping.
fn inside_sorted(ranges: &[(u64, u64)], address: u64) -> bool {
    let after = ranges.partition_point(|&(start, _)| start <= address);
    after
        .checked_sub(1)
        .is_some_and(|i| inside(&ranges[i..=i], address))
}

/// The file's bytes, mapped; read where it cannot be mapped (an empty file: the parser says what
/// is wrong with it).
fn read_file(path: &Path) -> Result<FileBytes, ElfError> {
    let io_error = |error| ElfError::Io {
        path: path.to_owned(),
        error,
    };
    let metadata = std::fs::metadata(path).map_err(io_error)?;
    if metadata.is_dir() {
        return Err(ElfError::IsDirectory {
            path: path.to_owned(),
        });
    }
    match MappedFile::open(path) {
        Ok(mapped) => Ok(FileBytes::Mapped(mapped)),
        Err(_) => std::fs::read(path).map(FileBytes::Owned).map_err(io_error),
    }
}

/// Checks the identity of the file before goblin parses the rest, so that the common mistakes
/// (a script, a 32-bit or ARM binary, an object file) get their own message.
fn parse<'a>(path: &Path, bytes: &'a [u8]) -> Result<Elf<'a>, ElfError> {
    if bytes.get(..header::SELFMAG) != Some(header::ELFMAG.as_slice()) {
        return Err(ElfError::NotElf {
            path: path.to_owned(),
        });
    }
    let malformed = |error: goblin::error::Error| ElfError::Malformed {
        path: path.to_owned(),
        message: error.to_string(),
    };
    let header: Header = Elf::parse_header(bytes).map_err(malformed)?;
    let class = header.e_ident.get(header::EI_CLASS).copied();
    if class != Some(header::ELFCLASS64) || header.e_machine != header::EM_X86_64 {
        return Err(ElfError::UnsupportedMachine {
            path: path.to_owned(),
            class: match class {
                Some(header::ELFCLASS32) => "32-bit",
                Some(header::ELFCLASS64) => "64-bit",
                _ => "invalid-class",
            },
            machine: header::machine_to_str(header.e_machine).to_owned(),
        });
    }
    if header.e_type != header::ET_EXEC && header.e_type != header::ET_DYN {
        return Err(ElfError::UnsupportedType {
            path: path.to_owned(),
            kind: match header.e_type {
                header::ET_REL => "relocatable (object)",
                header::ET_CORE => "core dump",
                _ => "unknown-type",
            },
        });
    }
    Elf::parse(bytes).map_err(malformed)
}
