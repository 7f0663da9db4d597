//! Planning on ELF fixtures compiled at test time (see `testdata/`): no root, no BPF.

use super::module::PlannedModule;
use super::*;
use crate::elf::{FunctionSymbol, NoExitSites, ProbeSite};
use crate::table::{Execution, FunctionKind};

fn symbol(name: &str, offset: u64) -> FunctionSymbol {
    FunctionSymbol {
        name: name.into(),
        address: offset + 0x1000,
        offset,
        size: 8,
        kind: FunctionKind::Function,
        site: ProbeSite::ENTRY,
        execution: Execution::Emulated,
        plt_symbol: None,
    }
}

fn planned(path: &str, functions: Vec<FunctionSymbol>) -> PlannedModule {
    PlannedModule {
        file: TracedFile {
            path: path.into(),
            open_path: path.into(),
        },
        exits: vec![ExitProbe::Uretprobe(NoExitSites::UretprobesAsked); functions.len()],
        functions,
    }
}

fn empty_plan() -> ProbePlan {
    ProbePlan {
        table: FunctionTable::default(),
        exits: Vec::new(),
        files: Vec::new(),
        exit_policy: ExitPolicy::Uretprobe,
        landings: Landings::default(),
        executable_code_vaddr: 0,
        dlopen_sites: None,
        unwinder_sites: Vec::new(),
    }
}

#[test]
fn ids_are_dense_across_modules() {
    let mut plan = empty_plan();
    plan.add(planned(
        "/bin/prog",
        vec![symbol("main", 16), symbol("f", 32)],
    ));
    plan.add(planned("/lib/libx.so", vec![symbol("g", 48)]));
    let table = &plan.table;
    let g = table.function(2).unwrap();
    assert_eq!((g.name.as_str(), g.module, g.offset), ("g", 1, 48));
    assert_eq!(table.module_name(g), "libx.so");
    assert_eq!(table.module_name(table.function(0).unwrap()), "prog");
    assert!(table.function(3).is_none());
}
