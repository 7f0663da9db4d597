//! The functions of one traced file: their probe sites, the PLT stubs `--lib`/`--no-lib` select
//! (named as `--libname` says), those the function-name filter shows, and where each one's exit
//! is probed.

use std::collections::BTreeMap;

use super::exits::{exit_probes, instruction_exit_probes, ReturnProbes};
use super::go;
use super::values::{plan_values, Refused};
use super::{ExitPolicy, PlanError, PlanOptions, ProbePlan, SourceLines, TracedFile};
use crate::diagnostics::plural;
use crate::elf::binding::BindingScope;
use crate::elf::Unprobeable;
use crate::elf::{ElfFile, ExitProbe, FunctionSymbol, NoExitSites, SingleStepCause, SiteKind};
use crate::table::{Execution, ExitKind, FunctionKind, ProbeClass, SourceLine, TracedFunction};
use crate::value::{ValueSource, ValueSpec, VALUES_MAX};

/// One traced file's functions, planned.
pub(super) struct PlannedModule {
    pub file: TracedFile,
    pub functions: Vec<FunctionSymbol>,
    /// Where the exit of each of `functions` is probed.
    pub exits: Vec<ExitProbe>,
    /// The values each of `functions` captures.
    pub values: Vec<Vec<ValueSpec>>,
    /// Whether each of `functions` captures the user stack at its entry (`--stack`).
    pub user_stacks: Vec<bool>,
    /// The source line of each of `functions`, where DWARF gives it.
    pub sources: Vec<Option<SourceLine>>,
    /// The exit sites (file offsets) of functions that capture their return value where it is
    /// not in rax: tail jumps, which leave before the callee computes it.
    pub exits_before_return_value: Vec<u64>,
    /// Where the file's symbols came from (`utrace info` says it).
    pub symbol_origin: String,
    /// The Go runtime's functions left out, as no `-f` named them (see `super::go`).
    pub go_runtime_left_out: usize,
}

/// Plans the functions of `file`, read as `elf`, binding its PLT calls in `scope`. Warns of the
/// functions that cannot be probed; under `--debug`, says where their probes sit.
pub(super) fn plan(
    file: &TracedFile,
    elf: &ElfFile,
    options: &PlanOptions,
    exit_policy: ExitPolicy,
    return_probes: ReturnProbes,
    scope: &BindingScope,
) -> Result<PlannedModule, PlanError> {
    let read = elf
        .functions(options.sites)
        .map_err(|error| PlanError::Symbols {
            path: file.path.clone(),
            error,
        })?;
    let symbol_origin = elf.symbol_origin().to_string();
    log::debug!("symbols of {}: {symbol_origin}", file.path);
    // Looked up once: it scans the file's symbols.
    let is_go = elf.is_go();
    let asked_for = |name: &str| {
        options.functions.shows_name(name) && !(is_go && go::runtime_left_out(name, options))
    };
    // Only those -f and --no-function would have traced: the others were not asked for.
    let unprobeable: Vec<&Unprobeable> = (read.unprobeable.iter())
        .filter(|f| asked_for(&f.name))
        .collect();
    warn_unprobeable(&unprobeable);
    let mut functions = options
        .plt_libraries
        .apply(&file.path, read.functions, scope);
    functions.retain(|f| options.functions.shows_name(&f.name));
    let shown = functions.len();
    functions.retain(|f| asked_for(&f.name));
    let go_runtime_left_out = shown - functions.len();
    if is_go {
        elf.move_sites_past_go_stack_checks(&mut functions);
    }
    say_sites(&file.path, &functions, &read.single_stepped);
    let exits = match is_go || return_probes == ReturnProbes::Never {
        true => instruction_exit_probes(elf, &functions),
        false => exit_probes(
            elf,
            &functions,
            exit_policy,
            !options.values.user_stacks.is_empty(),
        ),
    };
    let mut refused = Refused::default();
    let mut values = plan_values(&options.values, elf, &functions, &mut refused);
    refused.warn();
    // Go functions capture no values (see plan_values), the stack's id among them.
    let user_stacks: Vec<bool> = functions
        .iter()
        .map(|function| !is_go && options.values.captures_user_stack(function))
        .collect();
    for (specs, _) in values.iter_mut().zip(&user_stacks).filter(|(_, &s)| s) {
        // The stack's id takes the last item.
        specs.truncate(VALUES_MAX - 1);
    }
    let sources = match options.source_lines {
        SourceLines::Read => source_lines(&file.path, elf, &functions),
        SourceLines::Skip => vec![None; functions.len()],
    };
    let exits_before_return_value = values
        .iter()
        .zip(&exits)
        .filter(|(specs, _)| specs.iter().any(|s| s.source == ValueSource::Return))
        .flat_map(|(_, exit)| match exit {
            ExitProbe::Sites(sites) => sites.as_slice(),
            ExitProbe::Uretprobe(_) => &[],
        })
        .copied()
        .filter(|&site| !elf.is_return_at(site))
        .collect();
    Ok(PlannedModule {
        file: file.clone(),
        functions,
        exits,
        values,
        user_stacks,
        sources,
        exits_before_return_value,
        symbol_origin,
        go_runtime_left_out,
    })
}

impl PlannedModule {
    /// Adds the functions of calls through the file's GOT slots that land (see
    /// `super::landings::land_got_calls`): no probe of their own, no values, no source line.
    pub(super) fn add_got_calls(&mut self, functions: impl Iterator<Item = FunctionSymbol>) {
        for function in functions {
            self.functions.push(function);
            self.exits
                .push(ExitProbe::Uretprobe(NoExitSites::ProbedWhereItLands));
            self.values.push(Vec::new());
            self.user_stacks.push(false);
            self.sources.push(None);
        }
    }
}

impl ProbePlan {
    /// Adds a planned module: its file is the next module, its functions get the next ids.
    pub(super) fn add(&mut self, module: PlannedModule) {
        let index = self.table.push_module(module.file.path.clone());
        self.table
            .symbol_origins
            .push((index, module.symbol_origin));
        let functions = module.functions.into_iter().zip(&module.exits);
        let functions = functions.zip(module.values).zip(module.user_stacks);
        let functions = functions.zip(module.sources);
        self.table.functions.extend(functions.map(
            |((((symbol, exit), values), user_stack), source)| TracedFunction {
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
                values,
                user_stack,
                argument_names: Vec::new(),
                source,
                detached: None,
            },
        ));
        self.exits.extend(module.exits);
        let before_return_value = module.exits_before_return_value.into_iter();
        self.exits_before_return_value
            .extend(before_return_value.map(|site| (index, site)));
        self.files.push(module.file);
    }
}

/// The source line of each of `functions` (none for PLT stubs, which DWARF does not describe).
/// Under `--debug`, says how many were found and what reading them cost.
fn source_lines(
    path: &str,
    elf: &ElfFile,
    functions: &[FunctionSymbol],
) -> Vec<Option<SourceLine>> {
    let started = std::time::Instant::now();
    let addresses: Vec<u64> = functions
        .iter()
        .filter(|f| f.kind == FunctionKind::Function)
        .map(|f| f.address)
        .collect();
    if addresses.is_empty() {
        return vec![None; functions.len()];
    }
    let lines = elf.source_lines(&addresses);
    let sources: Vec<Option<SourceLine>> = functions
        .iter()
        .map(|f| match f.kind {
            FunctionKind::Function => lines.get(&f.address).cloned(),
            FunctionKind::Plt | FunctionKind::Got | FunctionKind::Kernel | FunctionKind::Event => {
                None
            }
            FunctionKind::Tracer | FunctionKind::Preemption => None,
        })
        .collect();
    log::debug!(
        "source lines of {path}: {} of {} functions, read in {:.1} ms",
        sources.iter().flatten().count(),
        addresses.len(),
        started.elapsed().as_secs_f64() * 1e3
    );
    sources
}

/// Says how many of the functions planned in a file got which kind of probe site, and how many
/// of them the kernel single-steps; why, from the walk's `causes` over all the file's functions,
/// when they are those (`--debug`). After a Go file's sites moved past their stack checks, and
/// after `-f` and `--no-function`.
fn say_sites(path: &str, functions: &[FunctionSymbol], causes: &BTreeMap<SingleStepCause, usize>) {
    if !log::log_enabled!(log::Level::Debug) {
        return;
    }
    let count = |kind| functions.iter().filter(|f| f.site.kind == kind).count();
    let straight_line = (functions.iter())
        .filter(|f| matches!(f.site.kind, SiteKind::AfterStraightLine { .. }))
        .count();
    log::debug!(
        "probe sites in {path}: {} at the entry, {} after endbr64, {} after straight-line \
         instructions, {} after an unprobeable prefix, {} after a Go stack check",
        count(SiteKind::Entry),
        count(SiteKind::AfterEndbr64),
        straight_line,
        count(SiteKind::AfterUnprobeablePrefix),
        count(SiteKind::AfterGoStackCheck)
    );
    let executed = |execution| {
        (functions.iter())
            .filter(|f| f.kind == FunctionKind::Function && f.execution == execution)
            .count()
    };
    let (emulated, single_stepped) = (
        executed(Execution::Emulated),
        executed(Execution::SingleStepped),
    );
    let mut causes: Vec<(SingleStepCause, usize)> = causes.iter().map(|(&c, &n)| (c, n)).collect();
    let why = match causes.iter().map(|(_, n)| n).sum::<usize>() == single_stepped {
        true => {
            // The most common first; ties in the order of the causes.
            causes.sort_by_key(|&(cause, n)| (std::cmp::Reverse(n), cause));
            let causes: Vec<String> = (causes.iter())
                .filter(|(_, n)| *n > 0)
                .map(|(cause, n)| format!("{n} {cause}"))
                .collect();
            match causes.is_empty() {
                true => String::new(),
                false => format!(" ({})", causes.join(", ")),
            }
        }
        // Some functions filtered out, or sites moved since the walk (Go).
        false => String::new(),
    };
    log::debug!("entry sites in {path}: {emulated} emulated, {single_stepped} single-stepped{why}");
}

/// Says which functions will never show up in the trace, and why.
fn warn_unprobeable(unprobeable: &[&Unprobeable]) {
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
        "{} be probed (the first instruction is a trap, has a LOCK or segment prefix, or is \
         AVX-encoded, and no equivalent site follows): {}",
        plural(
            unprobeable.len() as u64,
            "function cannot",
            "functions cannot"
        ),
        names.join(", ")
    );
}
