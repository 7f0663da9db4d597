//! The function symbols of `.symtab` and `.dynsym`: read once, and the defined ones one per
//! address.

use std::collections::BTreeMap;

use goblin::elf::section_header::SHN_UNDEF;
use goblin::elf::sym::{STB_GLOBAL, STB_GNU_UNIQUE, STB_LOCAL, STB_WEAK, STT_FUNC, STT_GNU_IFUNC};
use goblin::elf::{Elf, Symtab};
use goblin::strtab::Strtab;

/// A function symbol of `.symtab` or `.dynsym` (`STT_FUNC` or `STT_GNU_IFUNC`, named), read
/// once from the file: what every question about the file's functions starts from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Symbol {
    /// As the file spells it (mangled).
    pub name: String,
    /// `STT_FUNC` or `STT_GNU_IFUNC`.
    pub kind: u8,
    pub binding: u8,
    /// Defined in this file (its section is not `SHN_UNDEF`).
    pub defined: bool,
    pub address: u64,
    pub size: u64,
    /// From `.dynsym`, which the dynamic loader sees; `.symtab` otherwise.
    pub dynamic: bool,
}

/// The function symbols of `.symtab`, then those of `.dynsym`, in the order of each table.
pub(super) fn function_symbols(elf: &Elf) -> Vec<Symbol> {
    let mut symbols = table_functions(&elf.syms, &elf.strtab, false);
    symbols.extend(table_functions(&elf.dynsyms, &elf.dynstrtab, true));
    symbols
}

/// The function symbols of one symbol table, in its order; `dynamic` says it is `.dynsym`.
pub(super) fn table_functions(syms: &Symtab, strtab: &Strtab, dynamic: bool) -> Vec<Symbol> {
    syms.iter()
        .filter(|sym| matches!(sym.st_type(), STT_FUNC | STT_GNU_IFUNC))
        .filter_map(|sym| {
            let name = strtab.get_at(sym.st_name).filter(|name| !name.is_empty())?;
            Some(Symbol {
                name: name.to_owned(),
                kind: sym.st_type(),
                binding: sym.st_bind(),
                defined: sym.st_shndx != SHN_UNDEF as usize,
                address: sym.st_value,
                size: sym.st_size,
                dynamic,
            })
        })
        .collect()
}

/// A function symbol as the file names it (not demangled yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct RawFunction<'a> {
    pub name: &'a str,
    pub address: u64,
    pub size: u64,
    pub binding: u8,
}

/// Every `STT_FUNC` symbol of `.symtab` and `.dynsym` that is defined and has a size, without
/// `.cold` fragments and trampolines that are returned to, one per address (see
/// [`merge_aliases`]), sorted by address.
pub(super) fn defined_functions(symbols: &[Symbol]) -> Vec<RawFunction<'_>> {
    let functions = symbols
        .iter()
        .filter_map(function)
        .filter(|function| !is_cold_fragment(function.name))
        .filter(|function| !RETURNED_TO.contains(&function.name));
    merge_aliases(functions)
}

/// The `.cold` fragments of `.symtab` and `.dynsym` (see [`is_cold_fragment`]), one per address.
pub(super) fn cold_fragments(symbols: &[Symbol]) -> Vec<RawFunction<'_>> {
    let fragments = symbols
        .iter()
        .filter_map(function)
        .filter(|function| is_cold_fragment(function.name));
    merge_aliases(fragments)
}

fn function(symbol: &Symbol) -> Option<RawFunction<'_>> {
    if symbol.kind != STT_FUNC || symbol.size == 0 || !symbol.defined {
        return None;
    }
    Some(RawFunction {
        name: &symbol.name,
        address: symbol.address,
        size: symbol.size,
        binding: symbol.binding,
    })
}

/// glibc's trampolines that code returns to rather than calls, named only in its `.symtab` (so
/// in its debug file): where a return address would be, their stack holds what they read
/// (`__start_context`, where a function started by `makecontext` returns, reads its `uc_link`
/// there), which a return probe would overwrite. `__restore_rt`, where a signal handler
/// returns, has no size and is left out already.
const RETURNED_TO: [&str; 2] = ["__start_context", "__restore_rt"];

/// Whether a symbol names a fragment that GCC split off a function (`foo.cold`, `foo.cold.3`,
/// `_Z3fooi.isra.0.cold`). Such code is jumped into, never called: a return probe there would
/// corrupt the stack.
pub(super) fn is_cold_fragment(name: &str) -> bool {
    name.split('.').skip(1).any(|part| part == "cold")
}

/// Several symbols at one address (aliases, `.symtab` and `.dynsym` copies) are one function.
/// The name kept is the first by: binding (GLOBAL, then WEAK, then LOCAL), then the shorter
/// name, then the alphabetically first, so the choice does not depend on symbol order.
pub(super) fn merge_aliases<'a>(
    functions: impl IntoIterator<Item = RawFunction<'a>>,
) -> Vec<RawFunction<'a>> {
    let mut by_address: BTreeMap<u64, RawFunction<'a>> = BTreeMap::new();
    for function in functions {
        match by_address.get_mut(&function.address) {
            Some(kept) if preference(&function) < preference(kept) => *kept = function,
            Some(_) => {}
            None => {
                by_address.insert(function.address, function);
            }
        }
    }
    by_address.into_values().collect()
}

fn preference<'f>(function: &RawFunction<'f>) -> (u8, usize, &'f str) {
    let binding_rank = match function.binding {
        STB_GLOBAL | STB_GNU_UNIQUE => 0,
        STB_WEAK => 1,
        STB_LOCAL => 2,
        _ => 3,
    };
    (binding_rank, function.name.len(), function.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(name: &str, address: u64, binding: u8) -> RawFunction<'_> {
        RawFunction {
            name,
            address,
            size: 8,
            binding,
        }
    }

    #[test]
    fn cold_fragments_are_recognised() {
        assert!(is_cold_fragment("checked_parse.cold"));
        assert!(is_cold_fragment("checked_parse.cold.12"));
        assert!(is_cold_fragment("_Z3fooi.isra.0.cold"));
        assert!(!is_cold_fragment("cold"));
        assert!(!is_cold_fragment("cold_path"));
        assert!(!is_cold_fragment("foo.coldish"));
        assert!(!is_cold_fragment("sort.constprop.0"));
    }

    #[test]
    fn aliases_prefer_global_then_weak_then_short_names() {
        let merged = merge_aliases([
            raw("__libc_malloc", 0x10, STB_GLOBAL),
            raw("__GI_malloc", 0x10, STB_LOCAL),
            raw("malloc", 0x10, STB_GLOBAL),
            raw("fx_alias", 0x20, STB_WEAK),
            raw("fx_plain", 0x20, STB_GLOBAL),
            raw("helper", 0x30, STB_LOCAL),
            raw("weak_one", 0x40, STB_WEAK),
            raw("local_one", 0x40, STB_LOCAL),
            raw("bbb", 0x50, STB_GLOBAL),
            raw("aaa", 0x50, STB_GLOBAL),
        ]);
        let names: Vec<_> = merged.iter().map(|f| (f.address, f.name)).collect();
        assert_eq!(
            names,
            [
                (0x10, "malloc"),
                (0x20, "fx_plain"),
                (0x30, "helper"),
                (0x40, "weak_one"),
                (0x50, "aaa"),
            ]
        );
    }

    #[test]
    fn alias_choice_does_not_depend_on_order() {
        let a = [
            raw("b", 1, STB_GLOBAL),
            raw("a", 1, STB_GLOBAL),
            raw("c", 1, STB_WEAK),
        ];
        let mut b = a.clone();
        b.reverse();
        assert_eq!(merge_aliases(a), merge_aliases(b));
    }
}
