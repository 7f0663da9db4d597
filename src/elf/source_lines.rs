//! The source line of each function's entry, from the DWARF line tables (`.debug_line`), for
//! `--srcline`.
//!
//! A function's line is the line-table row that covers its entry address: what
//! `addr2line -e FILE ADDRESS` prints, and what gdb's `info line *ADDRESS` and perf show. It is
//! read from the line table rather than from the `DW_AT_decl_file`/`DW_AT_decl_line` of its
//! `DW_TAG_subprogram` because the line table
//! - names the code that runs: a C++ method defined outside its class declares its file and
//!   line through `DW_AT_specification`, in the header of the class, while its row is its
//!   definition's;
//! - covers every function with line information, also those whose DIE is missing
//!   (assembly with `-g`) or only reachable through an abstract origin (out-of-line copies of
//!   inlined functions, GCC's `.isra` and `.constprop` clones);
//! - needs only `.debug_line` and the units' root DIEs, so it is cheap (see the README for
//!   figures), and also works on `-gline-tables-only` builds (Rust's `debug = 1`).
//!
//! Where several rows share an address, the last one counts, as in binutils. Rows of line 0
//! (code of no line) give nothing. Sequences that start at address 0 belong to functions the
//! linker discarded (GNU ld resolves their addresses to 0; lld to a tombstone near `u64::MAX`):
//! they are skipped, as no function of an executable or shared library sits at address 0.

use std::borrow::Cow;
use std::collections::HashMap;
use std::convert::Infallible;

use gimli::{EndianSlice, LittleEndian};

use super::prototypes::{DwarfError, ElfSections};
use crate::table::SourceLine;

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// The sections the line tables need: the units' root DIEs (their line table, compilation
/// directory and string bases), the line tables, and the strings they name. The others (types,
/// locations, macros) are not loaded, so not decompressed.
const SECTIONS: &[&str] = &[
    ".debug_info",
    ".debug_abbrev",
    ".debug_line",
    ".debug_line_str",
    ".debug_str",
    ".debug_str_offsets",
    ".debug_addr",
];

/// The source lines of the entry addresses `addresses` (virtual addresses, as the symbols give
/// them) in the ELF file `elf_bytes`; an address without a line-table row is left out. A file
/// without `.debug_line` gives an empty map. Sections compressed with zlib (Debian's debug
/// files) are decompressed first: only those the line tables need (see [`SECTIONS`]).
pub fn read_source_lines(
    elf_bytes: &[u8],
    addresses: &[u64],
) -> Result<HashMap<u64, SourceLine>, DwarfError> {
    let sections = ElfSections::parse(elf_bytes)?;
    let loaded: Vec<(&str, Cow<[u8]>)> = SECTIONS
        .iter()
        .filter_map(|&name| Some((name, sections.decompressed(name)?)))
        .collect();
    let section = |name: &str| {
        let found = loaded.iter().find(|(n, _)| *n == name);
        found.map(|(_, data)| data.as_ref())
    };
    if section(".debug_line").is_none() || section(".debug_info").is_none() {
        return Ok(HashMap::new());
    }
    let dwarf = gimli::Dwarf::load(|id| {
        let data = section(id.name()).unwrap_or_default();
        Ok::<_, Infallible>(EndianSlice::new(data, LittleEndian))
    })
    .unwrap_or_else(|never: Infallible| match never {});
    let mut wanted = addresses.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    let mut lines = HashMap::new();
    let mut headers = dwarf.units();
    let mut unreadable = 0;
    loop {
        let header = match headers.next() {
            Ok(Some(header)) => header,
            Ok(None) => break,
            Err(error) => {
                // The units after a malformed header cannot be found: keep what was read.
                log::debug!("the DWARF units cannot be read past an error ({error})");
                unreadable += 1;
                break;
            }
        };
        let read = dwarf
            .unit(header)
            .and_then(|unit| unit_lines(&dwarf, &unit, &wanted, &mut lines));
        if let Err(error) = read {
            log::debug!("a DWARF unit's line table cannot be read ({error}): skipped");
            unreadable += 1;
        }
    }
    if unreadable > 0 {
        log::debug!("{unreadable} DWARF units' line tables could not be read: left out");
    }
    Ok(lines)
}

/// Adds to `lines` the rows of `unit`'s line table that cover addresses of `wanted` (sorted).
fn unit_lines(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &gimli::Unit<Slice<'_>>,
    wanted: &[u64],
    lines: &mut HashMap<u64, SourceLine>,
) -> gimli::Result<()> {
    let Some(program) = unit.line_program.clone() else {
        return Ok(());
    };
    let comp_dir = unit.comp_dir.map(|dir| dir.to_string_lossy().into_owned());
    // Paths by file index, made once per unit.
    let mut paths: HashMap<u64, Option<String>> = HashMap::new();
    let mut rows = program.rows();
    // The row in force: its address, file index and line; None before a sequence's first row.
    let mut current: Option<(u64, u64, u32)> = None;
    let mut discarded_sequence = false;
    while let Some((header, row)) = rows.next_row()? {
        let address = row.address();
        if let Some((start, file, line)) = current {
            if address > start && !discarded_sequence {
                let first = wanted.partition_point(|&a| a < start);
                for &covered in wanted[first..].iter().take_while(|&&a| a < address) {
                    let path = paths
                        .entry(file)
                        .or_insert_with(|| file_path(dwarf, unit, header, file, &comp_dir));
                    if let (Some(path), true) = (path, line > 0) {
                        lines.insert(
                            covered,
                            SourceLine {
                                file: path.clone(),
                                line,
                            },
                        );
                    }
                }
            }
        }
        if row.end_sequence() {
            current = None;
            continue;
        }
        if current.is_none() {
            discarded_sequence = address == 0 || address >= u64::MAX - 1;
        }
        let line = row.line().map_or(0, |line| line.get());
        current = Some((address, row.file_index(), u32::try_from(line).unwrap_or(0)));
    }
    Ok(())
}

/// The path of file `index` of a line program: relative to the compilation directory where it
/// lies under it, absolute otherwise. None where the program does not name the file.
fn file_path(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &gimli::Unit<Slice<'_>>,
    header: &gimli::LineProgramHeader<Slice<'_>>,
    index: u64,
    comp_dir: &Option<String>,
) -> Option<String> {
    let file = header.file(index)?;
    let string = |value| {
        let string = dwarf.attr_string(unit, value).ok()?;
        Some(string.to_string_lossy().into_owned())
    };
    let name = string(file.path_name())?;
    let mut path = match file.directory(header).and_then(string) {
        Some(directory) if !name.starts_with('/') && !directory.is_empty() => {
            format!("{}/{name}", directory.trim_end_matches('/'))
        }
        _ => name,
    };
    if let Some(comp_dir) = comp_dir {
        let under = path
            .strip_prefix(comp_dir.trim_end_matches('/'))
            .and_then(|rest| rest.strip_prefix('/'));
        if let Some(relative) = under {
            path = relative.to_owned();
        }
    }
    while let Some(rest) = path.strip_prefix("./") {
        path = rest.to_owned();
    }
    Some(path)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use tempfile::TempDir;

    use super::*;
    use crate::elf::tests::{compile, run};

    const FIXTURE_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/elf/testdata/fixture.c");
    const FIXTURE_CPP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/elf/testdata/fixture.cpp");

    /// The entry addresses of the functions `nm` lists as defined in `file`'s code.
    fn function_addresses(file: &Path) -> Vec<u64> {
        let listing = run("nm", &["--defined-only", file.to_str().unwrap()]);
        let mut addresses: Vec<u64> = listing
            .lines()
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                let address = u64::from_str_radix(fields.next()?, 16).ok()?;
                let kind = fields.next()?;
                matches!(kind, "T" | "t" | "W" | "w").then_some(address)
            })
            .collect();
        addresses.sort_unstable();
        addresses.dedup();
        addresses
    }

    /// What `TOOL -e FILE ADDRESS…` (`addr2line`, `llvm-addr2line`) prints for each address, as `path:line`, without the
    /// discriminator; None where it knows no line (`??:0`, `??:?`, `path:0`).
    fn addr2line(tool: &str, file: &Path, addresses: &[u64]) -> BTreeMap<u64, Option<String>> {
        let mut args = vec!["-e".to_owned(), file.to_str().unwrap().to_owned()];
        args.extend(addresses.iter().map(|a| format!("{a:#x}")));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = run(tool, &args);
        let lines: Vec<&str> = output.lines().collect();
        assert_eq!(lines.len(), addresses.len(), "{output}");
        let known = |line: &str| {
            let line = line.split(" (discriminator").next().unwrap_or(line);
            let unknown = line.starts_with("??:") || line.ends_with(":0") || line.ends_with(":?");
            (!unknown).then(|| line.to_owned())
        };
        addresses
            .iter()
            .zip(lines)
            .map(|(&address, line)| (address, known(line)))
            .collect()
    }

    /// Checks the source line of every function of `file` against addr2line's. The fixtures are
    /// compiled in the test's working directory, their compilation directory: a relative path
    /// is relative to it.
    ///
    /// binutils 2.40 names the wrong file for some C++ inline functions emitted out of line
    /// (`std::ctype<char>::do_widen` at `locale_facets.h:1092` is `fixture.cpp:1092` to it,
    /// a file of 42 lines; `readelf --debug-dump=decodedline` shows the header): where its file
    /// differs, the line must still be its, and the file must be `llvm-addr2line`'s.
    fn check_against_addr2line(file: &Path) -> usize {
        let addresses = function_addresses(file);
        let expected = addr2line("addr2line", file, &addresses);
        let bytes = std::fs::read(file).unwrap();
        let found = read_source_lines(&bytes, &addresses).unwrap();
        let comp_dir = std::env::current_dir().unwrap();
        let mut checked = 0;
        for (address, expected) in expected {
            let found = found.get(&address).map(|source| {
                let path = match source.file.starts_with('/') {
                    true => source.file.clone(),
                    false => format!("{}/{}", comp_dir.display(), source.file),
                };
                format!("{path}:{}", source.line)
            });
            let line = |text: &Option<String>| {
                let text = text.as_deref()?;
                Some(text.rsplit_once(':')?.1.to_owned())
            };
            let at = format!("{} at {address:#x}", file.display());
            assert_eq!(line(&found), line(&expected), "{at}");
            if found != expected {
                let llvm = addr2line("llvm-addr2line", file, &[address]);
                assert_eq!(found, llvm[&address], "{at}: binutils says {expected:?}");
            }
            checked += usize::from(found.is_some());
        }
        checked
    }

    #[test]
    fn each_function_has_the_line_addr2line_gives_its_entry() {
        let dir = TempDir::new().unwrap();
        let builds: &[(&str, &str, &str, &[&str])] = &[
            ("cc", FIXTURE_C, "c-o2", &[]),
            ("cc", FIXTURE_C, "c-o0-no-pie", &["-O0", "-no-pie"]),
            ("cc", FIXTURE_C, "c-dwarf4", &["-gdwarf-4"]),
            ("c++", FIXTURE_CPP, "cpp-o2", &[]),
        ];
        for &(compiler, source, name, flags) in builds {
            let file = compile(&dir, compiler, source, name, flags);
            let checked = check_against_addr2line(&file);
            assert!(checked >= 5, "{name}: only {checked} functions have a line");
        }
    }

    #[test]
    fn paths_under_the_compilation_directory_are_relative() {
        let dir = TempDir::new().unwrap();
        let file = compile(&dir, "cc", FIXTURE_C, "relative", &[]);
        let bytes = std::fs::read(&file).unwrap();
        let found = read_source_lines(&bytes, &function_addresses(&file)).unwrap();
        assert!(
            found
                .values()
                .any(|source| source.file == "src/elf/testdata/fixture.c"),
            "{found:?}"
        );
    }

    #[test]
    fn a_stripped_file_takes_its_lines_from_its_debug_file() {
        let dir = TempDir::new().unwrap();
        let program = compile(&dir, "cc", FIXTURE_C, "stripped", &[]);
        let addresses = function_addresses(&program);
        let expected = read_source_lines(&std::fs::read(&program).unwrap(), &addresses).unwrap();
        crate::elf::tests::split_off_debug_file(&dir, &program);

        let mut file = crate::elf::ElfFile::open(&program).unwrap();
        assert_eq!(file.source_lines(&addresses), HashMap::new());
        file.load_debug_symbols(&crate::elf::DebugLookup::with_dirs(&[]), &program);
        assert_eq!(file.source_lines(&addresses), expected);
        assert!(expected.len() >= 5, "{expected:?}");
    }

    #[test]
    fn a_file_without_dwarf_has_no_lines() {
        let dir = TempDir::new().unwrap();
        let file = compile(&dir, "cc", FIXTURE_C, "nodwarf", &["-g0"]);
        let bytes = std::fs::read(&file).unwrap();
        let lines = read_source_lines(&bytes, &function_addresses(&file)).unwrap();
        assert_eq!(lines, HashMap::new());
    }
}
