//! Virtual addresses to file offsets, through the `PT_LOAD` segments.

use goblin::elf::program_header::{PF_X, PT_LOAD};
use goblin::elf::ProgramHeader;

/// `PT_LOAD` segments of one ELF file (its executable ones, or all): where its code and data sit
/// in memory and in the file. Uprobes attach to file offsets, so neither PIE nor ASLR changes
/// anything here.
pub(super) struct LoadSegments {
    segments: Vec<Segment>,
}

struct Segment {
    vaddr: u64,
    /// Only the bytes present in the file have a file offset (`p_filesz`, not `p_memsz`).
    filesz: u64,
    offset: u64,
}

impl LoadSegments {
    /// The executable segments: the code.
    pub(super) fn executable(program_headers: &[ProgramHeader]) -> Self {
        Self::matching(program_headers, |ph| ph.p_flags & PF_X != 0)
    }

    /// Every segment: code and data.
    pub(super) fn all(program_headers: &[ProgramHeader]) -> Self {
        Self::matching(program_headers, |_| true)
    }

    fn matching(
        program_headers: &[ProgramHeader],
        wanted: impl Fn(&ProgramHeader) -> bool,
    ) -> Self {
        let segments = program_headers
            .iter()
            .filter(|ph| ph.p_type == PT_LOAD && wanted(ph))
            .map(|ph| Segment {
                vaddr: ph.p_vaddr,
                filesz: ph.p_filesz,
                offset: ph.p_offset,
            })
            .collect();
        LoadSegments { segments }
    }

    /// How many there are.
    pub(super) fn len(&self) -> usize {
        self.segments.len()
    }

    /// The lowest virtual address of the segments: where the kernel's `mm->start_code` points
    /// once the file is loaded, which gives its load bias.
    pub(super) fn lowest_vaddr(&self) -> Option<u64> {
        self.segments.iter().map(|segment| segment.vaddr).min()
    }

    /// The file offset of `address`: `address - p_vaddr + p_offset` of the segment that
    /// contains it, or `None` when none does (or the file's numbers overflow).
    pub(super) fn file_offset(&self, address: u64) -> Option<u64> {
        self.segments.iter().find_map(|segment| {
            let delta = address.checked_sub(segment.vaddr)?;
            if delta < segment.filesz {
                segment.offset.checked_add(delta)
            } else {
                None
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(flags: u32, vaddr: u64, filesz: u64, offset: u64) -> ProgramHeader {
        ProgramHeader {
            p_type: PT_LOAD,
            p_flags: flags,
            p_offset: offset,
            p_vaddr: vaddr,
            p_paddr: vaddr,
            p_filesz: filesz,
            p_memsz: filesz,
            p_align: 0x1000,
        }
    }

    #[test]
    fn maps_addresses_through_executable_segments_only() {
        let segments = LoadSegments::executable(&[
            load(4, 0x400000, 0x1000, 0),                 // R: headers
            load(5, 0x401000, 0x2000, 0x1000),            // R+X: code
            load(6, 0x404000, 0x1000, 0x3000),            // RW: data
            load(5, u64::MAX - 0x10, 0x20, u64::MAX - 4), // overflowing nonsense
        ]);
        assert_eq!(segments.file_offset(0x401000), Some(0x1000));
        assert_eq!(segments.file_offset(0x402fff), Some(0x2fff));
        assert_eq!(segments.file_offset(0x403000), None, "one past the code");
        assert_eq!(segments.file_offset(0x400100), None, "not executable");
        assert_eq!(segments.file_offset(0x404010), None, "not executable");
        assert_eq!(segments.file_offset(0x10), None);
        assert_eq!(segments.file_offset(u64::MAX - 1), None, "offset overflows");
    }
}
