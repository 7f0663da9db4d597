//! Where a stripped file's symbols are: its separate debug file, found as gdb finds it, or the
//! MiniDebugInfo it carries.
//!
//! The places, in gdb's order, for each debug root (the `--debug-dir` folders, then
//! `/usr/lib/debug`):
//!
//! 1. `ROOT/.build-id/xx/yyyy….debug`, from the file's GNU build id;
//! 2. the name of `.gnu_debuglink` next to the file, in its `.debug/` folder, then under
//!    `ROOT/<the file's folder>/`, the CRC-32 of the section checked;
//! 3. the debuginfod client cache (`$DEBUGINFOD_CACHE_PATH`, else
//!    `~/.cache/debuginfod_client`), filled from `DEBUGINFOD_URLS` when the file is missing
//!    (see [`super::debuginfod`]);
//! 4. the xz-compressed ELF file of `.gnu_debugdata` (MiniDebugInfo, as Fedora ships).
//!
//! A debug file is used only when its build id is the file's (when both have one): a mismatch
//! is a warning, and the search goes on.

use std::fmt;
use std::path::{Path, PathBuf};

use goblin::elf::section_header::{SectionHeader, SHT_SYMTAB};
use goblin::elf::sym::Symtab;
use goblin::elf::Elf;
use goblin::strtab::Strtab;

use super::debuginfod::Debuginfod;
use super::symbols::{self, Symbol};

/// The system's debug root, where Debian's `-dbg` and `-dbgsym` packages install.
pub const SYSTEM_DEBUG_ROOT: &str = "/usr/lib/debug";

/// Where to look for separate debug files.
#[derive(Clone, Debug)]
pub struct DebugLookup {
    /// The debug roots, searched in order: `--debug-dir` folders, then `/usr/lib/debug`.
    pub roots: Vec<PathBuf>,
    /// The debuginfod cache and servers.
    pub debuginfod: Debuginfod,
}

impl Default for DebugLookup {
    /// `/usr/lib/debug` and debuginfod as the environment says.
    fn default() -> DebugLookup {
        DebugLookup::with_dirs(&[])
    }
}

impl DebugLookup {
    /// `dirs` (`--debug-dir`) first, then `/usr/lib/debug`; debuginfod as the environment says.
    pub fn with_dirs(dirs: &[PathBuf]) -> DebugLookup {
        let mut roots = dirs.to_vec();
        roots.push(PathBuf::from(SYSTEM_DEBUG_ROOT));
        DebugLookup {
            roots,
            debuginfod: Debuginfod::from_environment(),
        }
    }

    /// The function symbols of the separate debug file or MiniDebugInfo of the file at `path`
    /// (whose contents are `bytes`, which `links` points from), with where they came from;
    /// `None` when there is none.
    pub(super) fn symbols_for(
        &self,
        path: &Path,
        bytes: &[u8],
        links: &DebugLinks,
    ) -> Option<(SymbolSource, Vec<Symbol>)> {
        let build_id = links.build_id.as_deref();
        let mut candidates = Vec::new();
        if let Some(id) = build_id {
            let hex = hex(id);
            for root in &self.roots {
                candidates.push((
                    root.join(".build-id")
                        .join(&hex[..2])
                        .join(format!("{}.debug", &hex[2..])),
                    Check::BuildId,
                ));
            }
        }
        if let Some((name, crc)) = &links.debug_link {
            let folder = path.parent().unwrap_or(Path::new("/"));
            let mut places = vec![folder.join(name), folder.join(".debug").join(name)];
            let relative = folder.strip_prefix("/").unwrap_or(folder);
            places.extend(self.roots.iter().map(|root| root.join(relative).join(name)));
            // The file itself is not its own debug file.
            places.retain(|place| place != path);
            candidates.extend(places.into_iter().map(|place| (place, Check::Crc(*crc))));
        }
        for (candidate, check) in candidates {
            if let Some(symbols) = read_debug_file(&candidate, check, build_id) {
                return Some((SymbolSource::DebugFile(candidate), symbols));
            }
        }
        if let Some(id) = build_id {
            if let Some(candidate) = self.debuginfod.find(&hex(id), path) {
                if let Some(symbols) = read_debug_file(&candidate, Check::BuildId, Some(id)) {
                    return Some((SymbolSource::Debuginfod(candidate), symbols));
                }
            }
        }
        let compressed = bytes.get(links.mini_debug_info.clone()?)?;
        let symbols = mini_debug_info(path, compressed)?;
        Some((SymbolSource::MiniDebugInfo, symbols))
    }
}

/// What in a file points to its symbols elsewhere: read when the file is parsed.
#[derive(Clone, Debug, Default)]
pub(super) struct DebugLinks {
    pub build_id: Option<Vec<u8>>,
    /// The file name and CRC-32 of `.gnu_debuglink`.
    pub debug_link: Option<(String, u32)>,
    /// Where in the file `.gnu_debugdata` is.
    pub mini_debug_info: Option<std::ops::Range<usize>>,
}

impl DebugLinks {
    pub fn of(elf: &Elf, bytes: &[u8]) -> DebugLinks {
        let mini_debug_info = named_section(elf, ".gnu_debugdata")
            .filter(|s| section_bytes(bytes, s).is_some())
            .map(|s| s.sh_offset as usize..(s.sh_offset + s.sh_size) as usize);
        DebugLinks {
            build_id: build_id_in_sections(bytes, &elf.section_headers),
            debug_link: debug_link(elf, bytes),
            mini_debug_info,
        }
    }
}

/// Where the function symbols of a file came from, beside its `.dynsym` and PLT stubs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SymbolSource {
    /// The file's own `.symtab`.
    OwnSymtab,
    /// Nothing beside `.dynsym`: the file is stripped and no debug file was found.
    DynsymOnly,
    /// A separate debug file (build id, `.gnu_debuglink`).
    DebugFile(PathBuf),
    /// A debug file fetched from (or cached by) debuginfod.
    Debuginfod(PathBuf),
    /// The xz-compressed `.gnu_debugdata` section.
    MiniDebugInfo,
    /// A stripped Go program's own function table (`.gopclntab`), which its runtime needs.
    GoFunctionTable,
}

impl fmt::Display for SymbolSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SymbolSource::OwnSymtab => write!(f, ".symtab"),
            SymbolSource::DynsymOnly => write!(f, "no .symtab (stripped, no debug file found)"),
            SymbolSource::DebugFile(path) => write!(f, "debug file {}", path.display()),
            SymbolSource::Debuginfod(path) => write!(f, "debuginfod {}", path.display()),
            SymbolSource::MiniDebugInfo => write!(f, "MiniDebugInfo (.gnu_debugdata)"),
            SymbolSource::GoFunctionTable => write!(f, "Go's function table (.gopclntab)"),
        }
    }
}

/// What proves a candidate is the file's debug file.
#[derive(Clone, Copy, Debug)]
enum Check {
    /// Found by build id: the ids must match.
    BuildId,
    /// Found by `.gnu_debuglink`: the CRC-32 of the debug file must be this one, and the build
    /// ids must match where both have one.
    Crc(u32),
}

/// The `.symtab` function symbols of the debug file at `candidate`, if it is there and passes
/// `check` against the file's `build_id`; warns when it is there and does not.
fn read_debug_file(candidate: &Path, check: Check, build_id: Option<&[u8]>) -> Option<Vec<Symbol>> {
    let bytes = std::fs::read(candidate).ok()?;
    if let Check::Crc(expected) = check {
        let crc = crc32fast::hash(&bytes);
        if crc != expected {
            log::warn!(
                "{} is not the debug file it should be (CRC {crc:08x}, the debug link says \
                 {expected:08x}): its symbols are not used",
                candidate.display()
            );
            return None;
        }
    }
    let elf = Elf::parse_header(&bytes).ok()?;
    let sections = section_headers(&bytes, &elf)?;
    let their_id = build_id_in_sections(&bytes, &sections);
    if let (Some(ours), Some(theirs)) = (build_id, &their_id) {
        if ours != theirs.as_slice() {
            log::warn!(
                "{} does not match the file it is for (build id {}, the file's is {}): \
                 the file's own symbols are used",
                candidate.display(),
                hex(theirs),
                hex(ours)
            );
            return None;
        }
    }
    Some(symtab_functions(&bytes, &sections))
}

/// The function symbols of the `.symtab` of an ELF file (a debug file, whose code sections are
/// `NOBITS`, and whose dynamic section goblin should not follow).
pub(super) fn symtab_functions(bytes: &[u8], sections: &[SectionHeader]) -> Vec<Symbol> {
    let ctx = goblin::container::Ctx::new(
        goblin::container::Container::Big,
        goblin::container::Endian::Little,
    );
    let Some(symtab) = sections.iter().find(|s| s.sh_type == SHT_SYMTAB) else {
        return Vec::new();
    };
    let Some(strings) = sections.get(symtab.sh_link as usize) else {
        return Vec::new();
    };
    let count = (symtab.sh_size / symtab.sh_entsize.max(1)) as usize;
    let Ok(syms) = Symtab::parse(bytes, symtab.sh_offset as usize, count, ctx) else {
        return Vec::new();
    };
    let Ok(strtab) = Strtab::parse(
        bytes,
        strings.sh_offset as usize,
        strings.sh_size as usize,
        0,
    ) else {
        return Vec::new();
    };
    symbols::table_functions(&syms, &strtab, false)
}

fn section_headers(
    bytes: &[u8],
    header: &goblin::elf::header::Header,
) -> Option<Vec<SectionHeader>> {
    let ctx = goblin::container::Ctx::new(
        goblin::container::Container::Big,
        goblin::container::Endian::Little,
    );
    SectionHeader::parse(bytes, header.e_shoff as usize, header.e_shnum as usize, ctx).ok()
}

const NT_GNU_BUILD_ID: u32 = 3;

/// The GNU build id in the `SHT_NOTE` sections among `sections`.
fn build_id_in_sections(bytes: &[u8], sections: &[SectionHeader]) -> Option<Vec<u8>> {
    sections
        .iter()
        .filter(|s| s.sh_type == goblin::elf::section_header::SHT_NOTE)
        .filter_map(|s| section_bytes(bytes, s))
        .find_map(|notes| note_desc(notes, NT_GNU_BUILD_ID, b"GNU\0"))
}

/// The descriptor of the first note of type `kind` and name `name` in `notes`.
fn note_desc(mut notes: &[u8], kind: u32, name: &[u8]) -> Option<Vec<u8>> {
    let word = |b: &[u8], at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    let align = |n: usize| (n + 3) & !3;
    while notes.len() >= 12 {
        let name_size = word(notes, 0)? as usize;
        let desc_size = word(notes, 4)? as usize;
        let note_type = word(notes, 8)?;
        let name_at = 12;
        let desc_at = name_at + align(name_size);
        let end = desc_at + align(desc_size);
        if note_type == kind && notes.get(name_at..name_at + name_size) == Some(name) {
            return notes.get(desc_at..desc_at + desc_size).map(<[u8]>::to_vec);
        }
        notes = notes.get(end..)?;
    }
    None
}

/// The file name and CRC-32 of the file's `.gnu_debuglink`.
fn debug_link(elf: &Elf, bytes: &[u8]) -> Option<(String, u32)> {
    let section = named_section(elf, ".gnu_debuglink")?;
    let data = section_bytes(bytes, section)?;
    let end = data.iter().position(|&b| b == 0)?;
    let name = std::str::from_utf8(&data[..end]).ok()?.to_owned();
    let crc_at = (end + 1 + 3) & !3;
    let crc = u32::from_le_bytes(data.get(crc_at..crc_at + 4)?.try_into().ok()?);
    // A link is a file name, never a path out of the folders searched.
    (!name.is_empty() && !name.contains('/')).then_some((name, crc))
}

/// The function symbols of the ELF file xz-compressed in `compressed` (`.gnu_debugdata`);
/// warns when it cannot be read.
fn mini_debug_info(path: &Path, compressed: &[u8]) -> Option<Vec<Symbol>> {
    let mut inner = Vec::new();
    let mut reader = std::io::BufReader::new(compressed);
    if let Err(error) = lzma_rs::xz_decompress(&mut reader, &mut inner) {
        log::warn!(
            "the MiniDebugInfo (.gnu_debugdata) of {} cannot be decompressed ({error}): \
             its symbols are not used",
            path.display()
        );
        return None;
    }
    let header = Elf::parse_header(&inner).ok()?;
    let sections = section_headers(&inner, &header)?;
    Some(symtab_functions(&inner, &sections))
}

fn named_section<'a>(elf: &'a Elf, name: &str) -> Option<&'a SectionHeader> {
    elf.section_headers
        .iter()
        .find(|s| elf.shdr_strtab.get_at(s.sh_name) == Some(name))
}

fn section_bytes<'a>(bytes: &'a [u8], section: &SectionHeader) -> Option<&'a [u8]> {
    if section.sh_type == goblin::elf::section_header::SHT_NOBITS {
        return None;
    }
    let start = usize::try_from(section.sh_offset).ok()?;
    let size = usize::try_from(section.sh_size).ok()?;
    bytes.get(start..start.checked_add(size)?)
}

/// Lower-case hexadecimal, as build-id paths spell it.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend((name.len() as u32).to_le_bytes());
        bytes.extend((desc.len() as u32).to_le_bytes());
        bytes.extend(kind.to_le_bytes());
        for part in [name, desc] {
            bytes.extend(part);
            bytes.resize(bytes.len().next_multiple_of(4), 0);
        }
        bytes
    }

    #[test]
    fn the_build_id_is_the_gnu_note_of_its_type() {
        let mut notes = note(b"GNU\0", 1, &[0; 16]); // NT_GNU_ABI_TAG
        notes.extend(note(b"Go\0\0", NT_GNU_BUILD_ID, b"not this"));
        notes.extend(note(b"GNU\0", NT_GNU_BUILD_ID, &[0x93, 0xac, 0x61]));
        let id = note_desc(&notes, NT_GNU_BUILD_ID, b"GNU\0").unwrap();
        assert_eq!(hex(&id), "93ac61");
        assert_eq!(note_desc(&notes[..20], NT_GNU_BUILD_ID, b"GNU\0"), None);
    }
}
