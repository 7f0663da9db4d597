//! End to end: the per-function fallback, forced where the kernel has `uprobe_multi`
//! (`UTRACE_ATTACH_MODE=single`), counts every call exactly as `uprobe_multi` does, with PLT
//! calls probed at their stubs. Slow: on this path each probe's release waits for its own grace
//! period.

mod common;

use common::*;

#[test]
fn one_uprobe_per_function_with_uretprobes_counts_exactly() {
    if !bpf_available("one_uprobe_per_function_with_uretprobes_counts_exactly") {
        return;
    }
    assert_single_uprobes_count_exactly("--exit-probes=uretprobe");
}

#[test]
fn one_uprobe_per_function_with_probes_on_exits_counts_exactly() {
    if !bpf_available("one_uprobe_per_function_with_probes_on_exits_counts_exactly") {
        return;
    }
    // Probes on each exit instruction: entries that are exits too, exits after calls of PLT
    // stubs, each with its cookie bit.
    assert_single_uprobes_count_exactly("--exit-probes=ret");
}

/// Records test/calls.c with one uprobe per probe site and `exits`, and checks the counts and
/// what `-d` says of the attach.
fn assert_single_uprobes_count_exactly(exits: &str) {
    let calls = compile("calls.c", "calls", &[]);
    let recording = record_unchanged_with_env(
        &calls,
        &[],
        &["-d", exits],
        &[("UTRACE_ATTACH_MODE", "single")],
    );
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert!(
        stderr.contains("entry and return probes with one uprobe per probe site"),
        "{stderr}"
    );
    assert!(
        stderr.contains("0 probed in the library function they call"),
        "PLT calls stay at their stubs: {stderr}"
    );
    assert!(
        stderr.contains("probe costs measured"),
        "the calibration's probes attach the same way: {stderr}"
    );
    let own = own_counts(&recording.output.stdout);
    assert_eq!(own.get("worker_step"), Some(&10_000));
    assert_counts_match(&own, &recording.traced_counts());
}
