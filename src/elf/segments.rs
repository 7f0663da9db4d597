//! Virtual addresses to file offsets, through the executable `PT_LOAD` segments.

use goblin::elf::program_header::{PF_X, PT_LOAD};
use goblin::elf::ProgramHeader;

/// The executable `PT_LOAD` segments of one ELF file: where its code sits in memory and in the
/// file. Uprobes attach to file offsets, so neither PIE nor ASLR changes anything here.
pub(super) struct ExecutableSegments {
    segments: Vec<Segment>,
}

struct Segment {
    vaddr: u64,
    /// Only the bytes present in the file have a file offset (`p_filesz`, not `p_memsz`).
    filesz: u64,
    offset: u64,
}

impl ExecutableSegments {
    pub(super) fn new(program_headers: &[ProgramHeader]) -> Self {
        let segments = program_headers
            .iter()
            .filter(|ph| ph.p_type == PT_LOAD && ph.p_flags & PF_X != 0)
            .map(|ph| Segment {
                vaddr: ph.p_vaddr,
                filesz: ph.p_filesz,
                offset: ph.p_offset,
            })
            .collect();
        ExecutableSegments { segments }
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

    /// The file offset of `address`: `address - p_vaddr + p_offset` of the executable segment
    /// that contains it, or `None` when no executable segment does (or the file's numbers
    /// overflow).
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
        let segments = ExecutableSegments::new(&[
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
