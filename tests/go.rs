//! End to end: a Go program (test/goprog.go), which a uretprobe crashes (Go's stack unwinder meets
//! the kernel's trampoline), whose stacks move when they grow, and whose goroutines move between
//! threads. Traced with the default functions, with `-f 'main.*'` and under `-p`: it behaves as
//! untraced, and utrace counts each of its functions exactly as it counts itself.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use common::*;

/// Builds test/goprog.go, once per test binary.
fn go_program() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| go_build("goprog"))
}

/// Builds test/NAME.go with `go build`: the Go caches under the build directory, and no network
/// (only the standard library is used).
fn go_build(name: &str) -> PathBuf {
    go_build_as(name, name, &[])
}

/// [`go_build`] into the binary `binary`, with `flags` for `go build`.
fn go_build_as(name: &str, binary: &str, flags: &[&str]) -> PathBuf {
    let dir = build_dir().join("go");
    let binary = build_dir().join(binary);
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("test/{name}.go"));
    let output = Command::new("go")
        .arg("build")
        .args(flags)
        .arg("-o")
        .arg(&binary)
        .arg(&source)
        .env("GOCACHE", dir.join("cache"))
        .env("GOPATH", dir.join("path"))
        .env("GO111MODULE", "off")
        .env("GOPROXY", "off")
        .env("GOFLAGS", "")
        .output()
        .expect("running `go build`: install golang-go (tools/setup.sh)");
    assert_success(&output);
    binary
}

/// Records the Go program with `extra` flags: its output and exit code as untraced, no event
/// lost, utrace saying `said` (the line that says what a Go program gets, for one), and its
/// counts exact. Returns what utrace said.
fn assert_traced_exactly(extra: &[&str], said: &str) -> String {
    let recording = record_unchanged(go_program(), &[], extra);
    let stderr = String::from_utf8_lossy(&recording.output.stderr).into_owned();
    assert!(stderr.contains(said), "{stderr}");
    let own = own_counts(&recording.output.stdout);
    assert_counts_match(&own, &recording.traced_counts());
    stderr
}

/// What utrace says of every Go program.
const GO_PROGRAM: &str = "Go program: exits seen at ret instructions";

#[test]
fn a_go_program_is_traced_exactly_in_its_own_functions() {
    if !bpf_available("a_go_program_is_traced_exactly_in_its_own_functions") {
        return;
    }
    let said = assert_traced_exactly(&["-f", "main.*"], GO_PROGRAM);
    // The runtime's functions that cannot be probed were not asked for: no word about them.
    assert!(!said.contains("cannot be probed"), "{said}");
    assert!(!said.contains("runtime."), "{said}");
}

#[test]
fn a_go_program_is_traced_exactly_with_every_function() {
    if !bpf_available("a_go_program_is_traced_exactly_with_every_function") {
        return;
    }
    let said = assert_traced_exactly(&["-d", "-f", "*"], GO_PROGRAM);
    assert!(!said.contains("of the runtime left out"), "{said}");
    // runtime.abort.abi0 starts with a trap: said, in words that agree with the count.
    let unprobeable = said
        .lines()
        .find(|line| line.contains("be probed (the first instruction"))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(unprobeable.contains("runtime.abort"), "{unprobeable}");
    assert!(!unprobeable.contains("1 functions"), "{unprobeable}");
    // `record -d` counts the sites as probed: most of a Go program's functions past their
    // stack check.
    let sites = said
        .lines()
        .find(|line| line.starts_with("utrace: probe sites in ") && line.contains("/goprog:"))
        .unwrap_or_else(|| panic!("{said}"));
    let (before, _) = sites.split_once(" after a Go stack check").unwrap();
    let past_checks: usize = before.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(past_checks > 100, "{sites}");
}

/// How many functions utrace said it traced (`traced N functions of …`).
fn functions_traced(said: &str) -> usize {
    let after = said.split("traced ").nth(1).expect("a `traced` line");
    after.split(' ').next().unwrap().parse().unwrap()
}

/// A Go program stripped of its symbols and DWARF (`-ldflags=-s -w`; Debian strips its Go
/// programs too) still holds Go's own function table, which its runtime needs: traced by those
/// names, the same functions as unstripped, each counted exactly.
#[test]
fn a_stripped_go_program_is_traced_by_its_function_table() {
    if !bpf_available("a_stripped_go_program_is_traced_by_its_function_table") {
        return;
    }
    let stripped = go_build_as("goprog", "goprog-stripped", &["-ldflags=-s -w"]);
    let recording = record_unchanged(&stripped, &[], &["-d"]);
    let said = String::from_utf8_lossy(&recording.output.stderr);
    assert!(
        said.contains(" functions from Go's function table (.gopclntab), 0 from .dynsym"),
        "{said}"
    );
    let own = own_counts(&recording.output.stdout);
    assert_counts_match(&own, &recording.traced_counts());
    let unstripped = assert_traced_exactly(&[], GO_PROGRAM);
    assert_eq!(
        functions_traced(&said),
        functions_traced(&unstripped),
        "{said}"
    );
}

#[test]
fn uretprobes_asked_for_a_go_program_are_refused_with_a_warning() {
    if !bpf_available("uretprobes_asked_for_a_go_program_are_refused_with_a_warning") {
        return;
    }
    assert_traced_exactly(
        &["--exit-probes=uretprobe", "-f", "main.*"],
        "--exit-probes=uretprobe ignored",
    );
}

#[test]
fn a_running_go_program_is_traced_exactly() {
    if !bpf_available("a_running_go_program_is_traced_exactly") {
        return;
    }
    let untraced = run_untraced(go_program(), &[]);
    let mut program = Command::new(go_program())
        .arg("wait")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(program.stdout.take().unwrap()).lines();
    let ready = lines.next().unwrap().unwrap();
    assert_eq!(ready, "ready");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("utrace.data");
    let recorder = AttachedRecorder::start(program.id(), &data, &[]);
    // It starts its work once utrace has attached: every call it counts is traced.
    send_signal(program.id(), libc::SIGUSR1);
    let rest: Vec<String> = lines.map(|line| line.unwrap()).collect();
    let status = program.wait().unwrap();
    recorder.finish();
    assert_eq!(status.code(), untraced.status.code());
    assert_eq!(
        rest.join("\n") + "\n",
        String::from_utf8_lossy(&untraced.stdout)
    );
    let own = own_counts(rest.join("\n").as_bytes());
    assert_counts_match(&own, &counts_of(&report_json(&data)));
}

#[test]
fn a_full_trace_of_a_go_http_server_reads_right() {
    if !bpf_available("a_full_trace_of_a_go_http_server_reads_right") {
        return;
    }
    let server = go_build("goserver");
    let recording = record_unchanged(&server, &["10"], &[]);
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    // The runtime is left out, in one line that says how to trace it.
    let said: Vec<&str> = stderr.lines().filter(|l| l.contains(GO_PROGRAM)).collect();
    assert_eq!(said.len(), 1, "{stderr}");
    assert!(
        said[0].contains(
            " of the runtime left out, as it switches stacks and goroutines under \
             its calls (-f 'runtime.*' traces them)"
        ),
        "{stderr}"
    );
    let own = own_counts(&recording.output.stdout);
    assert_eq!(own["main.handler"], 80, "{own:?}");
    let json = recording.json();
    assert_counts_match(&own, &counts_of(&json));
    let run = json["duration_ns"].as_u64().unwrap();
    for function in json["functions"].as_array().unwrap() {
        let name = function["name"].as_str().unwrap();
        assert!(!name.starts_with("runtime."), "{name} traced");
        // No call lasts longer than the run.
        let longest = function["max_ns"].as_u64().unwrap_or(0);
        assert!(longest <= run, "{name}: {longest} ns in a run of {run} ns");
    }
    // No function has more than the whole of the goroutines' time.
    let summary = recording.report(&["--format=summary"]);
    for row in summary.lines().filter(|line| line.contains('%')) {
        let Some(share) = row.split_whitespace().find(|word| word.ends_with('%')) else {
            continue;
        };
        let Ok(share) = share.trim_end_matches('%').parse::<f64>() else {
            continue;
        };
        assert!(share <= 100.0, "{row}");
    }
    // Each goroutine is named by the id Go gives it: main's is 1.
    let mut said_goroutines: Vec<(u32, &str)> = (stderr.lines())
        .filter_map(|line| line.strip_prefix("goroutine "))
        .map(|rest| {
            let (id, function) = rest.split_once(' ').unwrap();
            (id.parse().unwrap(), function)
        })
        .collect();
    said_goroutines.sort();
    assert_eq!(said_goroutines.len(), 9, "{stderr}");
    assert_eq!(said_goroutines[0], (1, "main.main"), "{stderr}");
    let tree = recording.report(&["--format=replay", "-f", "main.main,main.client"]);
    let mut traced_goroutines: Vec<(u32, &str)> = (tree.lines())
        .filter_map(|line| {
            let (tid, call) = line.split_once("] | ")?;
            let tid = tid.rsplit('[').next()?.trim().parse().ok()?;
            // An opening line or a leaf's, not a closing brace.
            let function = call
                .trim_start()
                .strip_suffix(" {")
                .unwrap_or(call.trim_start());
            Some((
                tid,
                function
                    .strip_suffix("();")
                    .or(function.strip_suffix("()"))?,
            ))
        })
        .collect();
    traced_goroutines.sort();
    assert_eq!(traced_goroutines, said_goroutines, "{tree}");
    // cgo's C code, where r14 holds no goroutine's `g`, runs on threads utrace numbers, never
    // under a goroutine id read from whatever r14 held.
    let c_tree = recording.report(&["--format=replay", "-f", "threadentry,x_cgo_init"]);
    let c_threads: Vec<u32> = (c_tree.lines())
        .filter_map(|line| {
            line.split_once("] | ")?
                .0
                .rsplit('[')
                .next()?
                .trim()
                .parse()
                .ok()
        })
        .collect();
    assert!(!c_threads.is_empty(), "{c_tree}");
    assert!(
        c_threads.iter().all(|&thread| thread >= 1 << 21),
        "C code on goroutine ids: {c_tree}"
    );
    // Named, the runtime's functions are traced.
    let named = record_unchanged(&server, &["2"], &["-f", "main.*,runtime.newobject"]);
    let traced = named.traced_counts();
    assert!(
        traced
            .get("runtime.newobject")
            .is_some_and(|&calls| calls > 0),
        "{traced:?}"
    );
    assert_eq!(traced.get("main.handler"), Some(&16), "{traced:?}");
}
