//! End to end: Debian's stripped programs traced through their PLT stubs, and libc's internal
//! functions traced with the symbols of its debug file (libc6-dbg), counted as bpftrace counts
//! them.

mod common;

use std::path::Path;

use common::*;

/// Debian's `true` and `dash` have no `.symtab`: their library calls are traced at their PLT
/// stubs, and they run as untraced.
#[test]
fn stripped_programs_are_traced_through_their_plt_stubs() {
    if !bpf_available("stripped_programs_are_traced_through_their_plt_stubs") {
        return;
    }
    let recording = record_unchanged(Path::new("/usr/bin/true"), &[], &[]);
    let traced = recording.traced_counts();
    assert!(!traced.is_empty());
    assert!(
        traced.keys().all(|name| name.ends_with("@plt")),
        "{traced:?}"
    );

    let recording = record_unchanged(Path::new("/usr/bin/dash"), &["-c", "echo hi"], &[]);
    assert_eq!(String::from_utf8_lossy(&recording.output.stdout), "hi\n");
    let traced = recording.traced_counts();
    // `echo hi` is one write of "hi\n".
    assert_eq!(traced.get("write@plt"), Some(&1), "{traced:?}");
    assert!(
        traced.keys().all(|name| name.ends_with("@plt")),
        "{traced:?}"
    );
}

/// Debian's `dash` calls `_setjmp` through its PLT before each command it runs: every call
/// returns, timed, and nothing nests under it (a stripped program's stubs call nothing it
/// traces, so its tree is flat).
#[test]
fn setjmp_in_dash_returns() {
    if !bpf_available("setjmp_in_dash_returns") {
        return;
    }
    let recording = record_unchanged(
        Path::new("/usr/bin/dash"),
        &["-c", "for i in 1 2 3; do echo $i; done"],
        &[],
    );
    assert_eq!(
        String::from_utf8_lossy(&recording.output.stdout),
        "1\n2\n3\n"
    );
    let json = recording.json();
    let setjmp = json["functions"]
        .as_array()
        .expect("functions array")
        .iter()
        .find(|f| f["name"] == "_setjmp@plt")
        .expect("_setjmp@plt called");
    assert!(setjmp["calls"].as_u64() > Some(0), "{setjmp}");
    assert_eq!(setjmp["unknown_time_calls"], 0, "{setjmp}");
    let tree = recording.report(&["--format=replay"]);
    let nested: Vec<&str> = tree.lines().filter(|line| line.ends_with('{')).collect();
    assert!(
        nested.is_empty(),
        "calls nested under others: {nested:?}\n{tree}"
    );
}

/// `--nest-lib` on a stripped program: its stubs and the library's functions. (`write` itself
/// is left out: a traced library function at the site a PLT call lands on hides that call.)
#[test]
fn nest_lib_works_on_a_stripped_program() {
    if !bpf_available("nest_lib_works_on_a_stripped_program") {
        return;
    }
    let recording = record_unchanged(
        Path::new("/usr/bin/dash"),
        &["-c", "echo hi"],
        &["--nest-lib", "libc.so*", "-f", "write@plt,_int_malloc"],
    );
    let traced = recording.traced_counts();
    assert_eq!(traced.get("write@plt"), Some(&1), "{traced:?}");
    assert!(traced.get("_int_malloc") > Some(&0), "{traced:?}");
}

/// With libc6-dbg installed, libc's `.symtab` comes from its debug file: `_int_malloc`, a local
/// function `.dynsym` lacks, is traced.
///
/// The reference: test/statics.c mallocs ROUNDS blocks of 24 bytes and frees none before the
/// end, so the thread cache never has one to give and every malloc goes through `_int_malloc`
/// once; malloc's first call also allocates the thread cache itself with `_int_malloc`. Besides
/// the ROUNDS blocks, the program mallocs its array of pointers, and stdio one buffer for
/// stdout (a pipe here). So malloc is called ROUNDS + 2 times, `_int_malloc` ROUNDS + 3.
#[test]
fn libc_internal_functions_come_from_its_debug_file() {
    if !bpf_available("libc_internal_functions_come_from_its_debug_file") {
        return;
    }
    let statics = compile("statics.c", "statics", &[]);
    let recording = record_unchanged(
        &statics,
        &["1000"],
        &["-d", "--nest-lib", "libc.so*", "-f", "_int_malloc,malloc"],
    );
    let traced = recording.traced_counts();
    assert_eq!(traced.get("malloc"), Some(&1002), "{traced:?}");
    assert_eq!(traced.get("_int_malloc"), Some(&1003), "{traced:?}");
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert!(
        stderr.contains("functions from debug file /usr/lib/debug/.build-id/"),
        "libc's debug file was not used (tools/setup.sh installs libc6-dbg): {stderr}"
    );
    // info says it too, from the data file: after the recording, whatever the files are now.
    let info = recording.info();
    let libc = info
        .lines()
        .find(|line| {
            line.trim_start()
                .starts_with("/lib/x86_64-linux-gnu/libc.so.6 (2)")
        })
        .unwrap_or_else(|| panic!("no libc line: {info}"));
    assert!(
        libc.contains(", symbols: ") && libc.contains("functions from debug file /usr/lib/debug/"),
        "{libc}"
    );
    let program = info
        .lines()
        .find(|line| line.contains("statics (0)"))
        .unwrap_or_else(|| panic!("no line of the program: {info}"));
    assert!(
        program.contains(", symbols: ") && program.contains(" functions from .symtab, "),
        "{program}"
    );
    assert_eq!(
        bpftrace_count(&statics, &["1000"], "_int_malloc"),
        1003,
        "bpftrace's own count of the same run"
    );
}

/// How many times bpftrace (its own uprobe on libc's `function`, found through libc's debug
/// file as gdb finds it) sees `program args` call `function`: the reference utrace's count is
/// held to. bpftrace's stdout is a pipe here too, so the run takes the same path through stdio.
fn bpftrace_count(program: &Path, args: &[&str], function: &str) -> u64 {
    let libc = "/lib/x86_64-linux-gnu/libc.so.6";
    let script = format!("uprobe:{libc}:{function} /pid == cpid/ {{ @calls = count(); }}");
    let command = std::iter::once(program.display().to_string())
        .chain(args.iter().map(|arg| arg.to_string()))
        .collect::<Vec<_>>()
        .join(" ");
    let output = std::process::Command::new("bpftrace")
        .args(["-e", &script, "-c", &command])
        .output()
        .unwrap_or_else(|e| panic!("running bpftrace (tools/setup.sh installs it): {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .find_map(|line| line.strip_prefix("@calls: "))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no count from bpftrace: {stdout}{}",
                String::from_utf8_lossy(&output.stderr)
            )
        })
}
