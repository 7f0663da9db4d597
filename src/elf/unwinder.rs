//! Where a file defines the entry points of the stack unwinder (`_Unwind_RaiseException` and
//! co.): utrace probes them to give traced frames their return addresses back while the
//! unwinder walks them (see `src/bpf/shadow.bpf.h`).
//!
//! The unwinder is normally `libgcc_s.so.1`, which exports them; a program that links it
//! statically has them in its own `.symtab`. Either way the names are the ones the Itanium C++
//! ABI gives them, used by C++ and Rust alike.

use std::path::Path;

use goblin::elf::section_header::SHN_UNDEF;
use goblin::elf::sym::STT_FUNC;

use super::segments::ExecutableSegments;
use super::{parse, read_file, ElfError};

/// The unwinder functions that walk the caller's frames: raising, resuming after a cleanup,
/// rethrowing, forced unwinding (`pthread_exit`, `pthread_cancel`) and backtraces.
pub const UNWINDER_ENTRY_POINTS: [&str; 5] = [
    "_Unwind_RaiseException",
    "_Unwind_Resume",
    "_Unwind_Resume_or_Rethrow",
    "_Unwind_ForcedUnwind",
    "_Unwind_Backtrace",
];

/// The file offsets of the unwinder entry points the file at `path` defines, sorted, one per
/// function; empty when it defines none.
pub fn unwinder_entry_offsets(path: &Path) -> Result<Vec<u64>, ElfError> {
    let bytes = read_file(path)?;
    let elf = parse(path, &bytes)?;
    let segments = ExecutableSegments::new(&elf.program_headers);
    let symtab = elf.syms.iter().map(|sym| (sym, &elf.strtab));
    let dynsym = elf.dynsyms.iter().map(|sym| (sym, &elf.dynstrtab));
    let mut offsets: Vec<u64> = symtab
        .chain(dynsym)
        .filter(|(sym, _)| sym.st_type() == STT_FUNC && sym.st_shndx != SHN_UNDEF as usize)
        .filter(|(sym, strtab)| {
            strtab
                .get_at(sym.st_name)
                .is_some_and(|name| UNWINDER_ENTRY_POINTS.contains(&name))
        })
        .filter_map(|(sym, _)| segments.file_offset(sym.st_value))
        .collect();
    offsets.sort_unstable();
    offsets.dedup();
    Ok(offsets)
}
