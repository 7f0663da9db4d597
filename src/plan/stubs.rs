//! The PLT stubs of traced files whose calls the callee's own entry probe already sees: a stub
//! whose symbol the loader binds to a function this plan traces (in the same file or another
//! traced one) would only count every call twice, at the price of a probe on the stub, which the
//! kernel single-steps. Those stubs are not probed; the others keep their probe, and `record -d`
//! says how many of each and why.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::landings::counted_reasons;
use super::module::PlannedModule;
use super::PlanOptions;
use crate::elf::binding::{BindingScope, ExportTarget};
use crate::elf::ElfFile;
use crate::table::FunctionKind;

/// Why a PLT stub of a traced file keeps its probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum StubNeeded {
    /// `--follow`: another process may bind the stub to another file.
    Follow,
    /// Preloaded libraries, which utrace does not list, come first in the binding order.
    Preloaded,
    /// A `-f` glob with an `@` in it (`inner@plt`, `*@plt`) names the stub.
    NamedByFilter,
    /// A stub of the file's own ifunc.
    OwnIfunc,
    /// No file of the program defines its symbol as a function.
    BoundToNoFile,
    /// The loader binds it to a file that is not traced.
    BoundToUntracedFile,
    /// Its target is an ifunc: the traced function would be the resolver, not what runs.
    Ifunc,
    /// Its target has several versions at different addresses.
    Versioned,
    /// The function it binds to is not traced (filtered out, or it cannot be probed).
    CalleeNotTraced,
}

impl StubNeeded {
    /// How `record -d` says it.
    pub fn why(self) -> &'static str {
        match self {
            StubNeeded::Follow => {
                "as --follow traces other processes, which may bind them otherwise"
            }
            StubNeeded::Preloaded => "as libraries are preloaded, which utrace does not bind",
            StubNeeded::NamedByFilter => "named by a -f glob with an @",
            StubNeeded::OwnIfunc => "into the file's own ifuncs",
            StubNeeded::BoundToNoFile => "bound to no file",
            StubNeeded::BoundToUntracedFile => "into files not traced",
            StubNeeded::Ifunc => "into ifuncs (chosen at run time)",
            StubNeeded::Versioned => "into names of several versions",
            StubNeeded::CalleeNotTraced => "into functions not traced",
        }
    }
}

/// What became of the PLT stubs of one traced file.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct StubOutcome {
    /// How many are not probed: their callee's entry probe sees their calls.
    pub dropped: usize,
    /// How many keep their probe, by why.
    pub kept: BTreeMap<StubNeeded, usize>,
}

/// A traced file as a callee: the functions it exports and the addresses of those planned.
struct TracedCallee {
    exports: HashMap<String, ExportTarget>,
    planned: HashSet<u64>,
}

/// Takes out of `modules` the PLT stubs whose calls the callee's own entry probe sees. `elves`
/// are the modules' files, read; `scope` binds their PLT calls as the loader does. Returns, per
/// module, what became of its stubs, and says it under `--debug`.
pub(super) fn drop_stubs_seen_by_their_callees(
    modules: &mut [PlannedModule],
    elves: &[&ElfFile],
    scope: &BindingScope,
    options: &PlanOptions,
) -> Vec<StubOutcome> {
    let callees: HashMap<String, TracedCallee> = modules
        .iter()
        .zip(elves)
        .map(|(module, elf)| {
            let planned = module.functions.iter();
            let planned = planned.filter(|f| f.kind == FunctionKind::Function);
            let callee = TracedCallee {
                exports: elf.export_targets(),
                planned: planned.map(|f| f.address).collect(),
            };
            (module.file.path.clone(), callee)
        })
        .collect();
    let everything_needed = match () {
        _ if options.follow => Some(StubNeeded::Follow),
        _ if options.preloaded_libraries => Some(StubNeeded::Preloaded),
        _ => None,
    };
    let named_by_filter = |name: &str| {
        let globs = options.functions.functions.iter();
        globs
            .filter(|glob| glob.as_str().contains('@'))
            .any(|glob| glob.matches(name))
    };
    let mut outcomes = Vec::with_capacity(modules.len());
    for module in modules.iter_mut() {
        let mut outcome = StubOutcome::default();
        let mut keep = Vec::with_capacity(module.functions.len());
        for function in &module.functions {
            if function.kind != FunctionKind::Plt {
                keep.push(true);
                continue;
            }
            let needed = (|| {
                if let Some(why) = everything_needed {
                    return Err(why);
                }
                if named_by_filter(&function.name) {
                    return Err(StubNeeded::NamedByFilter);
                }
                let raw = function.plt_symbol.as_deref().ok_or(StubNeeded::OwnIfunc)?;
                let path = scope.library_of(raw).ok_or(StubNeeded::BoundToNoFile)?;
                let callee = callees.get(path).ok_or(StubNeeded::BoundToUntracedFile)?;
                match callee.exports.get(raw) {
                    Some(ExportTarget::Function(address)) if callee.planned.contains(address) => {
                        Ok(())
                    }
                    Some(ExportTarget::Function(_)) => Err(StubNeeded::CalleeNotTraced),
                    Some(ExportTarget::Ifunc) => Err(StubNeeded::Ifunc),
                    Some(ExportTarget::Versioned) => Err(StubNeeded::Versioned),
                    None => Err(StubNeeded::BoundToNoFile),
                }
            })();
            match needed {
                Ok(()) => outcome.dropped += 1,
                Err(why) => *outcome.kept.entry(why).or_default() += 1,
            }
            keep.push(needed.is_err());
        }
        if outcome.dropped > 0 {
            retain(module, &keep);
        }
        say(&module.file.path, &outcome);
        outcomes.push(outcome);
    }
    outcomes
}

/// Keeps the functions of `module` (and their exits, values, user stack flags and source
/// lines) whose `keep` is true.
pub(super) fn retain(module: &mut PlannedModule, keep: &[bool]) {
    let functions = std::mem::take(&mut module.functions);
    let exits = std::mem::take(&mut module.exits);
    let values = std::mem::take(&mut module.values);
    let user_stacks = std::mem::take(&mut module.user_stacks);
    let sources = std::mem::take(&mut module.sources);
    let planned = functions.into_iter().zip(exits).zip(values);
    let planned = planned.zip(user_stacks).zip(sources);
    for (((((function, exit), values), user_stack), source), &kept) in planned.zip(keep) {
        if kept {
            module.functions.push(function);
            module.exits.push(exit);
            module.values.push(values);
            module.user_stacks.push(user_stack);
            module.sources.push(source);
        }
    }
}

/// Says how many stubs of `path` are not probed, and why the others are (`--debug`).
fn say(path: &str, outcome: &StubOutcome) {
    if !log::log_enabled!(log::Level::Debug) {
        return;
    }
    let kept_count: usize = outcome.kept.values().sum();
    if outcome.dropped + kept_count == 0 {
        return;
    }
    log::debug!(
        "PLT stubs of {path}: {} not probed (the traced function they call sees each call at its \
         own entry), {kept_count} probed{}",
        outcome.dropped,
        counted_reasons(&outcome.kept, |why| why.why()),
    );
}
