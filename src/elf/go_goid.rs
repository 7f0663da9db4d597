//! Where a Go program keeps a goroutine's id: the offset of `goid` in the runtime's `g`, from the
//! program's DWARF (the Go linker writes it unless built with `-ldflags=-w`). With it, the BPF
//! programs name each goroutine by the id Go itself gives it (`goroutine 7` in a panic's trace),
//! rather than by a number of utrace's own. The offset moves between Go versions (152 in Go 1.19),
//! so it is read, never assumed.

use std::convert::Infallible;

use gimli::{AttributeValue, EndianSlice, LittleEndian};

use super::prototypes::ElfSections;
use super::ElfFile;

/// The runtime's goroutine structure, as DWARF names it.
const GOROUTINE_TYPE: &str = "runtime.g";
/// Its member that holds the goroutine's id.
const GOID_MEMBER: &str = "goid";

impl ElfFile {
    /// The offset of `goid` in the runtime's `g`; `None` where the file's DWARF does not say
    /// (stripped of it, or unreadable: said under `--debug`).
    pub fn go_goid_offset(&self) -> Option<u32> {
        match goid_offset(&self.bytes) {
            Ok(offset) => offset,
            Err(error) => {
                log::debug!(
                    "the goroutine ids of {} are not read: {error}",
                    self.path().display()
                );
                None
            }
        }
    }
}

/// The offset of `runtime.g`'s `goid` member in the DWARF of the ELF file `bytes`.
fn goid_offset(bytes: &[u8]) -> Result<Option<u32>, gimli::Error> {
    let Ok(sections) = ElfSections::parse(bytes) else {
        return Ok(None);
    };
    let loaded: Vec<_> = [".debug_info", ".debug_abbrev", ".debug_str"]
        .into_iter()
        .map(|name| sections.decompressed(name).unwrap_or_default())
        .collect();
    if loaded[0].is_empty() {
        return Ok(None);
    }
    let dwarf = gimli::Dwarf::load(|id| {
        let data = match id.name() {
            ".debug_info" => &loaded[0],
            ".debug_abbrev" => &loaded[1],
            ".debug_str" => &loaded[2],
            _ => &[][..],
        };
        Ok::<_, Infallible>(EndianSlice::new(data, LittleEndian))
    })
    .unwrap_or_else(|never: Infallible| match never {});
    let mut units = dwarf.units();
    while let Some(header) = units.next()? {
        // Not `dwarf.unit()`, which would read the unit's line program too.
        let abbreviations = dwarf.abbreviations(&header)?;
        let mut tree = header.entries_tree(&abbreviations, None)?;
        let mut children = tree.root()?.children();
        while let Some(node) = children.next()? {
            let entry = node.entry();
            if entry.tag() != gimli::DW_TAG_structure_type || !names(&dwarf, entry, GOROUTINE_TYPE)?
            {
                continue;
            }
            let mut members = node.children();
            while let Some(member) = members.next()? {
                let entry = member.entry();
                if entry.tag() == gimli::DW_TAG_member && names(&dwarf, entry, GOID_MEMBER)? {
                    let location = entry.attr_value(gimli::DW_AT_data_member_location)?;
                    return Ok(match location {
                        Some(AttributeValue::Udata(offset)) => u32::try_from(offset).ok(),
                        Some(AttributeValue::Data1(offset)) => Some(offset.into()),
                        Some(AttributeValue::Data2(offset)) => Some(offset.into()),
                        Some(AttributeValue::Data4(offset)) => Some(offset),
                        _ => None,
                    });
                }
            }
            return Ok(None);
        }
    }
    Ok(None)
}

/// Whether the DWARF `entry` is named `name` (inline, as Go writes names, or in `.debug_str`).
fn names(
    dwarf: &gimli::Dwarf<EndianSlice<'_, LittleEndian>>,
    entry: &gimli::DebuggingInformationEntry<'_, '_, EndianSlice<'_, LittleEndian>>,
    name: &str,
) -> Result<bool, gimli::Error> {
    let found = match entry.attr_value(gimli::DW_AT_name)? {
        Some(AttributeValue::String(found)) => found,
        Some(AttributeValue::DebugStrRef(offset)) => dwarf.debug_str.get_str(offset)?,
        _ => return Ok(false),
    };
    Ok(found.slice() == name.as_bytes())
}
