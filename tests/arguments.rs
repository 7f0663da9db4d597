//! End to end: arguments and return values (`-A`, `-R`, `-a`) captured from real processes. Each
//! test program prints, for every call, the line the replay must show for it (the values as the
//! program itself saw them), and the replay's lines are compared with those, exactly, in `record`
//! and `live`, with uretprobes and with exit probes on `ret`.

mod common;

use std::path::Path;

use common::*;

/// The values test/args.c's calls capture.
const ARGS_SPECS: &[&str] = &[
    "-A",
    "add@arg1,arg2",
    "-R",
    "add@retval",
    "-A",
    "many@arg1,arg2,arg3,arg4,arg5,arg6,arg7,arg8",
    "-R",
    "many@retval",
    "-A",
    "greet@arg1/s",
    "-R",
    "greet@retval/s",
    "-A",
    "narrow@arg1/u8,arg1/x32",
    "-R",
    "narrow@retval/x32",
    "-A",
    "fib@arg1",
    "-R",
    "fib@retval",
    "-f",
    "main,add,many,greet,narrow,fib",
];

/// The lines of a call tree after the duration and thread columns (`  add(2, 3) = 5;`), of the
/// calls `shown` names (and the block ends), in order.
fn tree_lines(tree: &str, shown: &[&str]) -> Vec<String> {
    tree.lines()
        .filter_map(|line| line.split_once(" | ").map(|(_, call)| call))
        .filter(|call| {
            let call = call.trim_start();
            call.starts_with("} = ") || shown.iter().any(|name| call.starts_with(name))
        })
        .map(str::to_owned)
        .collect()
}

/// The program's own lines: what the replay must show.
fn program_lines(stdout: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Runs `utrace live FLAGS -o TREE -- PROGRAM ARGS`; checks the program's output is as
/// untraced, and returns that output and the tree.
fn live(
    flags: &[&str],
    program: &Path,
    args: &[&str],
    prints_addresses: bool,
) -> (Vec<String>, String) {
    let (output, tree) = live_to_file(flags, program, args);
    if !prints_addresses {
        assert_eq!(output.stdout, run_untraced(program, args).stdout);
    }
    (program_lines(&output.stdout), tree)
}

/// Records `program` with `specs` under each exit policy, in `record` and in `live`, and checks
/// that the replay shows exactly the lines the program printed, for the calls `shown` names.
/// A program that prints addresses prints other ones untraced: then only its exit is compared.
fn assert_values_shown(program: &Path, specs: &[&str], shown: &[&str], prints_addresses: bool) {
    let args = &[];
    for exits in [None, Some("--exit-probes=ret")] {
        let mut flags = specs.to_vec();
        flags.extend(exits);
        let recording = match prints_addresses {
            false => record_unchanged(program, args, &flags),
            true => record(program, args, &flags),
        };
        assert_success(&recording.output);
        let expected = program_lines(&recording.output.stdout);
        let replay = recording.report(&["--format=replay"]);
        assert_eq!(
            tree_lines(&replay, shown),
            expected,
            "record {flags:?}; the tree:\n{replay}"
        );
        let (expected, tree) = live(&flags, program, args, prints_addresses);
        assert_eq!(
            tree_lines(&tree, shown),
            expected,
            "live {flags:?}; the tree:\n{tree}"
        );
    }
}

#[test]
fn arguments_and_return_values_are_what_the_program_saw() {
    if !bpf_available("arguments_and_return_values_are_what_the_program_saw") {
        return;
    }
    let program = compile("args.c", "args", &[]);
    let shown = ["add(", "many(", "greet(", "narrow(", "fib("];
    assert_values_shown(&program, ARGS_SPECS, &shown, false);
}

#[test]
fn a_cpp_method_shows_this_as_its_first_argument() {
    if !bpf_available("a_cpp_method_shows_this_as_its_first_argument") {
        return;
    }
    let program = compile("args_method.cpp", "args_method", &[]);
    let specs = [
        "-A",
        "Counter::bump*@arg1/p,arg2",
        "-R",
        "Counter::bump*@retval",
    ];
    assert_values_shown(&program, &specs, &["Counter::bump"], true);
}

#[test]
fn a_rust_extern_c_function_shows_its_arguments() {
    if !bpf_available("a_rust_extern_c_function_shows_its_arguments") {
        return;
    }
    let program = compile_rust("args_rust.rs", "args_rust");
    let specs = [
        "-A",
        "scale@arg1,arg2/32",
        "-R",
        "scale@retval",
        "-f",
        "main,scale",
    ];
    // Rust's `main` is the runtime's; the program's own is named for its crate.
    assert_values_shown(&program, &specs, &["scale("], false);
}

#[test]
fn auto_args_show_libc_paths_descriptors_and_pointers() {
    if !bpf_available("auto_args_show_libc_paths_descriptors_and_pointers") {
        return;
    }
    let program = compile("autoargs.c", "autoargs", &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("four bytes");
    std::fs::write(&file, "abcd").unwrap();
    let file = file.to_str().unwrap();
    let specs = ["-a", "-f", "main,open@plt,read@plt,malloc@plt,close@plt"];
    let shown = ["open@plt(", "read@plt(", "malloc@plt(", "close@plt("];
    // The addresses differ from run to run: the program's lines under tracing are the truth.
    let recording = record(&program, &[file], &specs);
    assert_success(&recording.output);
    let replay = recording.report(&["--format=replay"]);
    let calls: Vec<String> = tree_lines(&replay, &shown)
        .into_iter()
        .filter(|line| !line.starts_with('}'))
        .collect();
    assert_eq!(
        calls,
        program_lines(&recording.output.stdout),
        "the tree:\n{replay}"
    );
    // main's prototype comes from the program's DWARF: `int main(int, char **)`.
    assert!(replay.contains("| main(2, 0x"), "{replay}");
    assert!(replay.contains("| } = 0; /* main */"), "{replay}");
    // The values are in Chrome's args too, and --no-args leaves them out.
    let chrome = recording.report(&["--format=chrome"]);
    assert!(
        chrome.contains(&format!(
            "\"args\":{{\"arg1\":\"\\\"{file}\\\"\",\"arg2\":\"0x0\"}}"
        )),
        "{chrome}"
    );
    assert!(chrome.contains("\"args\":{\"retval\":\"3\"}"), "{chrome}");
    let bare = recording.report(&["--format=replay", "--no-args"]);
    assert!(bare.contains("|   open@plt();"), "{bare}");
    assert!(!bare.contains(" = "), "{bare}");
}

#[test]
fn values_survive_record_time_filters() {
    if !bpf_available("values_survive_record_time_filters") {
        return;
    }
    // The file holds the calls the filter shows, written back from the replayer with their
    // values.
    let program = compile("args.c", "args", &[]);
    let mut flags = ARGS_SPECS.to_vec();
    flags.extend(["--max-depth", "3"]);
    let recording = record_unchanged(&program, &[], &flags);
    let replay = recording.report(&["--format=replay"]);
    let lines = tree_lines(&replay, &["add(", "fib("]);
    assert_eq!(
        lines,
        [
            "  add(2, 3) = 5;",
            "  add(-5, 1099511627776) = 1099511627771;",
            "  fib(5) {",
            "    fib(4) = 3;",
            "    fib(3) = 2;",
            "  } = 5; /* fib */",
        ],
        "{replay}"
    );
}

#[test]
fn a_glob_that_matches_nothing_is_a_warning() {
    if !bpf_available("a_glob_that_matches_nothing_is_a_warning") {
        return;
    }
    let program = compile("args.c", "args", &[]);
    let flags = ["-A", "nosuch*@arg1", "-A", "add@arg2", "-f", "add"];
    let recording = record_unchanged(&program, &[], &flags);
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert!(
        stderr.contains("utrace: warning: -A 'nosuch*@arg1': no traced function matches `nosuch*`"),
        "{stderr}"
    );
    let replay = recording.report(&["--format=replay"]);
    assert!(replay.contains("| add(3);"), "{replay}");
    assert!(replay.contains("| add(1099511627776);"), "{replay}");
    // Two calls, two entries and two exits: the values are not events of their own. Each
    // interval the thread spent preempted adds an entry and an exit of its own.
    let events: u64 = (stderr.split_once(" events in").map(|(before, _)| before))
        .and_then(|before| before.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no event count: {stderr}"));
    assert!(events >= 4 && (events - 4) % 2 == 0, "{stderr}");
    let info = recording.info();
    assert!(info.contains(&format!("events:      {events}\n")), "{info}");
}

/// The values test/untouched.c's calls capture.
const UNTOUCHED_SPECS: &[&str] = &[
    "-A",
    "greet@arg1/s",
    "-R",
    "greet@retval",
    "-A",
    "keep@arg1/s",
    "-R",
    "keep@retval",
    "-f",
    "main,greet,keep",
];

/// test/untouched.c, built, once its first line has said that the string's page is not mapped
/// before the first call (else the probe would read it, and there would be nothing to test);
/// None when `test` cannot run here: without BPF, or without bpf_find_vma, where the probes cannot
/// place a string they could not read in its file, and the recorder reads it only while the
/// process runs, which a short program may not.
fn untouched_program(test: &str) -> Option<std::path::PathBuf> {
    if !bpf_available(test) {
        return None;
    }
    if kernel_lacks("bpf_find_vma") {
        eprintln!("{test}: skipped, the kernel lacks bpf_find_vma");
        return None;
    }
    let program = compile("untouched.c", "untouched", &[]);
    let untraced = run_untraced(&program, &[]);
    assert_eq!(
        program_lines(&untraced.stdout)[0],
        "page mapped before the first call: no"
    );
    Some(program)
}

#[test]
fn a_string_on_a_page_nothing_has_touched_is_read_from_its_file() {
    let test = "a_string_on_a_page_nothing_has_touched_is_read_from_its_file";
    let Some(program) = untouched_program(test) else {
        return;
    };
    let recording = record_unchanged(&program, &[], UNTOUCHED_SPECS);
    let replay = recording.report(&["--format=replay"]);
    assert_eq!(
        tree_lines(&replay, &["main(", "greet(", "keep(", "}"]),
        [
            "main() {",
            "  greet(\"hello\") = 5;",
            "  greet(\"hello\") = 5;",
            "  keep(0x1234 <unreadable: not mapped>) = 1;",
            "} /* main */",
        ],
        "the tree:\n{replay}"
    );
    assert_counts_match(
        &own_counts(&recording.output.stdout),
        &recording.traced_counts(),
    );
}

#[test]
fn a_pointer_nothing_maps_says_why_it_is_unreadable() {
    let test = "a_pointer_nothing_maps_says_why_it_is_unreadable";
    let Some(program) = untouched_program(test) else {
        return;
    };
    // Live: the same reading, on the way to the tree.
    let (lines, tree) = live(UNTOUCHED_SPECS, &program, &[], false);
    let calls = tree_lines(&tree, &["greet(", "keep("]);
    assert_eq!(calls, lines[1..4], "the tree:\n{tree}");
    assert_eq!(calls[2], "  keep(0x1234 <unreadable: not mapped>) = 1;");
}
