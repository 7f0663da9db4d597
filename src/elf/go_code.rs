//! Which code of a Go program is Go's. A cgo program also holds C functions (cgo's
//! `threadentry`, `x_cgo_init`, the C code it calls), placed among Go's in `.text`, and only in
//! Go's code does r14 hold the running goroutine's `g`. The runtime's own table of functions,
//! `.gopclntab` (which it needs to run, so even a stripped program keeps it), lists them all,
//! but only a Go or Go-assembly function has a table of its stack pointer changes there.

use std::ops::Range;

use goblin::elf::sym::{STB_GLOBAL, STT_FUNC};

use super::prototypes::ElfSections;
use super::symbols::Symbol;
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
const FUNCNAME_OFFSET_WORD: usize = 3;
const FUNCTAB_OFFSET_WORD: usize = 7;

/// Where a function's details hold the offset of its name in the table of names.
const NAME_AT: usize = 4;
/// Where a function's details hold the offset of its table of stack pointer changes, which every
/// Go and Go-assembly function has and a C function (the linker lists them too) lacks: after
/// its entry's and name's offsets, its arguments' size and `deferreturn`, 4 bytes each.
const PCSP_AT: usize = 16;

impl ElfFile {
    /// The file offsets of the program's Go functions, as sorted ranges, each from a function's
    /// entry to the next function's. `None` where the table is missing or of a layout not read
    /// here (said under `--debug`).
    pub fn go_code(&self) -> Option<Vec<Range<u64>>> {
        let code = self.go_table().and_then(go_functions).map(|functions| {
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

    /// Every function of Go's table as a symbol (Go's, Go assembly's and cgo's C functions),
    /// each from its entry to the next function's: the names a Go program stripped of `.symtab`
    /// still holds. `None` where the table is missing or not read here.
    pub(super) fn go_table_symbols(&self) -> Option<Vec<Symbol>> {
        let table = GoTable::parse(self.go_table()?)?;
        let symbols = (table.functions())
            .map(|(code, details)| {
                Some(Symbol {
                    name: table.name(details)?.to_owned(),
                    kind: STT_FUNC,
                    binding: STB_GLOBAL,
                    defined: true,
                    address: code.start,
                    size: code.end - code.start,
                    dynamic: false,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(symbols)
    }

    fn go_table(&self) -> Option<&[u8]> {
        ElfSections::parse(&self.bytes)
            .ok()
            .and_then(|sections| sections.get(PCLNTAB_SECTION))
    }
}

/// The address ranges of the Go functions of Go's function table `table`, sorted: each from its
/// entry to the next function's.
fn go_functions(table: &[u8]) -> Option<Vec<Range<u64>>> {
    let table = GoTable::parse(table)?;
    let mut code = Vec::new();
    for (range, details) in table.functions() {
        if table.u32_at(table.functab.checked_add(details)?.checked_add(PCSP_AT)?)? != 0 {
            code.push(range);
        }
    }
    Some(code)
}

/// Go's function table, its header read and its entries checked in order.
struct GoTable<'a> {
    table: &'a [u8],
    /// Where the function table starts, from which each function's details are found.
    functab: usize,
    /// Where the functions' names start.
    funcnames: usize,
    /// `functions + 1` pairs of (entry's address, offset of the function's details from the
    /// function table's start): the last entry is the end of the last function.
    entries: Vec<(u64, usize)>,
}

impl<'a> GoTable<'a> {
    fn parse(table: &'a [u8]) -> Option<GoTable<'a>> {
        let mut read = GoTable {
            table,
            functab: 0,
            funcnames: 0,
            entries: Vec::new(),
        };
        if !PCLNTAB_MAGICS.contains(&read.u32_at(0)?) || *table.get(7)? != 8 {
            return None;
        }
        let word = |index: usize| {
            let at = HEADER_START + index * 8;
            Some(u64::from_le_bytes(table.get(at..at + 8)?.try_into().ok()?))
        };
        let functions = usize::try_from(word(NFUNC_WORD)?).ok()?;
        let text_start = word(TEXT_START_WORD)?;
        read.funcnames = usize::try_from(word(FUNCNAME_OFFSET_WORD)?).ok()?;
        read.functab = usize::try_from(word(FUNCTAB_OFFSET_WORD)?).ok()?;
        let pair = |index: usize| {
            let at = read.functab.checked_add(index.checked_mul(8)?)?;
            let details = usize::try_from(read.u32_at(at + 4)?).ok()?;
            Some((text_start + u64::from(read.u32_at(at)?), details))
        };
        let entries = (0..=functions).map(pair).collect::<Option<Vec<_>>>()?;
        if entries.windows(2).any(|pair| pair[0].0 > pair[1].0) {
            return None;
        }
        read.entries = entries;
        Some(read)
    }

    fn u32_at(&self, at: usize) -> Option<u32> {
        let bytes = self.table.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes(bytes.try_into().ok()?))
    }

    /// Each function's code (from its entry to the next function's) and its details' offset;
    /// functions of no size left out.
    fn functions(&self) -> impl Iterator<Item = (Range<u64>, usize)> + '_ {
        (self.entries.windows(2))
            .filter(|pair| pair[0].0 < pair[1].0)
            .map(|pair| (pair[0].0..pair[1].0, pair[0].1))
    }

    /// The name of the function whose details are at `details`.
    fn name(&self, details: usize) -> Option<&'a str> {
        let at = self.functab.checked_add(details)?.checked_add(NAME_AT)?;
        let start = self
            .funcnames
            .checked_add(usize::try_from(self.u32_at(at)?).ok()?)?;
        let rest = self.table.get(start..)?;
        let name = &rest[..rest.iter().position(|&b| b == 0)?];
        std::str::from_utf8(name)
            .ok()
            .filter(|name| !name.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of the 1.18 layout: header, then the function table at its offset, then each
    /// function's details (its name's offset and its stack pointer table's offset, `pcsp`), then
    /// the names (`f0`, `f1`…).
    fn table(functions: &[(u32, u32)], end: u32) -> Vec<u8> {
        let mut bytes = 0xffff_fff0u32.to_le_bytes().to_vec();
        bytes.extend([0, 0, 1, 8]);
        let functab = HEADER_START + 8 * 8;
        let count = functions.len() as u64;
        let details_at = |index: usize| ((functions.len() + 1) * 8 + index * 32) as u32;
        let funcnames = functab + details_at(functions.len()) as usize;
        let words = [
            count,
            0,
            0x40_1000,
            funcnames as u64,
            0,
            0,
            0,
            functab as u64,
        ];
        for word in words {
            bytes.extend(word.to_le_bytes());
        }
        for (index, &(entry, _)) in functions.iter().enumerate() {
            bytes.extend(entry.to_le_bytes());
            bytes.extend(details_at(index).to_le_bytes());
        }
        bytes.extend(end.to_le_bytes());
        bytes.extend(0u32.to_le_bytes());
        let mut names = Vec::new();
        for &(entry, pcsp) in functions {
            let mut details = [0u8; 32];
            details[..4].copy_from_slice(&entry.to_le_bytes());
            details[NAME_AT..NAME_AT + 4].copy_from_slice(&(names.len() as u32).to_le_bytes());
            details[PCSP_AT..PCSP_AT + 4].copy_from_slice(&pcsp.to_le_bytes());
            bytes.extend(details);
            names.extend(format!("f{}\0", names.len() / 3).bytes());
        }
        bytes.extend(names);
        bytes
    }

    /// Every function is named, C functions too, each running to the next.
    #[test]
    fn each_function_is_named_from_the_table_of_names() {
        let table = table(&[(0x20, 0), (0x80, 7), (0x100, 9)], 0x200);
        let read = GoTable::parse(&table).unwrap();
        let named: Vec<(&str, Range<u64>)> = (read.functions())
            .map(|(code, details)| (read.name(details).unwrap(), code))
            .collect();
        assert_eq!(
            named,
            [
                ("f0", 0x40_1020..0x40_1080),
                ("f1", 0x40_1080..0x40_1100),
                ("f2", 0x40_1100..0x40_1200)
            ]
        );
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
