//! Which code of a Go program is Go's. A cgo program also holds C functions (cgo's
//! `threadentry`, `x_cgo_init`, the C code it calls), placed among Go's in `.text`, and only in
//! Go's code does r14 hold the running goroutine's `g`. The runtime's own table of functions,
//! `.gopclntab` (which it needs to run, so even a stripped program keeps it), lists them all,
//! but only a Go or Go-assembly function has a table of its stack pointer changes there.

use std::ops::Range;

use super::prototypes::ElfSections;
use super::ElfFile;

/// The section of Go's function table.
const PCLNTAB_SECTION: &str = ".gopclntab";

/// The magic numbers that open the table in the layouts read here: Go 1.18–1.19, and 1.20 on
/// (the same layout). Older layouts are not read.
const PCLNTAB_MAGICS: [u32; 2] = [0xffff_fff0, 0xffff_fff1];

/// Bytes of the header before its `uintptr`-sized words: magic, two pads, the instruction size
/// quantum and the pointer size.
const HEADER_START: usize = 8;

/// The words of the header, in order, of which these are read.
const NFUNC_WORD: usize = 0;
const TEXT_START_WORD: usize = 2;
const FUNCTAB_OFFSET_WORD: usize = 7;

/// Where a function's details hold the offset of its table of stack pointer changes, which every
/// Go and Go-assembly function has and a C function (the linker lists them too) lacks: after
/// its entry's and name's offsets, its arguments' size and `deferreturn`, 4 bytes each.
const PCSP_AT: usize = 16;

impl ElfFile {
    /// The file offsets of the program's Go functions, as sorted ranges, each from a function's
    /// entry to the next function's. `None` where the table is missing or of a layout not read
    /// here (said under `--debug`).
    pub fn go_code(&self) -> Option<Vec<Range<u64>>> {
        let table = ElfSections::parse(&self.bytes)
            .ok()
            .and_then(|sections| sections.get(PCLNTAB_SECTION));
        let code = table.and_then(go_functions).map(|functions| {
            let offset = |address: u64| self.segments.file_offset(address);
            (functions.into_iter())
                .filter_map(|range| Some(offset(range.start)?..offset(range.end - 1)? + 1))
                .collect()
        });
        if code.is_none() {
            log::debug!(
                "{}: no Go function table read: its C functions count as Go's",
                self.path().display()
            );
        }
        code
    }
}

/// The address ranges of the Go functions of Go's function table `table`, sorted: each from its
/// entry to the next function's.
fn go_functions(table: &[u8]) -> Option<Vec<Range<u64>>> {
    let u32_at = |at: usize| {
        let bytes = table.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes(bytes.try_into().ok()?))
    };
    if !PCLNTAB_MAGICS.contains(&u32_at(0)?) || *table.get(7)? != 8 {
        return None;
    }
    let word = |index: usize| {
        let at = HEADER_START + index * 8;
        Some(u64::from_le_bytes(table.get(at..at + 8)?.try_into().ok()?))
    };
    let functions = usize::try_from(word(NFUNC_WORD)?).ok()?;
    let text_start = word(TEXT_START_WORD)?;
    let functab = usize::try_from(word(FUNCTAB_OFFSET_WORD)?).ok()?;
    // `functions + 1` pairs of (entry's offset from the text's start, offset of the function's
    // details from the table's): the last entry is the end of the last function.
    let pair = |index: usize| {
        let at = functab.checked_add(index.checked_mul(8)?)?;
        Some((text_start + u64::from(u32_at(at)?), u32_at(at + 4)?))
    };
    let entries = (0..=functions).map(pair).collect::<Option<Vec<_>>>()?;
    if entries.windows(2).any(|pair| pair[0].0 > pair[1].0) {
        return None;
    }
    let mut code = Vec::new();
    for window in entries.windows(2) {
        let ((entry, details), (next, _)) = (window[0], window[1]);
        let pcsp = u32_at(
            functab
                .checked_add(details as usize)?
                .checked_add(PCSP_AT)?,
        )?;
        if pcsp != 0 && entry < next {
            code.push(entry..next);
        }
    }
    Some(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of the 1.18 layout: header, then the function table at its offset, then each
    /// function's details (its stack pointer table's offset, `pcsp`, alone set).
    fn table(functions: &[(u32, u32)], end: u32) -> Vec<u8> {
        let mut bytes = 0xffff_fff0u32.to_le_bytes().to_vec();
        bytes.extend([0, 0, 1, 8]);
        let functab = HEADER_START + 8 * 8;
        let count = functions.len() as u64;
        let words = [count, 0, 0x40_1000, 0, 0, 0, 0, functab as u64];
        for word in words {
            bytes.extend(word.to_le_bytes());
        }
        let details_at = |index: usize| ((functions.len() + 1) * 8 + index * 32) as u32;
        for (index, &(entry, _)) in functions.iter().enumerate() {
            bytes.extend(entry.to_le_bytes());
            bytes.extend(details_at(index).to_le_bytes());
        }
        bytes.extend(end.to_le_bytes());
        bytes.extend(0u32.to_le_bytes());
        for &(entry, pcsp) in functions {
            let mut details = [0u8; 32];
            details[..4].copy_from_slice(&entry.to_le_bytes());
            details[PCSP_AT..PCSP_AT + 4].copy_from_slice(&pcsp.to_le_bytes());
            bytes.extend(details);
        }
        bytes
    }

    /// C functions (no stack pointer table) are left out; each Go function runs to the next.
    #[test]
    fn go_functions_are_those_with_a_stack_pointer_table() {
        let table = table(&[(0x20, 0), (0x80, 7), (0x100, 9), (0x180, 0)], 0x200);
        assert_eq!(
            go_functions(&table),
            Some(vec![0x40_1080..0x40_1100, 0x40_1100..0x40_1180])
        );
    }

    #[test]
    fn other_layouts_and_cut_tables_are_not_read() {
        let mut old = table(&[(0x20, 1)], 0x80);
        old[..4].copy_from_slice(&0xffff_fffau32.to_le_bytes());
        assert_eq!(go_functions(&old), None);
        let whole = table(&[(0x20, 1), (0x80, 1)], 0x100);
        assert_eq!(go_functions(&whole[..whole.len() - 40]), None);
        assert_eq!(go_functions(&table(&[(0x80, 1), (0x20, 1)], 0x100)), None);
    }
}
