//! Where a file's code starts and ends by its call frame information (`.eh_frame`), which a
//! stripped file keeps: the unwinder needs it, `strip` leaves it.
//!
//! Each frame description entry (FDE) covers one function, or one part of it (GCC gives a
//! `.cold` fragment its own), from its first instruction: code can be decoded from there as
//! reliably as from a symbol's address. Where a file has no symbol table, that is how the calls
//! of its PLT stubs are found (see [`returns::plt_return_sites`](super::returns)).

use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
use goblin::elf::Elf;

/// Where `.eh_frame` is: its virtual address (pointers in it are relative to it) and its bytes'
/// place in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct EhFrameSection {
    address: u64,
    offset: u64,
    size: u64,
}

impl EhFrameSection {
    /// The file's `.eh_frame` section, if its section headers name one.
    pub(super) fn of(elf: &Elf) -> Option<EhFrameSection> {
        let section = elf
            .section_headers
            .iter()
            .find(|section| elf.shdr_strtab.get_at(section.sh_name) == Some(".eh_frame"))?;
        Some(EhFrameSection {
            address: section.sh_addr,
            offset: section.sh_offset,
            size: section.sh_size,
        })
    }

    /// The code each FDE covers, as (address, size), in the order of the section. `file` is the
    /// whole file's bytes.
    pub(super) fn code_ranges(&self, file: &[u8]) -> Result<Vec<(u64, u64)>, gimli::Error> {
        let bytes = super::code_at(file, self.offset, self.size);
        let eh_frame = EhFrame::new(bytes, LittleEndian);
        let bases = BaseAddresses::default().set_eh_frame(self.address);
        let mut entries = eh_frame.entries(&bases);
        let mut ranges = Vec::new();
        while let Some(entry) = entries.next()? {
            if let CieOrFde::Fde(partial) = entry {
                let fde = partial.parse(UnwindSection::cie_from_offset)?;
                if fde.len() > 0 {
                    ranges.push((fde.initial_address(), fde.len()));
                }
            }
        }
        Ok(ranges)
    }
}
