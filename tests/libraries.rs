//! End to end: which libraries' PLT calls are traced (`--lib`, `--no-lib`) and how they are
//! named (`--libname`), on `test/mathcalls.c`, which calls into libm and libc and counts its
//! calls.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::*;

const ROUNDS: &str = "200";

fn mathcalls() -> PathBuf {
    compile("mathcalls.c", "mathcalls", &["-lm"])
}

/// Records `mathcalls 200` with `flags`, checks it ran as it does untraced, and returns the
/// program's own counts and utrace's.
fn record_mathcalls(flags: &[&str]) -> (BTreeMap<String, u64>, BTreeMap<String, u64>, String) {
    let program = mathcalls();
    let recording = record(&program, &[ROUNDS], flags);
    let stderr = String::from_utf8_lossy(&recording.output.stderr).into_owned();
    assert!(recording.output.status.success(), "{flags:?}: {stderr}");
    let untraced = run_untraced(&program, &[ROUNDS]);
    assert_eq!(recording.output.stdout, untraced.stdout);
    let own = own_counts(&recording.output.stdout);
    assert_eq!(own["cbrt@plt"], 400);
    (own, recording.traced_counts(), stderr)
}

fn plt_names(counts: &BTreeMap<String, u64>) -> Vec<&str> {
    counts
        .keys()
        .map(String::as_str)
        .filter(|name| name.ends_with("@plt"))
        .collect()
}

/// The program's own functions and counts (not its PLT calls).
fn own_functions(own: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    own.iter()
        .filter(|(name, _)| !name.contains('@'))
        .map(|(name, count)| (name.clone(), *count))
        .collect()
}

#[test]
fn lib_traces_only_the_calls_into_the_matching_libraries() {
    if !bpf_available("lib_traces_only_the_calls_into_the_matching_libraries") {
        return;
    }
    let (own, traced, _) = record_mathcalls(&["--lib", "libm*"]);
    assert_eq!(plt_names(&traced), ["cbrt@plt", "cos@plt"]);
    assert_eq!(traced["cos@plt"], own["cos@plt"]);
    assert_eq!(traced["cbrt@plt"], own["cbrt@plt"]);
    // The program's own functions are not PLT calls: --lib leaves them alone.
    assert_counts_match(&own_functions(&own), &traced);

    // Repeated and comma-separated: both libraries.
    let (own, traced, _) = record_mathcalls(&["-l", "libm*,libz*", "--lib", "libc.so*"]);
    assert_counts_match(&own, &traced);
}

#[test]
fn no_lib_drops_the_calls_into_the_matching_libraries() {
    if !bpf_available("no_lib_drops_the_calls_into_the_matching_libraries") {
        return;
    }
    // Which of the program's PLT calls go into libc, as --libname tells.
    let (_, named, _) = record_mathcalls(&["--libname"]);
    let into_libc: Vec<String> = named
        .keys()
        .filter_map(|name| name.strip_suffix("@libc.so.6"))
        .map(|name| format!("{name}@plt"))
        .collect();
    assert!(into_libc.contains(&"strtol@plt".to_string()), "{named:?}");
    assert!(into_libc.contains(&"printf@plt".to_string()), "{named:?}");

    let (own, traced, _) = record_mathcalls(&["--no-lib", "libc*"]);
    for name in &into_libc {
        assert!(
            !traced.contains_key(name),
            "{name} is a libc call: {traced:?}"
        );
    }
    assert_eq!(traced["cos@plt"], own["cos@plt"]);
    assert_eq!(traced["cbrt@plt"], own["cbrt@plt"]);
    assert_counts_match(&own_functions(&own), &traced);
}

#[test]
fn libname_names_calls_after_their_library_with_the_same_counts() {
    if !bpf_available("libname_names_calls_after_their_library_with_the_same_counts") {
        return;
    }
    let (own, named, _) = record_mathcalls(&["--libname"]);
    let (_, plain, _) = record_mathcalls(&[]);
    assert_eq!(named["cos@libm.so.6"], own["cos@plt"]);
    assert_eq!(named["cbrt@libm.so.6"], own["cbrt@plt"]);
    assert_eq!(named["strtol@libc.so.6"], own["strtol@plt"]);
    assert!(plt_names(&named).is_empty(), "{named:?}");
    // One name for one name: every `@plt` count of the plain recording, under its library.
    let renamed: BTreeMap<String, u64> = named
        .iter()
        .map(|(name, count)| match name.split_once('@') {
            Some((function, _)) => (format!("{function}@plt"), *count),
            None => (name.clone(), *count),
        })
        .collect();
    assert_eq!(renamed, plain);

    // With --no-lib: the libm calls only.
    let (_, traced, _) = record_mathcalls(&["--libname", "--no-lib", "libc.so*"]);
    let libraries: Vec<&str> = traced
        .keys()
        .filter_map(|name| name.split_once('@'))
        .map(|(_, library)| library)
        .collect();
    assert_eq!(libraries, ["libm.so.6", "libm.so.6"]);
}

#[test]
fn library_patterns_that_match_nothing_are_warnings() {
    if !bpf_available("library_patterns_that_match_nothing_are_warnings") {
        return;
    }
    let (own, traced, stderr) = record_mathcalls(&["--no-lib", "libnothing*"]);
    assert!(
        stderr.contains("--no-lib libnothing* matches none of the program's libraries"),
        "{stderr}"
    );
    assert_counts_match(&own, &traced);
    // --lib with nothing to match traces no PLT call at all.
    let (own, traced, stderr) = record_mathcalls(&["--lib", "libnothing*"]);
    assert!(
        stderr.contains("--lib libnothing* matches none of the program's libraries"),
        "{stderr}"
    );
    assert!(plt_names(&traced).is_empty(), "{traced:?}");
    assert_counts_match(&own_functions(&own), &traced);
}

#[test]
fn a_running_process_has_its_calls_named_after_their_library() {
    if !bpf_available("a_running_process_has_its_calls_named_after_their_library") {
        return;
    }
    let server = Running::start(&compile("server.c", "server", &[]));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("utrace.data");
    let pid = server.pid().to_string();
    let output = utrace()
        .args([
            "record",
            "--libname",
            "--lib",
            "libc*",
            "--duration",
            "500ms",
        ])
        .args(["-p", &pid, "-o"])
        .arg(&data)
        .output()
        .unwrap();
    server.stop();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "record -p failed: {stderr}");
    let traced = counts_of(&report_json(&data));
    // Both threads sleep with usleep between their calls.
    assert!(
        traced.get("usleep@libc.so.6").is_some_and(|&n| n > 10),
        "{traced:?}"
    );
    assert!(traced.get("tick").is_some_and(|&n| n > 10), "{traced:?}");
    assert!(
        traced
            .keys()
            .all(|name| !name.contains('@') || name.ends_with("@libc.so.6")),
        "{traced:?}"
    );
}

/// How many PLT calls `record -d` says it probed in the library function they call.
fn probed_in_library(stderr: &str) -> usize {
    stderr
        .lines()
        .find_map(|line| {
            let rest = line.strip_prefix("utrace: PLT calls of ")?;
            let (_, rest) = rest.split_once(": ")?;
            rest.split_once(" probed in the library")?.0.parse().ok()
        })
        .unwrap_or_else(|| panic!("record -d says nothing of PLT calls: {stderr}"))
}

#[test]
fn plt_calls_probed_in_libc_count_only_the_calls_through_the_stub() {
    if !bpf_available("plt_calls_probed_in_libc_count_only_the_calls_through_the_stub") {
        return;
    }
    // libc calls malloc and strlen inside strdup, and the program calls malloc through a
    // pointer too: none of those is a call through malloc@plt or strlen@plt.
    let program = compile("pltleak.c", "pltleak", &["-fno-builtin"]);
    let recording = record_unchanged(&program, &["300"], &["-d"]);
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    let own = own_counts(&recording.output.stdout);
    assert_eq!(own["malloc@plt"], 300);
    assert_counts_match(&own, &recording.traced_counts());
    // The fast path was taken (malloc, free, strdup, getenv start with a push, the
    // emulated instruction of pthread_getspecific is its second), or the test proves nothing.
    assert!(probed_in_library(&stderr) >= 4, "{stderr}");

    // The same counts with every probe on its stub.
    let at_stubs = record_unchanged(&program, &["300"], &["-d", "--probe-at-entry"]);
    let stderr = String::from_utf8_lossy(&at_stubs.output.stderr);
    assert_eq!(probed_in_library(&stderr), 0, "{stderr}");
    assert_counts_match(&own, &at_stubs.traced_counts());
}
