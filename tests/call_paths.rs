//! End to end: the reports of where calls come from and where they go (`stacks`, `dot`,
//! `graph`) on `test/paths.c`, whose `target` is reached by three paths with known counts.

mod common;

use std::collections::BTreeMap;

use common::*;

/// The folded paths of `--format=stacks --folded`: path → calls.
fn folded(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .map(|line| {
            let (path, calls) = line.rsplit_once(' ').expect("a weight after the path");
            (path.to_owned(), calls.parse().expect("a count"))
        })
        .collect()
}

#[test]
fn stacks_give_the_three_paths_to_target_with_their_counts() {
    if !bpf_available("stacks_give_the_three_paths_to_target_with_their_counts") {
        return;
    }
    for (name, flags) in [
        ("paths", &[][..]),
        ("paths-fp", &["-fno-omit-frame-pointer"][..]),
        ("paths-nofp", &["-fomit-frame-pointer"][..]),
    ] {
        let paths = compile("paths.c", name, flags);
        let recording = record_unchanged(&paths, &["1"], &[]);
        assert_counts_match(
            &own_counts(&recording.output.stdout),
            &recording.traced_counts(),
        );
        let stacks = folded(&recording.report(&["--format=stacks", "-f", "target", "--folded"]));
        let expected: BTreeMap<String, u64> = [
            ("main;a;target", 10),
            ("main;b;c;target", 20),
            ("main;target", 5),
        ]
        .into_iter()
        .map(|(path, calls)| (path.to_owned(), calls))
        .collect();
        assert_eq!(stacks, expected, "{name}");

        let text = recording.report(&["--format=stacks", "-f", "target"]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "target: 35 calls, 3 paths", "{text}");
        // Most frequent first.
        assert!(
            lines[2].trim_start().starts_with("20 ") && lines[2].ends_with("main → b → c → target"),
            "{text}"
        );
        assert!(
            lines[3].trim_start().starts_with("10 ") && lines[3].ends_with("main → a → target"),
            "{text}"
        );
        assert!(
            lines[4].trim_start().starts_with("5 ") && lines[4].ends_with("main → target"),
            "{text}"
        );
        assert_eq!(lines.len(), 5, "{text}");
    }
}

#[test]
fn stacks_hide_frames_and_calls_as_the_filters_say() {
    if !bpf_available("stacks_hide_frames_and_calls_as_the_filters_say") {
        return;
    }
    let paths = compile("paths.c", "paths", &[]);
    let recording = record_unchanged(&paths, &["2"], &[]);
    // A hidden caller leaves the path, as if it had not been traced.
    let stacks = folded(&recording.report(&[
        "--format=stacks",
        "-f",
        "target",
        "--folded",
        "--no-function",
        "c",
    ]));
    assert_eq!(stacks.get("main;b;target"), Some(&40));
    // Another thread than the program's own: nothing.
    let none = recording.report(&["--format=stacks", "-f", "target", "--tid-filter", "1"]);
    assert_eq!(none, "");
}
