//! End to end: utrace measures what its own probes cost at start, and reports take it out of
//! durations and self times, so they come out as the program runs untraced.

mod common;

use std::path::Path;

use common::*;

/// test/spin.c's ROUNDS CALLS SPIN LEAF_SPIN: each call of `work` spins about 2.5 µs between
/// each of its 500 calls of `tiny` (emulated entry), whose probes add about a fifth to a third to
/// its raw self time; `leaf` spins about 17 µs, and its single-stepped entry probe adds about 40%
/// to its raw duration (on this VM in November 2026 a single-step costs about 5 µs: a leaf of
/// 70 µs, as before, showed it as only 6% and proved nothing).
const ARGS: [&str; 4] = ["50", "500", "9000", "50000"];

/// The untraced copies and the program's own timing get no probes.
const UNPROBED: [&str; 4] = [
    "--no-function",
    "untraced_*",
    "--no-function",
    "clock_gettime*",
];

/// How many recordings a test may make before it gives up: what a probe costs swings with what
/// else the machine runs (other processes hitting uprobes contend with ours), and one recording
/// taken during a swing is not a wrong correction. Every attempt must fail for the test to fail.
const ATTEMPTS: usize = 3;

#[test]
fn corrected_self_times_are_the_untraced_times() {
    if !bpf_available("corrected_self_times_are_the_untraced_times") {
        return;
    }
    let spin = compile("spin.c", "spin", &[]);
    let mut failures = Vec::new();
    for _ in 0..ATTEMPTS {
        let recording = record_unchanged(&spin, &ARGS, &UNPROBED);
        assert_counts_match(
            &own_counts(&recording.output.stdout),
            &recording.traced_counts(),
        );
        // tiny starts with `push %rbp`, which the kernel emulates; leaf with a `mov`, which it
        // single-steps: json says which.
        let json = recording.json();
        let entry_site = |name: &str| {
            let functions = json["functions"].as_array().unwrap();
            let function = functions.iter().find(|f| f["name"] == name).unwrap();
            function["entry_site"].as_str().unwrap().to_owned()
        };
        assert_eq!(
            (entry_site("tiny"), entry_site("leaf")),
            ("emulated".to_owned(), "single-stepped".to_owned())
        );
        let info = utrace()
            .args(["info", "-i"])
            .arg(recording.data())
            .output()
            .unwrap();
        let info = String::from_utf8_lossy(&info.stdout);
        assert!(
            info.contains("probe costs: measured at start")
                && info.contains("single-stepped entry, uretprobe: "),
            "{info}"
        );
        match correction_failure(&recording, &spin) {
            None => return,
            Some(failure) => failures.push(failure),
        }
    }
    panic!("{}", failures.join("\n\n"));
}

/// How far from its untraced time `work`'s corrected self time may be, and how far above it its
/// raw one must be. DESIGN.md asks for 25%; on this 2-vCPU VM the correction of `work`'s 500
/// emulated calls lands between 0.87 and 1.03 of the untraced time from one run to the next
/// (with the code of 2026-11-24 as with today's), so 10% failed runs that meet the target.
const WORK_TOLERANCE: f64 = 0.15;

/// What is wrong with the times of `recording`, if anything: `work`'s corrected self time must
/// be within [`WORK_TOLERANCE`] of its untraced time and its raw one more than that above; `leaf`'s corrected
/// time at most half as far from its untraced time as its raw one (a single-step's cost swings
/// more than an emulation's).
fn correction_failure(recording: &Recording, spin: &Path) -> Option<String> {
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    let corrected = recording.report(&["--avg-self"]);
    let raw = recording.report(&["--avg-self", "--raw-times"]);
    let ratios = |function: &str| {
        let untraced = untraced_ns(&stderr, function);
        let ratios = (
            min_self_ns(&corrected, function) / untraced,
            min_self_ns(&raw, function) / untraced,
        );
        eprintln!(
            "{function}: untraced {untraced} ns; corrected/untraced {:.3}, raw/untraced {:.3}",
            ratios.0, ratios.1
        );
        ratios
    };
    let (corrected_work, raw_work) = ratios("work");
    let (corrected_leaf, raw_leaf) = ratios("leaf");
    let problem = if (corrected_work - 1.0).abs() >= WORK_TOLERANCE {
        "work's corrected self time is not within 15% of its untraced time"
    } else if raw_work <= 1.0 + WORK_TOLERANCE {
        "work's raw self time is not inflated by more than 15%"
    } else if raw_leaf <= 1.10 || (corrected_leaf - 1.0).abs() >= 0.5 * (raw_leaf - 1.0) {
        "leaf's corrected time is not twice as close to its untraced time as its raw time"
    } else {
        marking_failure(spin)?
    };
    Some(format!("{problem}:\n{corrected}{raw}{stderr}"))
}

/// What is wrong with how the summary marks times made mostly of probe costs, if anything, in
/// a recording of test/spin.c whose `leaf` spins 10 iterations: a few ns of work under a
/// single-stepped probe that costs µs, so most of its raw time is probe cost and the summary
/// marks it (json: `probe_share`), while `work`, whose own spin outweighs its calls' probes, is
/// unmarked. Made after the other recording, not beside it: two spin programs pinned to one CPU
/// would preempt each other for milliseconds. Under `--raw-times` nothing is taken out and
/// nothing is marked, always.
fn marking_failure(spin: &Path) -> Option<&'static str> {
    let recording = record_unchanged(spin, &["20", "500", "9000", "10"], &UNPROBED);
    let share = |json: &serde_json::Value, name: &str| -> f64 {
        let functions = json["functions"].as_array().unwrap();
        let function = functions.iter().find(|f| f["name"] == name);
        function.unwrap_or_else(|| panic!("no {name}: {json}"))["probe_share"]
            .as_f64()
            .unwrap()
    };
    let raw: serde_json::Value =
        serde_json::from_str(&recording.report(&["--format=json", "--raw-times"])).unwrap();
    assert_eq!((share(&raw, "leaf"), share(&raw, "work")), (0.0, 0.0));
    let raw_summary = recording.report(&["--raw-times"]);
    assert!(!raw_summary.contains("* "), "{raw_summary}");

    let json = recording.json();
    let (leaf, work) = (share(&json, "leaf"), share(&json, "work"));
    eprintln!("probe shares: leaf {leaf}, work {work}");
    let summary = recording.report(&[]);
    let row = |name: &str| {
        let row = summary
            .lines()
            .find(|line| line.ends_with(&format!(" {name}")));
        row.unwrap_or_else(|| panic!("no {name}: {summary}"))
            .to_owned()
    };
    if leaf <= 0.5 || work >= 0.5 {
        Some("leaf's probe share is not above one half, or work's is")
    } else if !row("leaf").ends_with("  * leaf") || !row("work").ends_with("  work") {
        Some("the summary does not mark leaf, or marks work")
    } else if !summary.contains("note: * marks ") {
        Some("the summary does not say what * marks")
    } else {
        None
    }
}

/// What test/spin.c said its fastest untraced round of `function` took (`spin: untraced work
/// 1012345`).
fn untraced_ns(stderr: &str, function: &str) -> f64 {
    let prefix = format!("spin: untraced {function} ");
    stderr
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("spin did not print its {function} time: {stderr}"))
        .parse()
        .unwrap()
}

/// The "Min self" of `function` in a `--avg-self` summary, in ns.
fn min_self_ns(summary: &str, function: &str) -> f64 {
    let row: Vec<&str> = summary
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|row| row.last() == Some(&function))
        .unwrap_or_else(|| panic!("{function} is not in the summary: {summary}"));
    // total (2) | % | self (2) | calls | avg self (2) | min self (2) | max self (2) | name
    let value: f64 = row[8].parse().unwrap();
    let unit = match row[9] {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        other => panic!("unknown unit {other} in {summary}"),
    };
    value * unit
}
