//! The [`Planner`]: builds the [`ProbePlan`] of a program, and extends it with the code the
//! traced processes load while they are recorded.

use std::path::Path;

use super::program::{ProgramFiles, UnmatchedPatterns};
use super::values::ValueRequest;
use super::TracedFile;
use super::{events, exits, go, kernel_values, landings, module, stubs, watches};
use super::{ExitPolicy, Pairing, PlanError, PlanOptions, ProbePlan, Program, ReturnProbes};
use crate::elf::binding::BindingScope;
use crate::elf::{ElfFile, ExitProbe};
use crate::table::{Execution, FunctionId, FunctionTable};

/// Plans what is traced: the program at first, then what its processes load.
#[derive(Debug)]
pub struct Planner {
    options: PlanOptions,
    /// What the traced program's PLT calls bind to, for libraries it loads later.
    scope: BindingScope,
    plan: ProbePlan,
    /// The device and inode of each of the plan's files, taken when it was planned: its open
    /// path may name another file later (the `/proc/PID/map_files` entry of a library closed
    /// since names the one mapped in its place).
    identities: Vec<Option<FileIdentity>>,
}

/// Code a traced process has loaded while it is recorded.
#[derive(Clone, Debug)]
pub enum Loaded {
    /// The libraries the process maps now (after a `dlopen`): those `--nest-lib` matches that are
    /// not planned yet are planned.
    Libraries(Vec<TracedFile>),
    /// The program a followed process has just exec'ed (`--follow`): its files not planned yet
    /// are planned.
    Program(Program),
}

/// What [`Planner::extend`] planned.
#[derive(Debug, Default)]
pub struct Extension {
    /// The files planned now and their functions, numbered on from the plan's before (what the
    /// data file's "more functions" chunk holds); empty when there was nothing new to plan.
    pub table: FunctionTable,
    /// The modules the loaded code brings: the new libraries; for a program, each of its traced
    /// files, planned before or now.
    pub modules: Vec<usize>,
}

impl Planner {
    /// Plans `program`: the functions of its executable and of the libraries `--nest-lib`
    /// selects, how each one's exit is seen, which PLT stubs are not probed because the traced
    /// function they call sees their calls, which PLT calls are probed where they land, and
    /// where the recorder watches dlopen and the unwinder. Fails when a traced file cannot be
    /// read, or when no function is left to trace.
    pub fn new(options: PlanOptions, program: Program) -> Result<Planner, PlanError> {
        let started = std::time::Instant::now();
        let files = ProgramFiles::select(program, &options, UnmatchedPatterns::Warn);
        let unwinder_sites = watches::unwinder_sites(&files.opened);
        let go_program = (files.executable().elf.as_ref().ok()).filter(|elf| elf.is_go());
        let is_go = go_program.is_some();
        let switcher = exits::stack_switcher(&files.opened);
        let (exit_policy, pairing) = match (go_program, &switcher) {
            (Some(elf), _) => (
                go::exit_policy(options.exits),
                Pairing::Goroutine {
                    goid_offset: elf.go_goid_offset(),
                },
            ),
            (None, Some(switcher)) => (
                exits::stack_switching_policy(options.exits, switcher),
                Pairing::ReturnSlot,
            ),
            (None, None) => (
                ExitPolicy::chosen_or_default(options.exits, options.origin, &unwinder_sites),
                Pairing::ReturnSlot,
            ),
        };
        let return_probes = match is_go || switcher.is_some() {
            true => ReturnProbes::Never,
            false => ReturnProbes::Allowed,
        };
        let dlopen_dlclose_sites = match options.nest_libs.is_empty() {
            true => None,
            false => watches::dlopen_dlclose_sites(files.libraries()),
        };
        let mut modules = Vec::new();
        for position in 0..files.traced.len() {
            let index = files.traced[position];
            let Ok(elf) = &files.opened[index].elf else {
                return Err(files.into_read_error(index));
            };
            let file = &files.opened[index].file;
            modules.push(module::plan(
                file,
                elf,
                &options,
                exit_policy,
                return_probes,
                &files.scope,
            )?);
        }
        let elves: Vec<&ElfFile> = (files.traced.iter())
            .filter_map(|&index| files.opened[index].elf.as_ref().ok())
            .collect();
        stubs::drop_stubs_seen_by_their_callees(&mut modules, &elves, &files.scope, &options);
        if modules.iter().all(|module| module.functions.is_empty()) {
            return Err(PlanError::NothingToTrace {
                program: files.executable().file.path.clone(),
            });
        }
        let got = landings::land_got_calls(
            &plt_calls(&files, &modules),
            &options,
            exit_policy,
            files.executable(),
        );
        if let Some(executable) = modules.first_mut() {
            executable.add_got_calls(got.iter().map(|landing| landing.function.clone()));
        }
        let (landings, executable_code_vaddr) =
            landings::plan(&plt_calls(&files, &modules), &options, exit_policy, &got);
        let mut plan = ProbePlan {
            table: FunctionTable::default(),
            exits: Vec::new(),
            files: Vec::new(),
            exit_policy,
            return_probes,
            landings,
            executable_code_vaddr,
            dlopen_dlclose_sites,
            unwinder_sites,
            pairing,
            exits_before_return_value: Default::default(),
            go_functions: Default::default(),
            events: Default::default(),
        };
        let unmatched = unmatched_value_requests(&options, &modules);
        let go_runtime_left_out = modules.iter().map(|m| m.go_runtime_left_out).sum();
        for module in modules {
            plan.add(module);
        }
        if let Some(program) = go_program {
            plan.go_functions = go::go_functions(&plan.table, program);
        }
        let traced: Vec<_> = (files.traced.iter().enumerate())
            .filter_map(|(module, &index)| {
                let opened = &files.opened[index];
                let elf = opened.elf.as_ref().ok()?;
                Some((module as u32, &opened.file, elf))
            })
            .collect();
        plan.events = events::plan(&options.events, &traced, &mut plan)?;
        if !plan.unwinder_sites.is_empty() {
            plan.events.stack_repair = Some(events::plan_stack_repair(&mut plan));
        }
        // A system call, kernel function or linux:schedule --stack names captures the user and
        // kernel stacks at its entry.
        let syscalls = plan.events.syscalls.iter().map(|&(_, id)| id);
        let kernel_functions = plan.events.kernel_functions.iter().map(|k| k.function);
        let kernel = syscalls.chain(kernel_functions).chain(plan.events.off_cpu);
        for id in kernel.collect::<Vec<_>>() {
            let function = &mut plan.table.functions[id as usize];
            function.user_stack = options
                .values
                .user_stacks
                .iter()
                .any(|glob| glob.matches(&function.name));
            if plan.events.off_cpu == Some(id) {
                plan.events.off_cpu_stack = function.user_stack;
            }
        }
        kernel_values::plan_kernel_values(&options.values, &mut plan);
        warn_unmatched_value_requests(&unmatched, &plan);
        // Their probe costs are those of the emulated site in the library, not of the stub.
        for id in plan.landings.functions() {
            plan.table.functions[id as usize].probes.entry = Execution::Emulated;
        }
        if is_go {
            go::say_go_program(&plan.exits, go_runtime_left_out);
        } else if let Some(switcher) = &switcher {
            exits::say_stack_switches(switcher, &plan.exits);
        }
        say_planned(&plan);
        log::debug!("planned in {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
        let identities = plan.files.iter().map(|file| identity_of(&file.open_path));
        Ok(Planner {
            options,
            scope: files.scope,
            identities: identities.collect(),
            plan,
        })
    }

    /// What is planned so far.
    pub fn plan(&self) -> &ProbePlan {
        &self.plan
    }

    /// The values the plan's functions capture, and those planned later will.
    pub fn value_requests(&self) -> &super::ValueRequests {
        &self.options.values
    }

    /// Plans the files of `loaded` not planned yet, as modules and functions numbered on from
    /// the plan's. On error, the plan stays as it was.
    pub fn extend(&mut self, loaded: Loaded) -> Result<Extension, PlanError> {
        let first_module = self.plan.files.len();
        let first_function = self.plan.table.functions.len();
        let (mut modules, planned) = match loaded {
            Loaded::Libraries(mapped) => (Vec::new(), self.plan_libraries(mapped)?),
            Loaded::Program(program) => self.plan_program(program)?,
        };
        for module in planned {
            self.plan.add(module);
        }
        let added = &self.plan.files[first_module..];
        (self.identities).extend(added.iter().map(|file| identity_of(&file.open_path)));
        modules.extend(first_module..self.plan.files.len());
        let table = FunctionTable {
            modules: self.plan.table.modules[first_module..].to_vec(),
            functions: self.plan.table.functions[first_function..].to_vec(),
            symbol_origins: (self.plan.table.symbol_origins.iter())
                .filter(|(module, _)| *module as usize >= first_module)
                .cloned()
                .collect(),
        };
        Ok(Extension { table, modules })
    }

    /// Plans the libraries among `mapped` that `--nest-lib` matches and that are not planned yet,
    /// binding their PLT calls as the program's.
    fn plan_libraries(
        &self,
        mapped: Vec<TracedFile>,
    ) -> Result<Vec<module::PlannedModule>, PlanError> {
        mapped
            .into_iter()
            .filter(|file| self.options.nest_libs.matches(&file.path))
            .filter(|file| self.module_of(file).is_none())
            .map(|file| {
                let mut elf =
                    ElfFile::open_as(&file.open_path, Path::new(&file.path)).map_err(|error| {
                        PlanError::Symbols {
                            path: file.path.clone(),
                            error,
                        }
                    })?;
                elf.load_debug_symbols(&self.options.debug, Path::new(&file.path));
                let (exits, return_probes) = (self.plan.exit_policy, self.plan.return_probes);
                module::plan(
                    &file,
                    &elf,
                    &self.options,
                    exits,
                    return_probes,
                    &self.scope,
                )
            })
            .collect()
    }

    /// The modules of `program` planned already, and its traced files not planned yet, planned
    /// with its own binding of PLT calls, and their exits on instructions when it maps an
    /// unwinder (see [`ExitPolicy::for_execed_program`]).
    fn plan_program(
        &self,
        program: Program,
    ) -> Result<(Vec<usize>, Vec<module::PlannedModule>), PlanError> {
        let files = ProgramFiles::select(program, &self.options, UnmatchedPatterns::Ignore);
        let (exits, return_probes) = match exits::stack_switcher(&files.opened) {
            Some(switcher) => (
                exits::stack_switching_policy(self.options.exits, &switcher),
                ReturnProbes::Never,
            ),
            None => (
                ExitPolicy::for_execed_program(
                    self.options.exits,
                    self.plan.exit_policy,
                    &watches::unwinder_sites(&files.opened),
                    &files.executable().file.path,
                ),
                ReturnProbes::Allowed,
            ),
        };
        let mut known = Vec::new();
        let mut planned = Vec::new();
        for position in 0..files.traced.len() {
            let index = files.traced[position];
            let file = &files.opened[index].file;
            if let Some(module) = self.module_of(file) {
                known.push(module);
                continue;
            }
            let Ok(elf) = &files.opened[index].elf else {
                return Err(files.into_read_error(index));
            };
            planned.push(module::plan(
                file,
                elf,
                &self.options,
                exits,
                return_probes,
                &files.scope,
            )?);
        }
        Ok((known, planned))
    }

    /// Where the traced process maps the file of `module` now: probes attached from now on open
    /// it there (a library closed and opened again with dlopen may be elsewhere, its old place
    /// gone or another file's).
    pub fn mapped_at(&mut self, module: usize, open_path: std::path::PathBuf) {
        self.plan.files[module].open_path = open_path;
    }

    /// The module of `file`, when it is planned: the same file (device and inode) as a planned
    /// one, or, where either cannot be told, one of the same path.
    pub fn module_of(&self, file: &TracedFile) -> Option<usize> {
        let identity = identity_of(&file.open_path);
        (self.plan.files.iter().zip(&self.identities)).position(|(known, known_identity)| {
            match (identity, known_identity) {
                (Some(identity), Some(known_identity)) => identity == *known_identity,
                _ => known.path == file.path,
            }
        })
    }
}

/// A file's device and inode: a library the loader found through a symlinked directory (`/lib`
/// on merged-/usr systems) shows in `/proc/PID/maps` under another path, and probing it twice
/// would count each of its calls twice.
type FileIdentity = (u64, u64);

fn identity_of(path: &Path) -> Option<FileIdentity> {
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.dev(), metadata.ino()))
}

/// The library calls of the program's traced files (`modules`, as planned so far).
fn plt_calls<'a>(
    files: &'a ProgramFiles,
    modules: &'a [module::PlannedModule],
) -> landings::PltCalls<'a> {
    landings::PltCalls {
        callers: landing_callers(files, modules),
        libraries: files.libraries(),
        scope: &files.scope,
    }
}

/// The traced files of the program, with their planned functions numbered as the plan will.
fn landing_callers<'a>(
    files: &'a ProgramFiles,
    modules: &'a [module::PlannedModule],
) -> Vec<landings::Caller<'a>> {
    let mut first_id = 0;
    (files.traced.iter().zip(modules))
        .map(|(&index, module)| {
            let exit_sites = module.exits.iter().flat_map(|exit| match exit {
                ExitProbe::Sites(sites) => sites.as_slice(),
                ExitProbe::Uretprobe(_) => &[],
            });
            let caller = landings::Caller {
                file: &files.opened[index],
                functions: &module.functions,
                first_id,
                // Libraries follow the executable in `opened`.
                loaded_with_program: index <= files.loaded_with_program,
                probe_sites: (module.functions.iter())
                    .filter(|f| f.kind.is_probed_code())
                    .map(|f| f.offset)
                    .chain(exit_sites.copied())
                    .collect(),
            };
            first_id += module.functions.len() as FunctionId;
            caller
        })
        .collect()
}

/// The `-A`/`-R` requests whose functions match none of `modules`.
fn unmatched_value_requests<'o>(
    options: &'o PlanOptions,
    modules: &[module::PlannedModule],
) -> Vec<&'o ValueRequest> {
    let requests = options.values.requests.iter();
    requests
        .filter(|request| {
            let mut names = modules.iter().flat_map(|m| &m.functions);
            !names.any(|f| request.functions.matches(&f.name))
        })
        .collect()
}

/// Warns of each of `unmatched` that matches no kernel function of `plan` either.
fn warn_unmatched_value_requests(unmatched: &[&ValueRequest], plan: &ProbePlan) {
    for request in unmatched {
        let mut kernel_functions = plan.events.kernel_functions.iter();
        let name = |id| plan.table.name_of(id);
        if !kernel_functions.any(|k| request.functions.matches(name(k.function))) {
            log::warn!(
                "{}: no traced function matches `{}`",
                request.text,
                request.functions.as_str()
            );
        }
    }
}

/// Says how many functions of each file are planned and, when exits are probed on their
/// instructions, which functions keep a uretprobe and why (`--debug`).
fn say_planned(plan: &ProbePlan) {
    if !log::log_enabled!(log::Level::Debug) {
        return;
    }
    for (index, file) in plan.files.iter().enumerate() {
        let count = plan.table.functions_in_module(index);
        log::debug!(
            "planned {} in {}",
            crate::diagnostics::plural(count as u64, "function", "functions"),
            file.path
        );
    }
    if plan.exit_policy != ExitPolicy::Ret {
        return;
    }
    let uretprobes: Vec<(&str, &ExitProbe)> = plan
        .table
        .functions
        .iter()
        .zip(&plan.exits)
        .filter(|(_, exit)| matches!(exit, ExitProbe::Uretprobe(_)))
        .map(|(f, exit)| (f.name.as_str(), exit))
        .collect();
    log::debug!(
        "{} functions keep a uretprobe (exceptions cannot unwind through them)",
        uretprobes.len()
    );
    for (name, exit) in uretprobes {
        if let ExitProbe::Uretprobe(why) = exit {
            log::debug!("  {name}: {why}");
        }
    }
}
