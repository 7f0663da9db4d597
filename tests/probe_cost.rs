//! End to end: utrace measures what its own probes cost at start, and reports take it out of
//! durations and self times, so they come out as the program runs untraced.

mod common;

use common::*;

/// test/spin.c's ROUNDS CALLS SPIN LEAF_SPIN: each call of `work` spins about 2 µs between
/// each of its 500 calls of `tiny` (emulated entry), whose probes add about a quarter to its
/// raw self time; `leaf` spins about 50 µs, and its single-stepped entry probe adds about a third
/// to its raw duration.
const ARGS: [&str; 4] = ["50", "500", "7000", "180000"];

/// The untraced copies and the program's own timing get no probes.
const UNPROBED: [&str; 4] = [
    "--no-function",
    "untraced_*",
    "--no-function",
    "clock_gettime*",
];

#[test]
fn corrected_self_times_are_the_untraced_times() {
    if !bpf_available("corrected_self_times_are_the_untraced_times") {
        return;
    }
    let spin = compile("spin.c", "spin", &[]);
    let recording = record_unchanged(&spin, &ARGS, &UNPROBED);
    assert_counts_match(
        &own_counts(&recording.output.stdout),
        &recording.traced_counts(),
    );
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    let corrected = recording.report(&["--avg-self"]);
    let raw = recording.report(&["--avg-self", "--raw-times"]);
    for function in ["work", "leaf"] {
        let untraced = untraced_ns(&stderr, function);
        let corrected_ns = min_self_ns(&corrected, function);
        let raw_ns = min_self_ns(&raw, function);
        let report = format!(
            "{function}: untraced {untraced} ns, corrected {corrected_ns} ns, raw {raw_ns} ns\n\
             {corrected}{raw}"
        );
        eprintln!(
            "{function}: corrected/untraced {:.3}, raw/untraced {:.3}",
            corrected_ns / untraced,
            raw_ns / untraced
        );
        assert!(
            (corrected_ns / untraced - 1.0).abs() < 0.10,
            "corrected self time not within 10% of the untraced time: {report}"
        );
        assert!(
            raw_ns / untraced > 1.10,
            "raw self time not inflated by more than 10%: {report}"
        );
    }

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
