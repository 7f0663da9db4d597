//! End to end: the PLT calls of a traced library (`--nest-lib`) into libc probed where they
//! land, in libc's functions (and ifunc implementations), and the tail jumps to them on the jump,
//! instead of on the library's stubs, which the kernel single-steps; counted exactly though the executable calls the same libc
//! functions through its own PLT and libc calls them itself (`test/libstrings.c`,
//! `test/usestrings.c`). Needs libc's debug file for the ifuncs (libc6-dbg, which
//! tools/setup.sh installs).

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::*;

/// `usestrings`, linked with `libstrings.so` (found through an `$ORIGIN` runpath). The library
/// keeps its tail calls (the tests' flags turn them off).
fn usestrings() -> PathBuf {
    let library = compile(
        "libstrings.c",
        "libstrings.so",
        &[
            "-shared",
            "-fPIC",
            "-fno-builtin",
            "-foptimize-sibling-calls",
        ],
    );
    compile_against("usestrings.c", "usestrings", &["-fno-builtin"], &library)
}

/// The calls per `file:function` of a recording, the file by its name.
fn counts_by_file(recording: &Recording) -> BTreeMap<String, u64> {
    counts_in(&recording.json())
}

/// The calls per `file:function` of a json report, the file by its name.
fn counts_in(json: &serde_json::Value) -> BTreeMap<String, u64> {
    let modules = counts_by_module(json);
    (modules.iter())
        .flat_map(|(file, counts)| {
            counts
                .iter()
                .map(move |(name, n)| (format!("{file}:{name}"), *n))
        })
        .collect()
}

/// What `record -d` says of the PLT calls of the file whose path ends with `file`.
fn plt_calls_line<'a>(stderr: &'a str, file: &str) -> &'a str {
    let prefix = "utrace: PLT calls of ";
    (stderr.lines())
        .find(|line| {
            line.strip_prefix(prefix)
                .is_some_and(|rest| rest.split(':').next().unwrap().ends_with(file))
        })
        .unwrap_or_else(|| panic!("no line on {file}'s PLT calls: {stderr}"))
}

#[test]
fn a_traced_librarys_plt_calls_land_and_are_counted_exactly() {
    if !bpf_available("a_traced_librarys_plt_calls_land_and_are_counted_exactly") {
        return;
    }
    let program = usestrings();
    let recording = record_unchanged(&program, &["300"], &["-d", "--nest-lib", "libstrings*"]);
    let own = own_counts(&recording.output.stdout);
    assert_eq!(own["libstrings.so:strlen@plt"], 450, "{own:?}");
    assert_eq!(own["libstrings.so:memset@plt"], 450, "{own:?}");
    assert_eq!(own["usestrings:strlen@plt"], 600, "{own:?}");
    let traced = counts_by_file(&recording);
    assert_counts_match(&own, &traced);
    // The report's printf calls (printf has nothing emulated near its start: its stub keeps its
    // probe), and the call the library's destructor makes at exit (landed).
    assert_eq!(
        traced.get("libstrings.so:printf@plt"),
        Some(&5),
        "{traced:?}"
    );
    assert_eq!(
        traced.get("libstrings.so:__cxa_finalize@plt"),
        Some(&1),
        "{traced:?}"
    );
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    // Six of the library's stubs land: strlen and memcmp in their implementation, the mutex
    // calls, __cxa_finalize and memset in libc's functions; memset's tail jump is probed on the
    // jump.
    let line = plt_calls_line(&stderr, "libstrings.so");
    let landed = ": 6 probed in the library function they call (an emulated site; 1 tail jumps";
    assert!(line.contains(landed), "{line}");
    assert!(line.contains("1 at their stub"), "{line}");
    // Both files' calls into the ifuncs land in the same implementations.
    for ifunc in ["strlen", "memcmp"] {
        let landing = format!("utrace: {ifunc}@plt: probed in __{ifunc}_");
        let landings = stderr.lines().filter(|l| l.starts_with(&landing)).count();
        assert_eq!(landings, 2, "{ifunc} (is libc6-dbg installed?): {stderr}");
    }
    assert!(!stderr.contains("were not counted"), "{stderr}");
}

#[test]
fn a_traced_librarys_plt_calls_land_in_a_process_attached_to() {
    if !bpf_available("a_traced_librarys_plt_calls_land_in_a_process_attached_to") {
        return;
    }
    let program = usestrings();
    let (mut process, lines) = start_waiting(
        std::process::Command::new(&program)
            .arg("300")
            .env("USESTRINGS_WAIT", "1"),
    );
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("utrace.data");
    let recorder = AttachedRecorder::start(process.id(), &data, &["--nest-lib", "libstrings*"]);
    send_signal(process.id(), libc::SIGUSR1);
    let stdout: Vec<String> = lines.map(|line| line.unwrap()).collect();
    assert!(process.wait().unwrap().success());
    // libstrings.so is mapped as DT_NEEDED reaches it, not by dlopen: its calls land.
    let said = recorder.said.join("\n");
    let line = plt_calls_line(&said, "libstrings.so");
    assert!(
        line.contains(": 6 probed in the library function they call"),
        "{line}"
    );
    recorder.finish();
    let own = own_counts(stdout.join("\n").as_bytes());
    assert_eq!(own["libstrings.so:memset@plt"], 450, "{own:?}");
    assert_counts_match(&own, &counts_in(&report_json(&data)));
}

#[test]
fn a_traced_librarys_plt_calls_keep_their_stubs_under_probe_at_entry() {
    if !bpf_available("a_traced_librarys_plt_calls_keep_their_stubs_under_probe_at_entry") {
        return;
    }
    let program = usestrings();
    let flags = ["-d", "--probe-at-entry", "--nest-lib", "libstrings*"];
    let recording = record_unchanged(&program, &["30"], &flags);
    let own = own_counts(&recording.output.stdout);
    assert_counts_match(&own, &counts_by_file(&recording));
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    let line = plt_calls_line(&stderr, "libstrings.so");
    assert!(
        line.contains(": 0 probed in the library function they call"),
        "{line}"
    );
}
