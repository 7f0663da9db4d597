//! Planning on ELF fixtures compiled at test time (`testdata/planned.c`, and the elf module's
//! `fixture.c` and `fixture.cpp`): no root, no BPF, no process.

use std::path::{Path, PathBuf};

use tempfile::TempDir;

use super::module::PlannedModule;
use super::*;
use crate::elf::tests::compile;
use crate::elf::{FunctionSymbol, NoExitSites, ProbeSite};
use crate::table::{Execution, ExitKind, FunctionId, FunctionKind, TracedFunction};

const PLANNED_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/plan/testdata/planned.c");
const FIXTURE_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/elf/testdata/fixture.c");
const FIXTURE_CPP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/elf/testdata/fixture.cpp");

/// `planned.c` as a PIE whose calls of libc go through the PLT.
fn planned_program(dir: &TempDir, name: &str, flags: &[&str]) -> PathBuf {
    let mut all = vec!["-fno-builtin", "-fcf-protection=none"];
    all.extend_from_slice(flags);
    compile(dir, "cc", PLANNED_C, name, &all)
}

fn plan_of(program: &Path, options: PlanOptions) -> Result<Planner, PlanError> {
    Planner::new(options, Program::about_to_start(program))
}

fn function<'a>(plan: &'a ProbePlan, name: &str) -> (FunctionId, &'a TracedFunction) {
    let id = plan.table.functions.iter().position(|f| f.name == name);
    let id = id.unwrap_or_else(|| panic!("{name} is not planned"));
    (id as FunctionId, &plan.table.functions[id])
}

fn exit_of<'a>(plan: &'a ProbePlan, name: &str) -> &'a ExitProbe {
    &plan.exits[function(plan, name).0 as usize]
}

fn stub_count(plan: &ProbePlan) -> usize {
    let stubs = plan.table.functions.iter();
    stubs.filter(|f| f.kind == FunctionKind::Plt).count()
}

fn names(table: &FunctionTable) -> Vec<&str> {
    table.functions.iter().map(|f| f.name.as_str()).collect()
}

fn globs(functions: &[&str], no_functions: &[&str]) -> crate::filter::FilterSpec {
    let owned = |globs: &[&str]| globs.iter().map(|g| g.to_string()).collect::<Vec<_>>();
    crate::filter::FilterSpec::parse(&owned(functions), &owned(no_functions), None, None, &[])
        .unwrap()
}

#[test]
fn exits_get_uretprobes_unless_the_function_saves_its_return_address() {
    let dir = TempDir::new().unwrap();
    let program = planned_program(&dir, "planned", &[]);
    let planner = plan_of(&program, PlanOptions::default()).unwrap();
    let plan = planner.plan();
    assert_eq!(plan.exit_policy, ExitPolicy::Uretprobe);
    assert_eq!(plan.exits.len(), plan.table.functions.len());
    for name in ["leaf", "caller", "malloc@plt"] {
        assert_eq!(
            exit_of(plan, name),
            &ExitProbe::Uretprobe(NoExitSites::UretprobesAsked),
            "{name}"
        );
        assert_eq!(function(plan, name).1.probes.exit, ExitKind::Uretprobe);
    }
    // main's return probe would be pending for the whole run, holding up other tracers'
    // releases: its exits are its instructions...
    let ExitProbe::Sites(sites) = exit_of(plan, "main") else {
        panic!("{:?}", exit_of(plan, "main"));
    };
    assert!(!sites.is_empty());
    // ...but where stacks are captured, whose return addresses the kernel puts back pairing
    // return probes in order, it keeps its return probe.
    let mut options = PlanOptions::default();
    options.values.user_stacks = vec![crate::filter::Glob::new("leaf").unwrap()];
    let with_stacks = plan_of(&program, options).unwrap();
    assert_eq!(
        exit_of(with_stacks.plan(), "main"),
        &ExitProbe::Uretprobe(NoExitSites::UretprobesAsked)
    );
    // A uretprobe would break the longjmp back to setjmp's caller: its exit is where it returns.
    let ExitProbe::Sites(sites) = exit_of(plan, "_setjmp@plt") else {
        panic!("{:?}", exit_of(plan, "_setjmp@plt"));
    };
    assert_eq!(sites.len(), 1, "one call of _setjmp, in jumps");
    assert_eq!(
        function(plan, "_setjmp@plt").1.probes.exit,
        ExitKind::Instruction
    );
}

/// A stripped program's stubs are called from code no symbol describes: their calls, and so
/// A program that switches stacks (test/coroutines.c: getcontext, makecontext, swapcontext) gets
/// no uretprobe, whatever `--exit-probes` says: the kernel would return from the frames of one
/// stack to those of the other (see src/elf/contexts.rs). Every exit is probed on instructions,
/// a leaf's too.
#[test]
fn a_program_that_switches_stacks_gets_no_uretprobe() {
    let dir = TempDir::new().unwrap();
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/test/coroutines.c");
    let program = compile(&dir, "cc", source, "coroutines", &["-O2"]);
    for exits in [None, Some(ExitPolicy::Uretprobe), Some(ExitPolicy::Ret)] {
        let options = PlanOptions {
            exits,
            ..PlanOptions::default()
        };
        let planner = plan_of(&program, options).unwrap();
        let plan = planner.plan();
        assert_eq!(plan.exit_policy, ExitPolicy::Ret, "{exits:?}");
        assert_eq!(plan.return_probes, ReturnProbes::Never, "{exits:?}");
        let uretprobes: Vec<&str> = (plan.table.functions.iter().zip(&plan.exits))
            .filter(|(_, exit)| matches!(exit, ExitProbe::Uretprobe(_)))
            .map(|(function, _)| function.name.as_str())
            .collect();
        assert_eq!(uretprobes, Vec::<&str>::new(), "{exits:?}");
        for name in ["leaf", "pass_to", "swapcontext@plt"] {
            let ExitProbe::Sites(sites) = exit_of(plan, name) else {
                unreachable!("no uretprobe")
            };
            assert!(!sites.is_empty(), "{exits:?}: {name} has no exit probe");
        }
    }
}

/// the exits of setjmp's stub (and of every stub under `--exit-probes=ret`), are found from its
/// `.eh_frame`, where they are in the same program with its symbols.
#[test]
fn a_stripped_program_has_its_stubs_exits_where_its_symbols_would_put_them() {
    let dir = TempDir::new().unwrap();
    let program = planned_program(&dir, "planned", &[]);
    let stripped = planned_program(&dir, "planned-stripped", &["-s"]);
    for policy in [ExitPolicy::Uretprobe, ExitPolicy::Ret] {
        let options = || PlanOptions {
            exits: Some(policy),
            ..PlanOptions::default()
        };
        let with_symbols = plan_of(&program, options()).unwrap();
        let without = plan_of(&stripped, options()).unwrap();
        let (with_symbols, without) = (with_symbols.plan(), without.plan());
        assert!(stub_count(without) > 5, "{:?}", names(&without.table));
        let ExitProbe::Sites(sites) = exit_of(without, "_setjmp@plt") else {
            panic!("{:?}", exit_of(without, "_setjmp@plt"));
        };
        assert_eq!(sites.len(), 1, "{policy:?}: one call of _setjmp, in jumps");
        // The same stub at the same offset (one named after the program's own ifunc with
        // symbols, after its resolver's address without).
        let exit_at = |offset: u64| {
            let mut functions = with_symbols.table.functions.iter();
            let id = functions.position(|f| f.offset == offset && f.kind == FunctionKind::Plt);
            &with_symbols.exits[id.expect("the stub planned with symbols too")]
        };
        for (id, stub) in without.table.functions.iter().enumerate() {
            let exit = &without.exits[id];
            assert_eq!(exit, exit_at(stub.offset), "{policy:?}: {}", stub.name);
        }
    }
}

#[test]
fn ret_probes_sit_on_the_exits_where_they_can() {
    let dir = TempDir::new().unwrap();
    let program = planned_program(&dir, "planned", &[]);
    let options = PlanOptions {
        exits: Some(ExitPolicy::Ret),
        ..PlanOptions::default()
    };
    let planner = plan_of(&program, options).unwrap();
    let plan = planner.plan();
    assert_eq!(plan.exit_policy, ExitPolicy::Ret);
    let ExitProbe::Sites(sites) = exit_of(plan, "caller") else {
        panic!("{:?}", exit_of(plan, "caller"));
    };
    assert!(!sites.is_empty());
    assert_eq!(
        function(plan, "caller").1.probes.exit,
        ExitKind::Instruction
    );
    // No exception can start below a function that calls nothing: a uretprobe is cheaper.
    assert_eq!(
        exit_of(plan, "leaf"),
        &ExitProbe::Uretprobe(NoExitSites::Leaf)
    );
    assert_eq!(function(plan, "leaf").1.probes.exit, ExitKind::Uretprobe);
    // tail_labs's jump to labs@plt is its exit, and makes labs@plt's return go unseen.
    assert!(matches!(exit_of(plan, "tail_labs"), ExitProbe::Sites(_)));
    assert!(matches!(
        exit_of(plan, "labs@plt"),
        ExitProbe::Uretprobe(NoExitSites::PltTailJump { .. })
    ));
}

#[test]
fn an_attached_process_with_an_unwinder_gets_ret_probes_unless_seized() {
    let dir = TempDir::new().unwrap();
    let program = compile(&dir, "c++", FIXTURE_CPP, "fixture-cpp", &[]);
    let started = plan_of(&program, PlanOptions::default()).unwrap();
    let plan = started.plan();
    assert_eq!(plan.exit_policy, ExitPolicy::Uretprobe);
    let unwinders: Vec<&str> = plan
        .unwinder_sites
        .iter()
        .map(|sites| sites.file.file_name().unwrap().to_str().unwrap())
        .collect();
    assert_eq!(unwinders, ["libgcc_s.so.1"]);
    assert_eq!(plan.unwinder_sites[0].offsets.len(), 5);

    let attached = PlanOptions {
        origin: ProcessOrigin::Attached,
        ..PlanOptions::default()
    };
    assert_eq!(
        plan_of(&program, attached).unwrap().plan().exit_policy,
        ExitPolicy::Ret
    );
    // Held with ptrace, it can be paused as a started command is: uretprobes and the shadow
    // stack.
    let seized = PlanOptions {
        origin: ProcessOrigin::Seized,
        ..PlanOptions::default()
    };
    assert_eq!(
        plan_of(&program, seized).unwrap().plan().exit_policy,
        ExitPolicy::Uretprobe
    );
    // As chosen, whatever the process.
    let chosen = PlanOptions {
        origin: ProcessOrigin::Attached,
        exits: Some(ExitPolicy::Uretprobe),
        ..PlanOptions::default()
    };
    assert_eq!(
        plan_of(&program, chosen).unwrap().plan().exit_policy,
        ExitPolicy::Uretprobe
    );

    // Plain C maps no unwinder: uretprobes even when attached.
    let c = planned_program(&dir, "planned", &[]);
    let attached = PlanOptions {
        origin: ProcessOrigin::Attached,
        ..PlanOptions::default()
    };
    let plan = plan_of(&c, attached).unwrap();
    assert!(plan.plan().unwinder_sites.is_empty());
    assert_eq!(plan.plan().exit_policy, ExitPolicy::Uretprobe);
}

#[test]
fn plt_calls_land_in_libc_unless_a_reason_keeps_them_at_their_stub() {
    let dir = TempDir::new().unwrap();
    let program = planned_program(&dir, "planned", &["-pie", "-fPIE"]);
    let planner = plan_of(&program, PlanOptions::default()).unwrap();
    let plan = planner.plan();
    let landings = &plan.landings;
    let (malloc, stub) = function(plan, "malloc@plt");
    assert!(landings.contains(malloc));
    // Probed at an emulated site in libc, it costs what that site costs.
    assert_eq!(stub.probes.entry, Execution::Emulated);
    let (library, calls) = &landings.libraries()[0];
    let libc = library.file_name().unwrap().to_str().unwrap();
    assert!(libc.starts_with("libc.so"), "{libc}");
    let call = calls.iter().find(|call| call.function == malloc).unwrap();
    let symbols = crate::elf::read_function_symbols(&program).unwrap();
    let address = symbols
        .iter()
        .find(|f| f.name == "malloc@plt")
        .unwrap()
        .address;
    assert_eq!(call.route, Route::ExecutableStub(address as u32));
    assert!(plan.executable_code_vaddr > 0);
    // tail_malloc's `jmp malloc@plt` is probed on the jump, as a call through the stub.
    let (file, jumps) = &landings.tail_jumps()[0];
    assert_eq!(file, &program);
    assert_eq!(jumps.len(), 1, "{jumps:?}");
    assert_eq!(jumps[0].function, malloc);
    let tail_malloc = symbols.iter().find(|f| f.name == "tail_malloc").unwrap();
    let jump = tail_malloc.offset..tail_malloc.offset + tail_malloc.size;
    assert!(jump.contains(&jumps[0].offset), "{jumps:?} {tail_malloc:?}");

    for (name, why) in [
        ("labs@plt", StubKept::SingleStepped),
        ("calloc@plt", StubKept::TailJumpOnProbe),
        ("_setjmp@plt", StubKept::SavesReturnAddress),
        ("strlen@plt", StubKept::Ifunc),
        ("add_one@plt", StubKept::OwnIfunc),
    ] {
        assert!(!landings.contains(function(plan, name).0), "{name}");
        assert!(landings.kept(why) >= 1, "{name}: {why:?}");
    }
    // realpath has two versions; the program asks for the default one, where it binds.
    assert!(landings.contains(function(plan, "realpath@plt").0));
    assert_eq!(landings.kept(StubKept::Versioned), 0);
    assert_eq!(landings.kept(StubKept::OwnIfunc), 1);
    assert_eq!(landings.kept(StubKept::SavesReturnAddress), 1);
    assert_eq!(landings.kept(StubKept::NotOnlyCalled), 0);
    let stubs = stub_count(plan);
    let kept: usize = ALL_KEPT.iter().map(|&why| landings.kept(why)).sum();
    assert_eq!(landings.len() + kept, stubs);
}

const ALL_KEPT: [StubKept; 25] = [
    StubKept::Follow,
    StubKept::ExitsAtCallers,
    StubKept::ProbeAtEntry,
    StubKept::Preloaded,
    StubKept::Unreadable,
    StubKept::NotPositionIndependent,
    StubKept::OpenedWithDlopen,
    StubKept::SeveralCodeSegments,
    StubKept::TooManyLibraries,
    StubKept::OwnIfunc,
    StubKept::NotOnlyCalled,
    StubKept::TailJumpOnProbe,
    StubKept::SavesReturnAddress,
    StubKept::Unwinder,
    StubKept::Beyond4GiB,
    StubKept::BoundToNoLibrary,
    StubKept::BoundToProgram,
    StubKept::IntoTracedLibrary,
    StubKept::Ifunc,
    StubKept::IfuncOfOtherBuild,
    StubKept::IfuncNotResolved,
    StubKept::IfuncWithoutSymbols,
    StubKept::SingleStepped,
    StubKept::Versioned,
    StubKept::Unresolved,
];

#[test]
fn got_calls_land_in_libc_as_functions_of_their_own() {
    let dir = TempDir::new().unwrap();
    let program = planned_program(&dir, "planned-noplt", &["-fno-plt"]);
    let planner = plan_of(&program, PlanOptions::default()).unwrap();
    let plan = planner.plan();
    let (malloc, function) = function(plan, "malloc@got");
    assert_eq!(function.kind, FunctionKind::Got);
    assert!(plan.landings.contains(malloc));
    let calls = plan
        .landings
        .libraries()
        .iter()
        .flat_map(|(_, calls)| calls);
    let call = calls.clone().find(|call| call.function == malloc).unwrap();
    assert!(
        matches!(call.route, Route::ExecutableGot(slot) if slot > 0),
        "{call:?}"
    );
    assert!(plan.executable_code_vaddr > 0);
    // labs has nothing the kernel emulates near its start: with no stub to fall back on, its
    // calls are not traced.
    let names: Vec<&str> = plan
        .table
        .functions
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert!(
        !names.contains(&"labs@got") && !names.contains(&"malloc@plt"),
        "{names:?}"
    );
    // Every GOT function lands.
    let got = plan.table.functions.iter().enumerate();
    let mut got = got.filter(|(_, f)| f.kind == FunctionKind::Got);
    assert!(got.all(|(id, _)| plan.landings.contains(id as FunctionId)));

    // Without landings, no GOT call is traced.
    let entry = PlanOptions {
        sites: SitePolicy::Entry,
        ..PlanOptions::default()
    };
    let plan = plan_of(&program, entry).unwrap();
    let plan = plan.plan();
    assert!(plan
        .table
        .functions
        .iter()
        .all(|f| f.kind != FunctionKind::Got));
}

#[test]
fn plt_calls_into_ifuncs_land_in_the_implementation_utraces_loader_chose() {
    let dir = TempDir::new().unwrap();
    let program = planned_program(&dir, "planned", &["-pie", "-fPIE"]);
    let resolved = crate::record::resolve_own_ifuncs().unwrap();
    let known = PlanOptions {
        ifuncs: IfuncChoices::Known(resolved.clone()),
        ..PlanOptions::default()
    };
    let planner = plan_of(&program, known.clone()).unwrap();
    let plan = planner.plan();
    let (strlen, stub) = function(plan, "strlen@plt");
    assert!(plan.landings.contains(strlen));
    assert_eq!(stub.probes.entry, Execution::Emulated);
    // In libc's debug file (libc6-dbg), the implementation is a local symbol: __strlen_avx2 or
    // whichever this CPU gets.
    let implementation = plan.landings.implementation_of(strlen);
    assert!(
        implementation.is_some_and(|name| name.starts_with("__strlen_")),
        "{implementation:?} (is libc6-dbg installed? tools/setup.sh installs it)"
    );
    assert_eq!(plan.landings.kept(StubKept::Ifunc), 0);
    // Another build of libc than utrace's: its choices say nothing.
    let other_build: Vec<ResolvedIfuncs> = (resolved.iter().cloned())
        .map(|library| ResolvedIfuncs {
            build_id: b"another build".to_vec(),
            ..library
        })
        .collect();
    let other = PlanOptions {
        ifuncs: IfuncChoices::Known(other_build),
        ..PlanOptions::default()
    };
    let planner = plan_of(&program, other).unwrap();
    assert!(!planner.plan().landings.contains(strlen));
    assert_eq!(planner.plan().landings.kept(StubKept::IfuncOfOtherBuild), 1);

    // Without libc's debug file the implementation's size is unknown: the stub stays.
    let no_debug_files = PlanOptions {
        debug: DebugLookup {
            roots: vec![dir.path().to_owned()],
            debuginfod: crate::elf::debuginfod::Debuginfod::default(),
        },
        ..known
    };
    let planner = plan_of(&program, no_debug_files).unwrap();
    assert!(!planner.plan().landings.contains(strlen));
    assert_eq!(
        planner.plan().landings.kept(StubKept::IfuncWithoutSymbols),
        1
    );

    // Tunables in the process's environment: utrace does not know its choice.
    let tunables = PlanOptions {
        ifuncs: IfuncChoices::judge(
            Ok(Some("glibc.cpu.hwcaps=-AVX2_Usable".to_owned())),
            None,
            Ok(resolved),
        ),
        ..PlanOptions::default()
    };
    let planner = plan_of(&program, tunables).unwrap();
    assert!(!planner.plan().landings.contains(strlen));
    assert_eq!(planner.plan().landings.kept(StubKept::Ifunc), 1);
}

#[test]
fn every_stub_keeps_its_probe_when_the_options_or_the_program_say_so() {
    let dir = TempDir::new().unwrap();
    let pie = planned_program(&dir, "planned", &["-pie", "-fPIE"]);
    let fixed = planned_program(&dir, "planned-fixed", &["-no-pie"]);
    let cases = [
        (
            &pie,
            PlanOptions {
                follow: true,
                ..PlanOptions::default()
            },
            StubKept::Follow,
        ),
        (
            &pie,
            PlanOptions {
                exits: Some(ExitPolicy::Ret),
                ..PlanOptions::default()
            },
            StubKept::ExitsAtCallers,
        ),
        (
            &pie,
            PlanOptions {
                sites: SitePolicy::Entry,
                ..PlanOptions::default()
            },
            StubKept::ProbeAtEntry,
        ),
        (
            &pie,
            PlanOptions {
                preloaded_libraries: true,
                ..PlanOptions::default()
            },
            StubKept::Preloaded,
        ),
        (
            &pie,
            PlanOptions {
                kernel_lacks_sessions: true,
                ..PlanOptions::default()
            },
            StubKept::NoSessions,
        ),
        (
            &fixed,
            PlanOptions::default(),
            StubKept::NotPositionIndependent,
        ),
    ];
    for (program, options, why) in cases {
        let planner = plan_of(program, options).unwrap();
        let plan = planner.plan();
        let stubs = stub_count(plan);
        assert!(plan.landings.is_empty(), "{why:?}");
        assert_eq!(plan.landings.kept(why), stubs, "{why:?}");
        assert_eq!(plan.executable_code_vaddr, 0, "{why:?}");
    }
}

#[test]
fn plt_flags_select_and_name_the_stubs_by_their_library() {
    let dir = TempDir::new().unwrap();
    let program = planned_program(&dir, "planned", &[]);
    let patterns = |flag, glob: &str| LibraryPatterns::parse(flag, &[glob.to_owned()]).unwrap();
    let options = PlanOptions {
        plt_libraries: PltLibraries {
            except: patterns("--no-lib", "libc.so*"),
            name_by_library: true,
            ..PltLibraries::default()
        },
        ..PlanOptions::default()
    };
    let planner = plan_of(&program, options).unwrap();
    let plan = planner.plan();
    let stubs: Vec<&str> = plan
        .table
        .functions
        .iter()
        .filter(|f| f.kind == FunctionKind::Plt)
        .map(|f| f.name.as_str())
        .collect();
    // The program's own ifunc binds to the program; everything else to libc.
    assert_eq!(stubs, ["add_one@planned"]);
    assert!(plan.landings.is_empty());
}

#[test]
fn the_function_filter_decides_what_is_probed() {
    let dir = TempDir::new().unwrap();
    let program = planned_program(&dir, "planned", &[]);
    let options = PlanOptions {
        functions: globs(&["caller,leaf,*@plt"], &["l*"]),
        ..PlanOptions::default()
    };
    let planner = plan_of(&program, options).unwrap();
    let planned = names(&planner.plan().table);
    assert!(planned.contains(&"caller"), "{planned:?}");
    assert!(planned.contains(&"malloc@plt"), "{planned:?}");
    for hidden in ["leaf", "labs@plt", "longjmp@plt", "main", "jumps"] {
        assert!(!planned.contains(&hidden), "{hidden} in {planned:?}");
    }
    assert_eq!(planner.plan().exits.len(), planned.len());

    let options = PlanOptions {
        functions: globs(&["no_such_function"], &[]),
        ..PlanOptions::default()
    };
    let error = plan_of(&program, options).unwrap_err();
    assert!(matches!(error, PlanError::NothingToTrace { .. }), "{error}");
    assert_eq!(
        error.to_string(),
        format!(
            "no function of {} matches --function/--no-function: nothing to trace",
            program.display()
        )
    );
}

#[test]
fn an_unreadable_program_is_a_typed_error_naming_it() {
    let dir = TempDir::new().unwrap();
    let script = dir.path().join("script");
    std::fs::write(&script, "#!/bin/sh\n").unwrap();
    let error = plan_of(&script, PlanOptions::default()).unwrap_err();
    let PlanError::Symbols {
        path,
        error: source,
    } = &error
    else {
        panic!("{error}");
    };
    assert_eq!(path, &script.display().to_string());
    assert!(matches!(source, crate::elf::ElfError::NotElf { .. }));
    // The file's own error names it, once.
    assert_eq!(
        error.to_string(),
        format!(
            "{} is not an ELF file: give the path of an executable or a shared library",
            script.display()
        )
    );
}

#[test]
fn a_followed_exec_is_planned_on_from_the_table() {
    let dir = TempDir::new().unwrap();
    let first = planned_program(&dir, "planned", &[]);
    let second = compile(&dir, "cc", FIXTURE_C, "fixture", &[]);
    let options = PlanOptions {
        follow: true,
        ..PlanOptions::default()
    };
    let mut planner = plan_of(&first, options).unwrap();
    let before = planner.plan().table.clone();

    let exec = Loaded::Program(Program::about_to_start(&second));
    let added = planner.extend(exec).unwrap();
    let plan = planner.plan();
    assert_eq!(added.modules, [1]);
    assert_eq!(added.table.modules, [second.display().to_string()]);
    assert!(added.table.functions.iter().all(|f| f.module == 1));
    assert!(names(&added.table).contains(&"checked_parse"));
    // Ids go on from the table: the plan is the table before, then what was added.
    let mut whole = before.clone();
    whole.extend(added.table);
    assert_eq!(plan.table, whole);
    assert_eq!(plan.exits.len(), plan.table.functions.len());
    assert_eq!(plan.files.len(), 2);

    // A program already planned is not planned again: its modules are those it had.
    let again = planner.extend(Loaded::Program(Program::about_to_start(&first)));
    let again = again.unwrap();
    assert_eq!(again.modules, [0]);
    assert!(again.table.modules.is_empty() && again.table.functions.is_empty());
    assert_eq!(planner.plan().table, whole);
}

#[test]
fn a_followed_exec_of_a_program_with_an_unwinder_probes_exits_on_instructions() {
    let dir = TempDir::new().unwrap();
    let launcher = planned_program(&dir, "planned", &[]);
    let cpp = compile(&dir, "c++", FIXTURE_CPP, "fixture-cpp", &[]);
    let options = PlanOptions {
        follow: true,
        ..PlanOptions::default()
    };
    let mut planner = plan_of(&launcher, options.clone()).unwrap();
    assert_eq!(planner.plan().exit_policy, ExitPolicy::Uretprobe);
    let exec = || Loaded::Program(Program::about_to_start(&cpp));
    let added = planner.extend(exec()).unwrap();
    let first = planner.plan().table.functions.len() - added.table.functions.len();
    let exits = &planner.plan().exits[first..];
    // The shadow stack follows only the target: a uretprobe would kill an exception.
    assert!(exits.iter().any(|exit| matches!(exit, ExitProbe::Sites(_))));
    assert!(!exits.contains(&ExitProbe::Uretprobe(NoExitSites::UretprobesAsked)));
    let kinds = added.table.functions.iter().map(|f| f.probes.exit);
    assert!(kinds.clone().any(|kind| kind == ExitKind::Instruction));
    // The launcher keeps its uretprobes.
    assert_eq!(planner.plan().exit_policy, ExitPolicy::Uretprobe);
    assert_eq!(
        exit_of(planner.plan(), "caller"),
        &ExitProbe::Uretprobe(NoExitSites::UretprobesAsked)
    );

    // As chosen, when the user chose.
    let chosen = PlanOptions {
        exits: Some(ExitPolicy::Uretprobe),
        ..options
    };
    let mut planner = plan_of(&launcher, chosen).unwrap();
    let added = planner.extend(exec()).unwrap();
    let first = planner.plan().table.functions.len() - added.table.functions.len();
    let asked = ExitProbe::Uretprobe(NoExitSites::UretprobesAsked);
    assert!(planner.plan().exits[first..].contains(&asked));
}

/// A program built in `dir`, a library `libfixture.so` beside it that it does not load, and the
/// program planned under `--nest-lib 'libfixture*'`.
fn program_nesting_a_library(dir: &TempDir) -> (PathBuf, PathBuf, Planner) {
    let program = planned_program(dir, "planned", &[]);
    let flags = ["-shared", "-fPIC", "-DFIXTURE_LIBRARY"];
    let library = compile(dir, "cc", FIXTURE_C, "libfixture.so", &flags);
    let options = PlanOptions {
        nest_libs: LibraryPatterns::parse("--nest-lib", &["libfixture*".into()]).unwrap(),
        ..PlanOptions::default()
    };
    let planner = plan_of(&program, options).unwrap();
    (program, library, planner)
}

#[test]
fn a_dlopened_library_is_planned_once_when_nest_lib_selects_it() {
    let dir = TempDir::new().unwrap();
    let (program, library, mut planner) = program_nesting_a_library(&dir);
    let functions_before = planner.plan().table.functions.len();
    // Where dlopen and dlclose are, to watch for libraries loaded and unloaded later.
    let watched = planner
        .plan()
        .dlopen_dlclose_sites
        .clone()
        .expect("libc has dlopen");
    let libc = crate::elf::ElfFile::open(&watched.file).unwrap();
    let libc = libc
        .functions(crate::elf::SitePolicy::Best)
        .unwrap()
        .functions;
    let offset_of = |name: &str| libc.iter().find(|f| f.name == name).unwrap().offset as usize;
    let mut expected = vec![offset_of("dlopen"), offset_of("dlclose")];
    let mut offsets = watched.offsets.clone();
    expected.sort();
    offsets.sort();
    assert_eq!(offsets, expected);

    let as_mapped = |path: &Path| TracedFile {
        path: path.display().to_string(),
        open_path: path.to_owned(),
    };
    let libc = Program::about_to_start(&program).libraries[0].clone();
    let mapped = vec![as_mapped(&program), libc.clone(), as_mapped(&library)];
    let added = planner.extend(Loaded::Libraries(mapped.clone())).unwrap();
    assert_eq!(added.modules, [1]);
    assert_eq!(added.table.modules, [library.display().to_string()]);
    let first_new = &planner.plan().table.functions[functions_before];
    assert_eq!(first_new, &added.table.functions[0]);
    assert_eq!(first_new.module, 1);
    assert!(names(&added.table).contains(&"fixture_main"));

    let again = planner.extend(Loaded::Libraries(mapped)).unwrap();
    assert!(again.modules.is_empty() && again.table.modules.is_empty());
    // Without --nest-lib, no dlopen is watched.
    let plain = plan_of(&program, PlanOptions::default()).unwrap();
    assert_eq!(plain.plan().dlopen_dlclose_sites, None);
}

/// A library is known by the file it was when planned: the `/proc/PID/map_files` path it was
/// opened through names the library mapped in its place once it is closed, which is a library
/// of its own (issue 27), while the first one comes back under its path, planned already.
#[test]
fn a_library_in_the_place_of_a_closed_one_is_planned() {
    let dir = TempDir::new().unwrap();
    let (_, first, mut planner) = program_nesting_a_library(&dir);
    let second = dir.path().join("libfixture2.so");
    std::fs::copy(&first, &second).unwrap();
    // Where the process maps a file: a link the test points at one library, then the other.
    let place = dir.path().join("map_files-entry");
    let mapped_at_place = |library: &Path| {
        let _ = std::fs::remove_file(&place);
        std::os::unix::fs::symlink(library, &place).unwrap();
        vec![TracedFile {
            path: library.display().to_string(),
            open_path: place.clone(),
        }]
    };

    let opened = planner.extend(Loaded::Libraries(mapped_at_place(&first)));
    assert_eq!(opened.unwrap().modules, [1]);
    let in_its_place = planner.extend(Loaded::Libraries(mapped_at_place(&second)));
    assert_eq!(in_its_place.unwrap().modules, [2]);
    let back = planner.extend(Loaded::Libraries(mapped_at_place(&first)));
    assert!(back.unwrap().modules.is_empty());
}

/// A function symbol at file offset `offset`, probed at its entry.
pub(super) fn symbol(name: &str, offset: u64) -> FunctionSymbol {
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
        values: vec![Vec::new(); functions.len()],
        user_stacks: vec![false; functions.len()],
        sources: vec![None; functions.len()],
        functions,
        exits_before_return_value: Vec::new(),
        symbol_origin: String::new(),
        go_runtime_left_out: 0,
    }
}

#[test]
fn ids_are_dense_across_modules() {
    let mut plan = ProbePlan {
        table: FunctionTable::default(),
        exits: Vec::new(),
        files: Vec::new(),
        exit_policy: ExitPolicy::Uretprobe,
        return_probes: Default::default(),
        landings: Landings::default(),
        executable_code_vaddr: 0,
        dlopen_dlclose_sites: None,
        unwinder_sites: Vec::new(),
        pairing: Default::default(),
        exits_before_return_value: Default::default(),
        go_functions: Default::default(),
        events: Default::default(),
    };
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

const SELFCALLS_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/plan/testdata/selfcalls.c");

/// `libselfcalls.so`, whose `outer` calls its own `inner` and ifunc `chosen` through its PLT,
/// and a program linked with `first` (libraries before it in load order) and it, which calls
/// `outer` through its PLT.
fn selfcalls_program(dir: &TempDir, name: &str, first: &[&str]) -> PathBuf {
    let library = compile(
        dir,
        "cc",
        SELFCALLS_C,
        "libselfcalls.so",
        &["-shared", "-fPIC"],
    );
    let stubs = crate::elf::read_function_symbols(&library).unwrap();
    let stubs: Vec<&str> = stubs.iter().map(|f| f.name.as_str()).collect();
    assert!(
        stubs.contains(&"inner@plt") && stubs.contains(&"chosen@plt"),
        "{stubs:?}"
    );
    let mut flags: Vec<String> = ["-DMAIN", "-Wl,-rpath,$ORIGIN", "-Wl,--no-as-needed"]
        .map(str::to_owned)
        .into();
    flags.push(format!("-L{}", dir.path().display()));
    flags.extend(first.iter().chain(&["selfcalls"]).map(|l| format!("-l{l}")));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    compile(dir, "cc", SELFCALLS_C, name, &flags)
}

fn nest_selfcalls(functions: &[&str], no_functions: &[&str]) -> PlanOptions {
    PlanOptions {
        nest_libs: LibraryPatterns::parse("--nest-lib", &["libselfcalls*".into()]).unwrap(),
        functions: globs(functions, no_functions),
        ..PlanOptions::default()
    }
}

/// The names planned in the file whose name is `file`.
fn planned_in<'a>(plan: &'a ProbePlan, file: &str) -> Vec<&'a str> {
    let module = plan.files.iter().position(|f| f.path.ends_with(file));
    let module = module.unwrap_or_else(|| panic!("{file} is not traced")) as u32;
    let functions = plan.table.functions.iter().filter(|f| f.module == module);
    functions.map(|f| f.name.as_str()).collect()
}

#[test]
fn stubs_into_traced_functions_are_not_probed() {
    let dir = TempDir::new().unwrap();
    let program = selfcalls_program(&dir, "selfcalls", &[]);
    let planner = plan_of(&program, nest_selfcalls(&[], &[])).unwrap();
    let plan = planner.plan();
    let library = planned_in(plan, "libselfcalls.so");
    assert!(
        library.contains(&"inner") && library.contains(&"outer"),
        "{library:?}"
    );
    // inner's own probe sees every call through inner@plt.
    assert!(!library.contains(&"inner@plt"), "{library:?}");
    // chosen is an ifunc: its traced symbol is the resolver, which the call never enters.
    assert!(library.contains(&"chosen@plt"), "{library:?}");
    // The program's call of outer is seen by outer's probe, in the library.
    let executable = planned_in(plan, "selfcalls");
    assert!(executable.contains(&"main"), "{executable:?}");
    assert!(!executable.contains(&"outer@plt"), "{executable:?}");
    assert!(!plan
        .landings
        .functions()
        .any(|id| plan.table.functions[id as usize].name == "outer@plt"));

    // Without --nest-lib, the stub is the only view of the call.
    let plain = plan_of(&program, PlanOptions::default()).unwrap();
    assert!(planned_in(plain.plan(), "selfcalls").contains(&"outer@plt"));
}

#[test]
fn stubs_stay_where_the_callee_is_not_what_the_plan_traces() {
    let dir = TempDir::new().unwrap();
    let program = selfcalls_program(&dir, "selfcalls", &[]);
    let stubs_of_library = |options: PlanOptions| {
        let planner = plan_of(&program, options).unwrap();
        let planned = planned_in(planner.plan(), "libselfcalls.so");
        let stubs = planned.into_iter().filter(|name| name.ends_with("@plt"));
        stubs.map(str::to_owned).collect::<Vec<String>>()
    };
    // inner filtered out: its stub is the only view of the call.
    let filtered = stubs_of_library(nest_selfcalls(&[], &["inner"]));
    assert!(filtered.contains(&"inner@plt".to_owned()), "{filtered:?}");
    // A -f glob with an @ asks for the stubs it names.
    let named = stubs_of_library(nest_selfcalls(&["inner@plt", "outer", "inner"], &[]));
    assert_eq!(named, ["inner@plt"]);
    // One without asks for functions: inner* does not keep inner@plt.
    let unnamed = stubs_of_library(nest_selfcalls(&["inner*", "outer"], &[]));
    assert!(unnamed.is_empty(), "{unnamed:?}");
    // --follow: another program may bind the stub elsewhere.
    let follow = PlanOptions {
        follow: true,
        ..nest_selfcalls(&[], &[])
    };
    assert!(stubs_of_library(follow).contains(&"inner@plt".to_owned()));
    let preloaded = PlanOptions {
        preloaded_libraries: true,
        ..nest_selfcalls(&[], &[])
    };
    assert!(stubs_of_library(preloaded).contains(&"inner@plt".to_owned()));

    // An untraced library before it in load order defines inner (and outer): the calls go
    // there, and only the stubs see them.
    compile(
        &dir,
        "cc",
        SELFCALLS_C,
        "libfirst.so",
        &["-shared", "-fPIC"],
    );
    let interposed = selfcalls_program(&dir, "interposed", &["first"]);
    let planner = plan_of(&interposed, nest_selfcalls(&[], &[])).unwrap();
    let library = planned_in(planner.plan(), "libselfcalls.so");
    assert!(library.contains(&"inner@plt"), "{library:?}");
    assert!(planned_in(planner.plan(), "interposed").contains(&"outer@plt"));
}

#[test]
fn dropped_stubs_are_counted_by_why_the_others_stay() {
    let dir = TempDir::new().unwrap();
    let library = compile(
        &dir,
        "cc",
        SELFCALLS_C,
        "libselfcalls.so",
        &["-shared", "-fPIC"],
    );
    let elf = crate::elf::ElfFile::open(&library).unwrap();
    let path = library.display().to_string();
    let functions = elf.functions(crate::elf::SitePolicy::default()).unwrap();
    let mut scope = crate::elf::binding::BindingScope::default();
    scope.push(path.clone(), elf.exported_functions());
    let mut modules = vec![planned(&path, functions.functions)];
    let outcomes = super::stubs::drop_stubs_seen_by_their_callees(
        &mut modules,
        &[&elf],
        &scope,
        &PlanOptions::default(),
    );
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].dropped, 1, "inner@plt");
    // chosen@plt into an ifunc; __cxa_finalize@plt bound to no file of this scope.
    let kept: Vec<(StubNeeded, usize)> = outcomes[0].kept.iter().map(|(&w, &n)| (w, n)).collect();
    assert_eq!(
        kept,
        [(StubNeeded::BoundToNoFile, 1), (StubNeeded::Ifunc, 1)]
    );
    assert_eq!(modules[0].functions.len(), modules[0].exits.len());
    assert!(!modules[0].functions.iter().any(|f| f.name == "inner@plt"));
}

fn value_requests(arguments: &[&str], retvals: &[&str]) -> ValueRequests {
    let owned = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    ValueRequests::parse(&owned(arguments), &owned(retvals), false, 64).unwrap()
}

#[test]
fn values_follow_their_globs_and_tail_jumps_capture_no_return_value() {
    let dir = TempDir::new().unwrap();
    let program = planned_program(&dir, "planned", &[]);
    let options = PlanOptions {
        exits: Some(ExitPolicy::Ret),
        values: value_requests(&["lea*@arg1/x32"], &["tail_labs@retval", "caller@retval"]),
        ..PlanOptions::default()
    };
    let planner = plan_of(&program, options).unwrap();
    let plan = planner.plan();
    let shown = |name| {
        let specs = &function(plan, name).1.values;
        specs.iter().map(ToString::to_string).collect::<Vec<_>>()
    };
    assert_eq!(shown("leaf"), ["arg1/x32"]);
    assert_eq!(shown("caller"), ["retval"]);
    assert_eq!(shown("tail_labs"), ["retval"]);
    assert!(shown("main").is_empty());
    // tail_labs leaves by its jump to labs@plt, before labs has computed anything; caller by
    // its `ret`s, where rax holds its result.
    let sites_of = |name| {
        let (id, traced) = function(plan, name);
        let ExitProbe::Sites(sites) = &plan.exits[id as usize] else {
            panic!("{name} has exit sites under --exit-probes=ret");
        };
        sites
            .iter()
            .map(|&site| (traced.module, site))
            .collect::<Vec<_>>()
    };
    let tail_jumps = sites_of("tail_labs");
    assert!(!tail_jumps.is_empty());
    assert!(tail_jumps
        .iter()
        .all(|site| plan.exits_before_return_value.contains(site)));
    assert!(sites_of("caller")
        .iter()
        .all(|site| !plan.exits_before_return_value.contains(site)));
}

#[test]
fn arguments_past_a_skipped_instruction_are_refused() {
    // count_miss starts with `lock addq`: its probe sits on the next instruction, which a
    // skipped instruction could have changed the arguments for; its return value stays.
    let dir = TempDir::new().unwrap();
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/src/elf/testdata/atomic.c");
    let program = compile(&dir, "cc", source, "atomic", &["-fcf-protection=none"]);
    let options = PlanOptions {
        values: value_requests(
            &["count_miss@arg1", "plain_total@arg1"],
            &["count_miss@retval"],
        ),
        ..PlanOptions::default()
    };
    let planner = plan_of(&program, options).unwrap();
    let plan = planner.plan();
    let specs = |name| function(plan, name).1.values.clone();
    assert_eq!(specs("count_miss").len(), 1);
    assert_eq!(
        specs("count_miss")[0].source,
        crate::value::ValueSource::Return
    );
    assert_eq!(specs("plain_total").len(), 1);
}

#[test]
fn dropping_stubs_keeps_each_function_with_its_own_stack_flag_and_source_line() {
    use crate::table::SourceLine;
    let line = |line| {
        Some(SourceLine {
            file: "prog.c".into(),
            line,
        })
    };
    let mut module = planned(
        "/bin/prog",
        vec![
            symbol("first", 0x10),
            symbol("dropped@plt", 0x20),
            symbol("third", 0x30),
        ],
    );
    module.user_stacks = vec![false, true, true];
    module.sources = vec![line(1), None, line(3)];
    super::stubs::retain(&mut module, &[true, false, true]);
    let names: Vec<&str> = module.functions.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["first", "third"]);
    assert_eq!(module.user_stacks, [false, true]);
    assert_eq!(module.sources, [line(1), line(3)]);
    assert_eq!((module.exits.len(), module.values.len()), (2, 2));
}
