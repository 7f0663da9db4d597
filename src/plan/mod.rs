//! The probe plan: which functions of which files are traced, and how.

mod libraries;

pub use libraries::{LibraryPatterns, PltLibraries};

use crate::elf::FunctionSymbol;
use crate::table::{ExitKind, FunctionTable, ProbeClass, TracedFunction};

/// Adds every function of one traced file to `table`; each gets the next free id.
pub fn add_module(table: &mut FunctionTable, path: String, symbols: Vec<FunctionSymbol>) {
    let module = table.push_module(path);
    table
        .functions
        .extend(symbols.into_iter().map(|symbol| TracedFunction {
            name: symbol.name,
            module,
            offset: symbol.offset,
            size: symbol.size,
            kind: symbol.kind,
            probes: ProbeClass::new(symbol.execution, ExitKind::Uretprobe),
        }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{Execution, FunctionKind};

    fn symbol(name: &str, offset: u64) -> FunctionSymbol {
        FunctionSymbol {
            name: name.into(),
            address: offset + 0x1000,
            offset,
            size: 8,
            kind: FunctionKind::Function,
            site: crate::elf::ProbeSite::ENTRY,
            execution: Execution::Emulated,
            plt_symbol: None,
        }
    }

    #[test]
    fn ids_are_dense_across_modules() {
        let mut table = FunctionTable::default();
        add_module(
            &mut table,
            "/bin/prog".into(),
            vec![symbol("main", 16), symbol("f", 32)],
        );
        add_module(&mut table, "/lib/libx.so".into(), vec![symbol("g", 48)]);
        let g = table.function(2).unwrap();
        assert_eq!((g.name.as_str(), g.module, g.offset), ("g", 1, 48));
        assert_eq!(table.module_name(g), "libx.so");
        assert_eq!(table.module_name(table.function(0).unwrap()), "prog");
        assert!(table.function(3).is_none());
    }
}
