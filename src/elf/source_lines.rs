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

use std::collections::HashMap;
use std::convert::Infallible;

use gimli::{EndianSlice, LittleEndian};

use super::prototypes::{DwarfError, ElfSections};
use crate::table::SourceLine;

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// The source lines of the entry addresses `addresses` (virtual addresses, as the symbols give
/// them) in the ELF file `elf_bytes`; an address without a line-table row is left out. A file
/// without `.debug_line` gives an empty map; so does one whose DWARF is compressed
/// (`SHF_COMPRESSED`), which is not decompressed.
pub fn read_source_lines(
    elf_bytes: &[u8],
    addresses: &[u64],
) -> Result<HashMap<u64, SourceLine>, DwarfError> {
    let sections = ElfSections::parse(elf_bytes)?;
    if sections.get(".debug_line").is_none() || sections.get(".debug_info").is_none() {
        return Ok(HashMap::new());
    }
    if let Some(name) = sections.compressed_debug_section() {
        log::debug!("{name} is compressed: the source lines of the file are not read");
        return Ok(HashMap::new());
    }
    let dwarf = gimli::Dwarf::load(|id| {
        let data = sections.get(id.name()).unwrap_or_default();
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
