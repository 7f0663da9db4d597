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

/// The caller→callee counts the replay gives, from its folded paths weighted by calls.
fn replay_edges(folded_by_calls: &str) -> BTreeMap<(String, String), u64> {
    let mut edges = BTreeMap::new();
    for (path, calls) in folded(folded_by_calls) {
        let frames: Vec<&str> = path.split(';').collect();
        if let [.., caller, callee] = frames[..] {
            *edges
                .entry((caller.to_owned(), callee.to_owned()))
                .or_default() += calls;
        }
    }
    edges
}

#[test]
fn dot_graph_renders_and_its_edges_count_the_replayed_calls() {
    if !bpf_available("dot_graph_renders_and_its_edges_count_the_replayed_calls") {
        return;
    }
    let paths = compile("paths.c", "paths", &[]);
    let recording = record_unchanged(&paths, &["3"], &[]);
    let dot = recording.report(&["--format=dot"]);
    let edges = dot_edges(&dot);
    assert_eq!(
        edges,
        replay_edges(&recording.report(&["--format=flame-graph", "--weight=calls"]))
    );
    for (caller, callee, calls) in [
        ("main", "a", 30),
        ("main", "b", 60),
        ("b", "c", 60),
        ("a", "target", 30),
        ("c", "target", 60),
        ("main", "target", 15),
    ] {
        assert_eq!(
            edges.get(&(caller.to_owned(), callee.to_owned())),
            Some(&calls),
            "{caller} -> {callee} in\n{dot}"
        );
    }
    // Graphviz reads it and draws it.
    let file = recording.dir.path().join("graph.dot");
    std::fs::write(&file, &dot).unwrap();
    let rendered = match std::process::Command::new("dot")
        .arg("-Tsvg")
        .arg(&file)
        .output()
    {
        Ok(output) => output,
        Err(error) if std::env::var_os("UTRACE_REQUIRE_BPF").is_none() => {
            eprintln!("skipped: dot (graphviz) cannot run: {error}; tools/setup.sh installs it");
            return;
        }
        Err(error) => panic!("dot (graphviz) cannot run: {error}; tools/setup.sh installs it"),
    };
    assert_success(&rendered);
    let svg = String::from_utf8(rendered.stdout).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains(">target</text>"),
        "{svg}"
    );
    // Only the edges between shown functions with -f: b's calls reach target through c.
    let filtered = dot_edges(&recording.report(&["--format=dot", "-f", "main,b,target"]));
    assert_eq!(
        filtered.get(&("b".to_owned(), "target".to_owned())),
        Some(&60)
    );
}

#[test]
fn graph_shows_the_callees_of_each_chosen_function() {
    if !bpf_available("graph_shows_the_callees_of_each_chosen_function") {
        return;
    }
    let paths = compile("paths.c", "paths", &[]);
    let recording = record_unchanged(&paths, &["2"], &[]);
    // The times vary, and with them the order of the graphs; the trees and their counts do not.
    let tree = |glob: &str| -> Vec<String> {
        let graph = recording.report(&["--format=graph", "-f", glob]);
        graph
            .lines()
            .skip(2)
            .map(|line| line.split_once(" : ").unwrap().1.to_owned())
            .collect()
    };
    assert_eq!(tree("b"), ["(40) b", " +-(40) c", "    +-(40) target"]);
    assert_eq!(tree("a"), ["(20) a", " +-(20) target"]);
    // Under main the branches' order follows their times: compare without the drawing.
    let main: Vec<String> = tree("main")
        .iter()
        .map(|line| line.replace(['|', ' '], ""))
        .collect();
    for node in [
        "+-(20)a",
        "+-(20)target",
        "+-(40)b",
        "+-(40)c",
        "+-(40)target",
        "+-(10)target",
    ] {
        assert!(
            main.iter().any(|line| line == node),
            "{node:?} in {main:#?}"
        );
    }
}
