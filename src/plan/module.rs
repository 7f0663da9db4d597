//! The functions of one traced file: their probe sites, the PLT stubs `--lib`/`--no-lib` select
//! (named as `--libname` says), those the function-name filter shows, and where each one's exit
//! is probed.

use super::exits::exit_probes;
use super::go;
use super::{ExitPolicy, PlanError, PlanOptions, ProbePlan, TracedFile};
use crate::elf::binding::BindingScope;
use crate::elf::{ElfFile, ExitProbe, FunctionSymbol, SiteKind, Unprobeable};
use crate::table::{ExitKind, ProbeClass, TracedFunction};

/// One traced file's functions, planned.
pub(super) struct PlannedModule {
    pub file: TracedFile,
    pub functions: Vec<FunctionSymbol>,
    /// Where the exit of each of `functions` is probed.
    pub exits: Vec<ExitProbe>,
}

/// Plans the functions of `file`, read as `elf`, binding its PLT calls in `scope`. Warns of the
/// functions that cannot be probed; under `--debug`, says where their probes sit.
pub(super) fn plan(
    file: &TracedFile,
    elf: &ElfFile,
    options: &PlanOptions,
    exit_policy: ExitPolicy,
    scope: &BindingScope,
) -> Result<PlannedModule, PlanError> {
    let read = elf
        .functions(options.sites)
        .map_err(|source| PlanError::Symbols {
            path: file.path.clone(),
            source,
        })?;
    log::debug!("symbols of {}: {}", file.path, elf.symbol_origin());
    warn_unprobeable(&read.unprobeable);
    say_sites(&file.path, &read.functions);
    let mut functions = options
        .plt_libraries
        .apply(&file.path, read.functions, scope);
    functions.retain(|f| options.functions.shows_name(&f.name));
    if elf.is_go() {
        elf.move_sites_past_go_stack_checks(&mut functions);
    }
    let exits = match elf.is_go() {
        true => go::go_exit_probes(elf, &functions),
        false => exit_probes(elf, &functions, exit_policy),
    };
    Ok(PlannedModule {
        file: file.clone(),
        functions,
        exits,
    })
}

impl ProbePlan {
    /// Adds a planned module: its file is the next module, its functions get the next ids.
    pub(super) fn add(&mut self, module: PlannedModule) {
        let index = self.table.push_module(module.file.path.clone());
        let functions = module.functions.into_iter().zip(&module.exits);
        self.table
            .functions
            .extend(functions.map(|(symbol, exit)| TracedFunction {
                name: symbol.name,
                module: index,
                offset: symbol.offset,
                size: symbol.size,
                kind: symbol.kind,
                probes: ProbeClass::new(
                    symbol.execution,
                    match exit {
                        ExitProbe::Sites(_) => ExitKind::Instruction,
                        ExitProbe::Uretprobe(_) => ExitKind::Uretprobe,
                    },
                ),
            }));
        self.exits.extend(module.exits);
        self.files.push(module.file);
    }
}

/// Says how many functions of a file got which kind of probe site (`--debug`).
fn say_sites(path: &str, functions: &[FunctionSymbol]) {
    if !log::log_enabled!(log::Level::Debug) {
        return;
    }
    let count = |kind| functions.iter().filter(|f| f.site.kind == kind).count();
    log::debug!(
        "probe sites in {path}: {} at the entry, {} after endbr64, {} after an \
         unprobeable prefix, {} after a Go stack check",
        count(SiteKind::Entry),
        count(SiteKind::AfterEndbr64),
        count(SiteKind::AfterUnprobeablePrefix),
        count(SiteKind::AfterGoStackCheck)
    );
}

/// Says which functions will never show up in the trace, and why.
fn warn_unprobeable(unprobeable: &[Unprobeable]) {
    const SHOWN: usize = 5;
    if unprobeable.is_empty() {
        return;
    }
    let mut names: Vec<&str> = unprobeable
        .iter()
        .map(|f| f.name.as_str())
        .take(SHOWN)
        .collect();
    if unprobeable.len() > SHOWN {
        names.push("…");
    }
    log::warn!(
        "{} functions cannot be probed (their first instruction is a trap, has a LOCK or \
         segment prefix, or is AVX-encoded, and no equivalent site follows): {}",
        unprobeable.len(),
        names.join(", ")
    );
}
