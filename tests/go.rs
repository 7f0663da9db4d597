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

/// Builds test/goprog.go with `go build`, once per test binary: the Go caches under the build
/// directory, and no network (only the standard library is used).
fn go_program() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = build_dir().join("go");
        let binary = build_dir().join("goprog");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("test/goprog.go");
        let output = Command::new("go")
            .args(["build", "-o"])
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
    })
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
    let said = assert_traced_exactly(&["-d"], GO_PROGRAM);
    // runtime.abort.abi0 starts with a trap: said, in words that agree with the count.
    let unprobeable = said
        .lines()
        .find(|line| line.contains("be probed (their first instruction"))
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
