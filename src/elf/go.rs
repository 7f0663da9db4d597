//! Whether the Go toolchain built a file. A Go program's stack unwinder (garbage collection,
//! stack growth, `systemstack`) walks return addresses it must find in its own tables, which a
//! uretprobe's trampoline is not: planning gives such a program no return probe.

use goblin::elf::Elf;

use super::ElfFile;

/// The section where the Go linker puts the build information (`go version -m` reads it).
const GO_BUILDINFO_SECTION: &str = ".go.buildinfo";

/// The Go runtime's `main`, which every Go program has, stripped of sections or not.
const GO_RUNTIME_MAIN: &str = "runtime.main";

impl ElfFile {
    /// Whether the Go toolchain built the file: it has a `.go.buildinfo` section or defines
    /// `runtime.main`.
    pub fn is_go(&self) -> bool {
        self.go_buildinfo
            || self
                .symbols
                .iter()
                .any(|symbol| symbol.defined && symbol.name == GO_RUNTIME_MAIN)
    }
}

/// Whether `elf` has a `.go.buildinfo` section.
pub(super) fn has_buildinfo_section(elf: &Elf) -> bool {
    elf.section_headers
        .iter()
        .any(|section| elf.shdr_strtab.get_at(section.sh_name) == Some(GO_BUILDINFO_SECTION))
}
