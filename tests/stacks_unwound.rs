//! End to end: `record --stack` on `test/paths.c` with only `target` traced, so the unwound
//! user stacks alone can say that it was reached from main→a (10 calls), main→b→c (20) and
//! main directly (5).

mod common;

use std::collections::BTreeMap;

use common::*;

/// The unwound stacks of `target` in `--format=stacks --folded` (the `[user stack]` lines):
/// frames → calls.
fn unwound(recording: &Recording) -> BTreeMap<String, u64> {
    unwound_to(recording, "target")
}

/// The unwound stacks of `function`: frames → calls.
fn unwound_to(recording: &Recording, function: &str) -> BTreeMap<String, u64> {
    let text = recording.report(&["--format=stacks", "-f", function, "--folded"]);
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
    assert_the_three_paths(&recording);
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

#[test]
fn a_leaf_that_makes_no_frame_still_shows_its_caller() {
    if !bpf_available("a_leaf_that_makes_no_frame_still_shows_its_caller") {
        return;
    }
    // Frame pointers everywhere but in the leaf `target`, whose code starts with `lock addq` (the
    // probe goes past it, onto a `mov`): no `push %rbp` where the kernel would take the caller's
    // return address itself, so the chain starts at the caller's caller. Sibling calls stay
    // calls, so that a and c have frames to show.
    let paths = compile(
        "paths.c",
        "paths-stack-leaf",
        &[
            "-O2",
            "-fno-omit-frame-pointer",
            "-momit-leaf-frame-pointer",
            "-fno-optimize-sibling-calls",
        ],
    );
    let recording = record_unchanged(&paths, &["1"], &["--stack", "target", "-f", "target"]);
    assert_the_three_paths(&recording);
}

#[test]
fn a_stack_deeper_than_the_frames_kept_is_cut_and_marked() {
    if !bpf_available("a_stack_deeper_than_the_frames_kept_is_cut_and_marked") {
        return;
    }
    let recurse = compile(
        "recurse.c",
        "recurse-stack-fp",
        &["-fno-omit-frame-pointer"],
    );
    // 200 deep: bottom's stack goes on far beyond the 64 frames kept.
    let deep = record_unchanged(
        &recurse,
        &["200", "1"],
        &["--stack", "bottom", "-f", "bottom"],
    );
    let stacks = unwound_to(&deep, "bottom");
    assert_eq!(stacks.len(), 1, "{stacks:?}");
    let (frames, calls) = stacks.iter().next().unwrap();
    assert_eq!(*calls, 1);
    let frames: Vec<&str> = frames.split(';').collect();
    // Outermost first: the mark where the frames were cut, then the innermost 64 the kernel
    // gave (and the caller, when the probe read it from the top of the stack).
    let (last, kept) = frames.split_last().unwrap();
    assert_eq!(kept[0], "[truncated]", "{frames:?}");
    assert!((65..=66).contains(&frames.len()), "{frames:?}");
    assert!(
        kept[1..].iter().all(|&frame| frame == "descend") && *last == "bottom",
        "{frames:?}"
    );
    // 10 deep: the whole stack, unmarked.
    let shallow = record_unchanged(
        &recurse,
        &["10", "1"],
        &["--stack", "bottom", "-f", "bottom"],
    );
    let stacks = unwound_to(&shallow, "bottom");
    assert!(
        stacks
            .keys()
            .all(|frames| !frames.contains("[truncated]") && frames.contains("main;descend")),
        "{stacks:?}"
    );
}

/// The stacks unwound at `target` in a recording of `paths 1` are its three paths, from main on,
/// with their counts. (Above main, the C library's start code has no frame pointers of its own.)
fn assert_the_three_paths(recording: &Recording) {
    let mut from_main: BTreeMap<String, u64> = BTreeMap::new();
    for (frames, calls) in unwound(recording) {
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
}
