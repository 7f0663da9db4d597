//! End to end: C++ exceptions and Rust panics that unwind through traced frames. Under
//! uretprobes (the default) the shadow stack gives the unwinder the return addresses the kernel
//! replaced and puts the trampoline back after the catch; under `--exit-probes=ret` no return
//! address is touched. Either way the program behaves exactly as untraced and every count is
//! exact.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// Records `program` with each argument list and `extra` flags: the output and exit status are
/// those of the untraced program and utrace counts each function as the program did.
fn assert_unchanged_with_exact_counts(program: &Path, extra: &[&str]) -> Vec<String> {
    let mut stderrs = Vec::new();
    for args in [&[][..], &["50"][..]] {
        assert!(run_untraced(program, args).status.success());
        let recording = record_unchanged(program, args, extra);
        let stderr = String::from_utf8_lossy(&recording.output.stderr).into_owned();
        assert_counts_match(
            &own_counts(&recording.output.stdout),
            &recording.traced_counts(),
        );
        stderrs.push(stderr);
    }
    stderrs
}

#[test]
fn exceptions_unwind_through_traced_frames_with_uretprobes() {
    if !bpf_available("exceptions_unwind_through_traced_frames_with_uretprobes") {
        return;
    }
    // A copy of its own: uretprobes act on every process that runs the file, whatever the
    // link's pid filter, and only the traced process has a shadow stack: the test below running
    // the same file at the same time would die.
    let program = compile("exceptions.cpp", "exceptions-uretprobe", &[]);
    for stderr in assert_unchanged_with_exact_counts(&program, &["-d"]) {
        assert!(
            stderr.contains("utrace: shadow stack on: 5 unwinder entry points probed in"),
            "{stderr}"
        );
    }
}

#[test]
fn exceptions_unwind_through_traced_frames_with_ret_probes() {
    if !bpf_available("exceptions_unwind_through_traced_frames_with_ret_probes") {
        return;
    }
    let program = compile("exceptions.cpp", "exceptions", &[]);
    assert_unchanged_with_exact_counts(&program, &["--exit-probes=ret"]);
}

/// A C++ process utrace attaches to cannot be stopped for the shadow stack: its exits are probed
/// on their instructions unless asked otherwise, and it throws through traced frames as untraced.
#[test]
fn an_attached_process_with_an_unwinder_gets_exit_probes_on_instructions() {
    if !bpf_available("an_attached_process_with_an_unwinder_gets_exit_probes_on_instructions") {
        return;
    }
    // Its own copy: another test's uretprobes on the same file would act here too.
    let program = compile("exceptions.cpp", "exceptions-attached", &[]);
    let untraced = run_untraced(&program, &["20"]);
    let (mut process, lines) =
        start_waiting(Command::new(&program).arg("20").env("EXCEPTIONS_WAIT", "1"));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("utrace.data");
    let recorder = AttachedRecorder::start(process.id(), &data, &[]);
    let before_attach = recorder.said.clone();
    send_signal(process.id(), libc::SIGUSR1);
    let stdout: Vec<String> = lines.map(|line| line.unwrap()).collect();
    let status = process.wait().unwrap();
    recorder.finish();

    assert!(
        before_attach
            .iter()
            .any(|line| line.starts_with("utrace: exits probed on their instructions")),
        "{before_attach:?}"
    );
    assert_eq!(status.code(), untraced.status.code());
    let stdout = stdout.join("\n") + "\n";
    assert_eq!(stdout, String::from_utf8_lossy(&untraced.stdout));
    // main was entered before the attach: its exit is one of a call already running.
    let mut own = own_counts(stdout.as_bytes());
    own.remove("main");
    let mut traced = counts_of(&report_json(&data));
    traced.remove("main");
    assert_counts_match(&own, &traced);
}

/// Two threads throwing through up to 150 traced frames at the same time: each one's stop
/// for its stack writes must hold it, even while the other's is still on its way.
#[test]
fn threads_throwing_at_the_same_time_unwind_with_uretprobes() {
    if !bpf_available("threads_throwing_at_the_same_time_unwind_with_uretprobes") {
        return;
    }
    let program = compile("thread_exceptions.cpp", "thread-exceptions", &[]);
    // Before the threads' stops were their own, each run died more often than not.
    for _ in 0..3 {
        let recording = record_unchanged(&program, &["200"], &[]);
        assert_counts_match(
            &own_counts(&recording.output.stdout),
            &recording.traced_counts(),
        );
    }
}

#[test]
fn panics_unwind_through_traced_frames_with_uretprobes() {
    if !bpf_available("panics_unwind_through_traced_frames_with_uretprobes") {
        return;
    }
    let program = compile_rust("panics.rs", "panics");
    assert_unchanged_with_exact_counts(&program, &[]);
}

/// A C program maps no unwinder: no probe goes on one and no frame is followed.
#[test]
fn programs_without_an_unwinder_pay_nothing() {
    if !bpf_available("programs_without_an_unwinder_pay_nothing") {
        return;
    }
    let program = compile("calls.c", "calls-no-unwinder", &[]);
    let recording = record_unchanged(&program, &[], &["-d"]);
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert!(
        stderr.contains("utrace: shadow stack off: the program maps no unwinder"),
        "{stderr}"
    );
    assert!(!stderr.contains("unwinder entry points probed"), "{stderr}");
}
