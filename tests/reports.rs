//! End to end: record `test/calls.c` under real BPF and read it back with the report options:
//! the call tree, Chrome traces, the filters and `utrace info` must agree with the program's own
//! counts (see test/README.md).

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;

/// Records `calls` once per test; asserts nothing was lost, so counts can be exact.
fn record_calls() -> Recording {
    let calls = compile("calls.c", "calls", &[]);
    let recording = record(&calls, &[], &[]);
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert!(recording.output.status.success(), "{stderr}");
    assert!(stderr.contains("0 lost"), "utrace lost events: {stderr}");
    recording
}

/// Calls per function from the JSON report with extra flags.
fn counts(recording: &Recording, flags: &[&str]) -> BTreeMap<String, u64> {
    let mut args = vec!["--format=json"];
    args.extend_from_slice(flags);
    let json: serde_json::Value = serde_json::from_str(&recording.report(&args)).unwrap();
    json["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_owned(),
                f["calls"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn replay_tree_shows_nesting_and_every_thread() {
    if !bpf_available("replay_tree_shows_nesting_and_every_thread") {
        return;
    }
    let recording = record_calls();
    let tree = recording.report(&["--format=replay"]);
    let lines: Vec<&str> = tree.lines().collect();
    assert!(
        lines[0].starts_with("# DURATION") && lines[0].contains("TID"),
        "{}",
        lines[0]
    );
    assert!(
        lines.iter().any(|l| l.ends_with("| main() {")),
        "no main block"
    );
    assert!(lines.iter().any(|l| l.trim_end().ends_with(" fib() {")));
    assert!(lines.iter().any(|l| l.ends_with("} /* fib */")));
    assert!(lines.iter().any(|l| l.ends_with(" fib();")));
    // Every line names its thread; the four workers each open a `worker` block of their own.
    let tid = |line: &str| -> u32 {
        let start = line.find('[').expect("a thread id column") + 1;
        let end = line.find(']').unwrap();
        line[start..end].trim().parse().unwrap()
    };
    let threads: BTreeSet<u32> = lines[1..].iter().map(|l| tid(l)).collect();
    assert_eq!(threads.len(), 5, "main and 4 workers");
    let workers: BTreeSet<u32> = lines
        .iter()
        .filter(|l| l.ends_with("| worker() {"))
        .map(|l| tid(l))
        .collect();
    assert_eq!(workers.len(), 4);
    // One leaf or closing line per call, each with a duration; open lines have none.
    let ends = lines[1..].iter().filter(|l| !l.ends_with('{')).count();
    let calls: u64 = counts(&recording, &[]).values().sum();
    assert_eq!(ends as u64, calls);
}

#[test]
fn function_filters_keep_exact_counts() {
    if !bpf_available("function_filters_keep_exact_counts") {
        return;
    }
    let recording = record_calls();
    let all = counts(&recording, &[]);
    assert_eq!(all["fib"], 23_573);

    let only_fib = counts(&recording, &["--function", "fib*"]);
    assert_eq!(only_fib, BTreeMap::from([("fib".to_owned(), 23_573)]));

    let mut without_fib = all.clone();
    without_fib.remove("fib");
    assert_eq!(counts(&recording, &["--no-function", "fib"]), without_fib);

    let both = counts(
        &recording,
        &["-f", "is_*,op_[as]*", "--no-function", "is_odd"],
    );
    assert_eq!(
        both,
        BTreeMap::from([
            ("is_even".to_owned(), 18),
            ("op_add".to_owned(), 10),
            ("op_sub".to_owned(), 10),
        ])
    );

    // The filtered tree shows fib with the other functions gone around it.
    let tree = recording.report(&["--format=replay", "-f", "main,fib"]);
    assert!(
        tree.lines().any(|l| l.ends_with("|   fib() {")),
        "fib right under main"
    );
    assert!(!tree.contains("worker"));
}

#[test]
fn max_depth_one_shows_the_roots_of_each_thread() {
    if !bpf_available("max_depth_one_shows_the_roots_of_each_thread") {
        return;
    }
    let recording = record_calls();
    let mut roots = counts(&recording, &["--max-depth", "1"]);
    // libc's exit handlers call through the PLT after main has returned: roots of their own.
    roots.retain(|name, _| !name.ends_with("@plt"));
    assert_eq!(
        roots,
        BTreeMap::from([("main".to_owned(), 1), ("worker".to_owned(), 4)])
    );
    // Nothing was dropped from the time: main's own time is now its whole time.
    let json: serde_json::Value =
        serde_json::from_str(&recording.report(&["--format=json", "--max-depth=1"])).unwrap();
    let functions = json["functions"].as_array().unwrap();
    for root in functions
        .iter()
        .filter(|f| f["name"] == "main" || f["name"] == "worker")
    {
        assert_eq!(root["self_ns"], root["total_ns"], "{}", root["name"]);
    }
}

#[test]
fn chrome_trace_has_a_begin_and_an_end_per_call() {
    if !bpf_available("chrome_trace_has_a_begin_and_an_end_per_call") {
        return;
    }
    let recording = record_calls();
    let trace: serde_json::Value =
        serde_json::from_str(&recording.report(&["--format=chrome"])).expect("valid JSON");
    let mut phases: BTreeMap<&str, u64> = BTreeMap::new();
    let mut open: BTreeMap<u64, i64> = BTreeMap::new();
    for event in trace["traceEvents"].as_array().unwrap() {
        let phase = event["ph"].as_str().unwrap();
        *phases.entry(phase).or_default() += 1;
        let depth = open.entry(event["tid"].as_u64().unwrap()).or_default();
        match phase {
            "B" => *depth += 1,
            "E" => *depth -= 1,
            _ => {}
        }
        assert!(*depth >= 0);
    }
    let calls: u64 = counts(&recording, &[]).values().sum();
    assert_eq!(phases["B"] + phases["E"], 2 * calls);
    assert_eq!(phases["B"], phases["E"]);
    // The process name, then one thread name per thread.
    assert_eq!(phases["M"], 1 + 5);
    assert!(open.values().all(|&depth| depth == 0));
}

#[test]
fn info_describes_the_recording() {
    if !bpf_available("info_describes_the_recording") {
        return;
    }
    let recording = record_calls();
    let output = utrace()
        .arg("info")
        .arg("-i")
        .arg(recording.data())
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let field = |name: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .trim()
            .to_owned()
    };
    assert!(field("command").ends_with("/calls"), "{text}");
    assert!(field("threads").starts_with("5 ("), "{text}");
    assert_eq!(field("lost events"), "0");
    assert_eq!(field("complete"), "yes");
    assert!(field("started").ends_with(" UTC"));
    let calls: u64 = counts(&recording, &[]).values().sum();
    let preempted = preemption_events(&recording.data());
    assert_eq!(field("events"), (2 * calls + preempted).to_string());
}

#[test]
fn bad_filter_values_are_one_line_errors_naming_the_flag() {
    if !bpf_available("bad_filter_values_are_one_line_errors_naming_the_flag") {
        return;
    }
    let recording = record_calls();
    for (args, flag) in [
        (&["--function", "fib["][..], "--function"),
        (&["--no-function", "x\\"][..], "--no-function"),
        (&["--time-filter", "2 weeks"][..], "--time-filter"),
        (&["--max-depth", "0"][..], "--max-depth"),
        (&["--format=replay", "--per-thread"][..], "--per-thread"),
    ] {
        let output = utrace()
            .arg("report")
            .arg("-i")
            .arg(recording.data())
            .args(args)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(flag), "{stderr}");
    }
}
