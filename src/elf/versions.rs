//! Symbol versions of `.dynsym` (`.gnu.version`, `.gnu.version_d`, `.gnu.version_r`): which
//! version of a name a file asks for, and which version of a name a library defines as the
//! default (`memcpy@@GLIBC_2.14` beside `memcpy@GLIBC_2.2.5`), which the loader binds a request
//! for that version to.

use std::collections::HashMap;

use goblin::elf::section_header::SHN_UNDEF;
use goblin::elf::Elf;

/// A library's default definition of a name defined in several versions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct DefaultVersion {
    /// The version's name (`GLIBC_2.14`).
    pub version: String,
    pub address: u64,
}

/// The versions of a file's dynamic symbols.
#[derive(Clone, Debug, Default)]
pub(super) struct SymbolVersions {
    /// For each name the file needs from elsewhere, the version it asks for.
    pub requested: HashMap<String, String>,
    /// For each name the file defines, its default definition's version (`@@`), where it has one.
    pub defaults: HashMap<String, DefaultVersion>,
}

impl SymbolVersions {
    pub fn of(elf: &Elf) -> SymbolVersions {
        let mut versions = SymbolVersions::default();
        let Some(versym) = &elf.versym else {
            return versions;
        };
        let strings = &elf.dynstrtab;
        // Version indices to names: definitions' first auxiliary entry, and needs'.
        let mut names: HashMap<u16, &str> = HashMap::new();
        for definition in elf.verdef.iter().flat_map(|section| section.iter()) {
            let first = definition.iter().next();
            if let Some(name) = first.and_then(|aux| strings.get_at(aux.vda_name)) {
                names.insert(definition.vd_ndx, name);
            }
        }
        for need in elf.verneed.iter().flat_map(|section| section.iter()) {
            for aux in need.iter() {
                if let Some(name) = strings.get_at(aux.vna_name) {
                    names.insert(aux.vna_other, name);
                }
            }
        }
        for (index, symbol) in elf.dynsyms.iter().enumerate() {
            let Some(version) = versym.get_at(index) else {
                continue;
            };
            let (Some(name), Some(&version_name)) = (
                strings.get_at(symbol.st_name),
                names.get(&version.version()),
            ) else {
                continue;
            };
            if symbol.st_shndx == SHN_UNDEF as usize {
                versions
                    .requested
                    .insert(name.to_owned(), version_name.to_owned());
            } else if !version.is_hidden() {
                let default = DefaultVersion {
                    version: version_name.to_owned(),
                    address: symbol.st_value,
                };
                versions.defaults.insert(name.to_owned(), default);
            }
        }
        versions
    }
}
