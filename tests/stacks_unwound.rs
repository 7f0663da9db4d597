//! End to end: `record --stack` on `test/paths.c` with only `target` traced, so the unwound
//! user stacks alone can say that it was reached from main→a (10 calls), main→b→c (20) and
//! main directly (5).

mod common;

use std::collections::BTreeMap;

use common::*;

/// The unwound stacks of `--format=stacks --folded` (the `[user stack]` lines): frames → calls.
fn unwound(recording: &Recording) -> BTreeMap<String, u64> {
    let text = recording.report(&["--format=stacks", "-f", "target", "--folded"]);
    text.lines()
        .filter_map(|line| line.strip_prefix("[user stack];"))
        .map(|line| {
            let (frames, calls) = line.rsplit_once(' ').expect("a weight after the frames");
            (frames.to_owned(), calls.parse().expect("a count"))
        })
        .collect()
}

#[test]
fn frame_pointers_give_the_three_paths_to_target() {
    if !bpf_available("frame_pointers_give_the_three_paths_to_target") {
        return;
    }
    // -O0: every function, `target` included, starts with `push %rbp`, where the kernel also
    // takes the caller's return address from the top of the stack (see stacks.bpf.h).
    let paths = compile(
        "paths.c",
        "paths-stack-fp",
        &["-O0", "-fno-omit-frame-pointer"],
    );
    let recording = record_unchanged(&paths, &["1"], &["--stack", "target", "-f", "target"]);
    // Above main, the C library's start code, which has no frame pointers of its own: keep
    // what is from main on.
    let mut from_main: BTreeMap<String, u64> = BTreeMap::new();
    for (frames, calls) in unwound(&recording) {
        let start = frames.find("main;").expect("main on every stack");
        *from_main.entry(frames[start..].to_owned()).or_default() += calls;
    }
    let expected: BTreeMap<String, u64> = [
        ("main;a;target".to_owned(), 10),
        ("main;b;c;target".to_owned(), 20),
        ("main;target".to_owned(), 5),
    ]
    .into();
    assert_eq!(from_main, expected);
    let text = recording.report(&["--format=stacks", "-f", "target"]);
    assert!(
        text.contains("Unwound user stacks (record --stack): 3 stacks"),
        "{text}"
    );
    assert!(text.contains("20  "), "{text}");
}

#[test]
fn without_frame_pointers_the_stacks_are_short_and_nothing_breaks() {
    if !bpf_available("without_frame_pointers_the_stacks_are_short_and_nothing_breaks") {
        return;
    }
    let paths = compile("paths.c", "paths-stack-nofp", &["-fomit-frame-pointer"]);
    // The program's output and exit code are unchanged (record_unchanged checks them).
    let recording = record_unchanged(&paths, &["1"], &["--stack", "target", "-f", "target"]);
    let stacks = unwound(&recording);
    // Every call has a stack, and each starts at target's entry...
    assert_eq!(stacks.values().sum::<u64>(), 35, "{stacks:?}");
    assert!(
        stacks.keys().all(|frames| frames.ends_with("target")),
        "{stacks:?}"
    );
    // ...but the chain of frame pointers breaks: the callers a, b and c are not all there.
    let complete = ["main;a;target", "main;b;c;target"];
    assert!(
        !complete
            .iter()
            .all(|path| stacks.keys().any(|frames| frames.ends_with(path))),
        "{stacks:?}"
    );
}
