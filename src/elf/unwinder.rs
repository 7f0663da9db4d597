//! Where a file defines the entry points of the stack unwinder (`_Unwind_RaiseException` and
//! co.): utrace probes them to give traced frames their return addresses back while the
//! unwinder walks them (see `src/bpf/shadow.bpf.h`).
//!
//! The unwinder is normally `libgcc_s.so.1`, which exports them; a program that links it
//! statically has them in its own `.symtab`. Either way the names are the ones the Itanium C++
//! ABI gives them, used by C++ and Rust alike.

use goblin::elf::sym::STT_FUNC;

use super::ElfFile;

/// The unwinder functions that walk the caller's frames: raising, resuming after a cleanup,
/// rethrowing, forced unwinding (`pthread_exit`, `pthread_cancel`) and backtraces.
pub const UNWINDER_ENTRY_POINTS: [&str; 5] = [
    "_Unwind_RaiseException",
    "_Unwind_Resume",
    "_Unwind_Resume_or_Rethrow",
    "_Unwind_ForcedUnwind",
    "_Unwind_Backtrace",
];

impl ElfFile {
    /// The file offsets of the unwinder entry points the file defines, sorted, one per
    /// function; empty when it defines none.
    pub fn unwinder_entry_offsets(&self) -> Vec<u64> {
        let mut offsets: Vec<u64> = self
            .symbols
            .iter()
            .filter(|symbol| symbol.kind == STT_FUNC && symbol.defined)
            .filter(|symbol| UNWINDER_ENTRY_POINTS.contains(&symbol.name.as_str()))
            .filter_map(|symbol| self.segments.file_offset(symbol.address))
            .collect();
        offsets.sort_unstable();
        offsets.dedup();
        offsets
    }
}
