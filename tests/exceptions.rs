//! End to end: C++ exceptions that unwind through traced frames. Under `--exit-probes=ret` no
//! return address is touched, so the program behaves exactly as untraced and every count is
//! exact; under uretprobes the unwinder finds the kernel's trampoline and the program dies.

mod common;

use common::*;

#[test]
fn exceptions_unwind_through_traced_frames_with_ret_probes() {
    if !bpf_available("exceptions_unwind_through_traced_frames_with_ret_probes") {
        return;
    }
    let program = compile("exceptions.cpp", "exceptions", &[]);
    for args in [&[][..], &["50"][..]] {
        assert!(run_untraced(&program, args).status.success());
        let recording = record_unchanged(&program, args, &["--exit-probes=ret"]);
        let stderr = String::from_utf8_lossy(&recording.output.stderr);
        assert!(!stderr.contains("terminate called"), "{stderr}");
        assert_counts_match(
            &own_counts(&recording.output.stdout),
            &recording.traced_counts(),
        );
    }
}

/// The defect `--exit-probes=ret` exists for, so a kernel that fixes it shows up here.
#[test]
fn uretprobes_break_unwinding() {
    if !bpf_available("uretprobes_break_unwinding") {
        return;
    }
    // A copy of its own: uretprobes act on every process that runs the file, whatever the
    // link's pid filter, so they would break the test above running at the same time.
    let program = compile("exceptions.cpp", "exceptions-uretprobe", &[]);
    let recording = record(&program, &[], &["--exit-probes=uretprobe"]);
    assert_eq!(
        recording.output.status.code(),
        Some(128 + libc::SIGABRT),
        "{}",
        String::from_utf8_lossy(&recording.output.stderr)
    );
}
