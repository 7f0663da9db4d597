//! Where the recorder watches the program besides its traced functions: the `dlopen` that loads
//! libraries `--nest-lib` may select and the `dlclose` that unloads them, and the unwinder's entry
//! points, where the shadow stack gives traced frames their return addresses back.

use std::path::PathBuf;

use super::program::OpenedFile;
use crate::elf::SitePolicy;
use crate::table::FunctionKind;

/// Functions of one file the recorder watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchSites {
    /// The path that opens the file.
    pub file: PathBuf,
    /// The file offsets of the functions' probe sites.
    pub offsets: Vec<usize>,
}

/// The first library in load order that has `dlopen` (libc since glibc 2.34, libdl before),
/// and where its dlopen and dlclose functions are.
pub(super) fn dlopen_dlclose_sites(libraries: &[OpenedFile]) -> Option<WatchSites> {
    libraries.iter().find_map(|library| {
        // Checked first: planning every function of a large library (libLLVM's 34,000) only
        // to look for dlopen took most of the planning time.
        let elf = library
            .elf
            .as_ref()
            .ok()
            .filter(|elf| elf.defines_function("dlopen"))?;
        let offsets: Vec<usize> = elf
            .functions(SitePolicy::Best)
            .ok()?
            .functions
            .iter()
            .filter(|f| f.kind == FunctionKind::Function)
            .filter(|f| f.name == "dlopen" || f.name == "dlclose")
            .map(|f| f.offset as usize)
            .collect();
        (!offsets.is_empty()).then(|| WatchSites {
            file: library.file.open_path.clone(),
            offsets,
        })
    })
}

/// The files of the program (`opened`: the executable, then its libraries) that define the
/// unwinder's entry points (normally `libgcc_s.so.1`; the executable itself when it links the
/// unwinder statically), with their offsets. Empty for a program without an unwinder (plain C),
/// which then pays nothing for the shadow stack. A file that cannot be read is left out, as the
/// planning would have said.
pub(super) fn unwinder_sites(opened: &[OpenedFile]) -> Vec<WatchSites> {
    opened
        .iter()
        .filter_map(|opened| {
            let offsets = opened.elf.as_ref().ok()?.unwinder_entry_offsets();
            let offsets: Vec<usize> = offsets.into_iter().map(|o| o as usize).collect();
            (!offsets.is_empty()).then(|| WatchSites {
                file: opened.file.open_path.clone(),
                offsets,
            })
        })
        .collect()
}
