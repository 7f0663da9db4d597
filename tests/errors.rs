//! Bad input gets one clear line on stderr and a non-zero exit, never a panic.

mod common;

use std::process::Output;

use common::*;

/// Asserts a failure with one line on stderr that contains `expected`.
fn assert_clear_failure(output: &Output, expected: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "expected a failure, got: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "utrace panicked: {stderr}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "expected one line, got: {stderr}"
    );
    assert!(
        stderr.contains(expected),
        "expected {expected:?} in: {stderr}"
    );
}

fn record_error(args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    utrace()
        .arg("record")
        .arg("-o")
        .arg(dir.path().join("utrace.data"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn missing_programs_are_named() {
    assert_clear_failure(
        &record_error(&["-c", "/no/such/program"]),
        "/no/such/program: No such file or directory",
    );
    assert_clear_failure(
        &record_error(&["-c", "no-such-program-utrace"]),
        "no-such-program-utrace: command not found in PATH",
    );
    assert_clear_failure(&record_error(&["-c", "/tmp"]), "/tmp: is a directory");
    assert_clear_failure(
        &record_error(&["-c", "prog 'unbalanced"]),
        "cannot parse the command",
    );
}

#[test]
fn files_that_are_not_traceable_programs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    assert_clear_failure(
        &record_error(&[script.to_str().unwrap()]),
        "not an ELF file",
    );

    let stripped = dir.path().join("stripped");
    std::fs::copy(compile("exitcode.c", "exitcode", &[]), &stripped).unwrap();
    let status = std::process::Command::new("strip")
        .arg(&stripped)
        .status()
        .unwrap();
    assert!(status.success());
    assert_clear_failure(
        &record_error(&[stripped.to_str().unwrap()]),
        "no function symbols",
    );
}

#[test]
fn recording_without_bpf_permission_says_what_is_missing() {
    if !bpf_available("recording_without_bpf_permission_says_what_is_missing") {
        return;
    }
    // Run utrace as nobody, with no capabilities: loading BPF must fail with a clear message.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let exitcode = compile("exitcode.c", "exitcode", &[]);
    let copy = dir.path().join("exitcode");
    std::fs::copy(exitcode, &copy).unwrap();
    let output = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_utrace"))
        .arg("record")
        .arg("-o")
        .arg(dir.path().join("utrace.data"))
        .arg(&copy)
        .output()
        .unwrap();
    assert_clear_failure(&output, "CAP_BPF");
    assert!(
        !dir.path().join("utrace.data").exists(),
        "nothing is written when nothing can be recorded"
    );
}

#[test]
fn unreadable_data_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let report =
        |path: &std::path::Path| utrace().arg("report").arg("-i").arg(path).output().unwrap();

    let missing = dir.path().join("missing.data");
    assert_clear_failure(&report(&missing), "missing.data");

    let empty = dir.path().join("empty.data");
    std::fs::write(&empty, b"").unwrap();
    assert_clear_failure(&report(&empty), "empty.data");

    let text = dir.path().join("text.data");
    std::fs::write(&text, "this is not a trace\n".repeat(10)).unwrap();
    assert_clear_failure(&report(&text), "not a utrace.data file");
}

#[test]
fn unknown_report_formats_are_refused() {
    let output = utrace()
        .args(["report", "--format=pie-chart"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("pie-chart"), "{stderr}");
    assert!(!stderr.contains("panicked"));
}
