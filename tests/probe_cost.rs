//! End to end: utrace measures what its own probes cost at start, and reports take it out of
//! durations and self times, so they come out as the program runs untraced.

mod common;

use std::collections::BTreeMap;

use common::*;
use utrace::report::summary::CorrectedDuration;

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
/// taken during a swing is not a wrong correction (on 2026-11-25 the VM swung between two speeds
/// a factor of 2 apart, the untraced leaf taking 16 or 30 µs, and three slow recordings in a row
/// came out 0.01 past the leaf's bound). Every attempt must fail for the test to fail.
const ATTEMPTS: usize = 5;

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
        assert_probe_shares(&recording);
        match correction_failure(&recording) {
            None => return,
            Some(failure) => failures.push(failure),
        }
    }
    panic!("{}", failures.join("\n\n"));
}

/// test/spin.c with `work` calling `tiny` back to back: 20 rounds of 500 calls of a function of
/// a few ns, whose probes cost a hundred times more.
const TINY_CALLS: [&str; 4] = ["20", "500", "0", "1000"];

#[test]
fn per_call_times_below_the_resolution_show_as_a_bound() {
    if !bpf_available("per_call_times_below_the_resolution_show_as_a_bound") {
        return;
    }
    let spin = compile("spin.c", "spin", &[]);
    let recording = record_unchanged(&spin, &TINY_CALLS, &UNPROBED);
    let counts = own_counts(&recording.output.stdout);
    assert_eq!(counts["tiny"], 10_000);
    assert_counts_match(&counts, &recording.traced_counts());

    // tiny's shortest call is its few instructions: far below what its probes' cost varies by,
    // so json keeps the number and says so, and the summary shows the bound.
    let json = recording.json();
    let functions = json["functions"].as_array().unwrap();
    let tiny = functions.iter().find(|f| f["name"] == "tiny").unwrap();
    assert_eq!(tiny["calls"], 10_000);
    let resolution_ns = tiny["resolution_ns"].as_u64().unwrap();
    assert!(
        resolution_ns > 0 && tiny["min_ns"].as_u64().unwrap() < resolution_ns,
        "{tiny}"
    );
    let below = tiny["below_resolution"].as_array().unwrap();
    assert!(below.contains(&"min_ns".into()), "{tiny}");

    let summary = recording.report(&["--percentiles"]);
    let row = summary_row(&summary, "tiny");
    // Total (2 words) | % | self (2) | calls | average (2) | minimum (2) | ...
    assert_eq!(row[5], "10000", "{summary}");
    let bound = CorrectedDuration::new(0, resolution_ns).to_string();
    assert_eq!(row[8..10].join(" "), bound, "{summary}");
    assert!(bound.starts_with('<'));
    // The total sums the timed calls, which resolve together their number times as much: a
    // bound exactly when the average is.
    let timed_calls =
        tiny["calls"].as_u64().unwrap() - tiny["unknown_time_calls"].as_u64().unwrap();
    // ...and is never more than what was measured around it: its calls, probe costs left in.
    let raw_json = recording.report(&["--format=json", "--raw-times"]);
    let raw_json: serde_json::Value = serde_json::from_str(&raw_json).unwrap();
    let raw_tiny = raw_json["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "tiny")
        .unwrap();
    let raw_total_ns = raw_tiny["total_ns"].as_u64().unwrap();
    // ...nor than the whole trace, what Total % is of (said above the table, to the microsecond).
    let span: Vec<&str> = summary
        .lines()
        .find_map(|line| line.trim().strip_prefix("Total % is of "))
        .and_then(|rest| rest.split(':').next())
        .expect("what Total % is of")
        .split_whitespace()
        .collect();
    let span_ns = nanoseconds(span[0], span[1]);
    let sum_bound = CorrectedDuration::new(0, timed_calls * resolution_ns)
        .within(raw_total_ns)
        .within(span_ns)
        .to_string();
    let average_below = below.contains(&"avg_ns".into());
    assert_eq!(below.contains(&"total_ns".into()), average_below, "{tiny}");
    match average_below {
        true => assert_eq!(row[0..2].join(" "), sum_bound, "{summary}"),
        false => assert!(!row[0].starts_with('<'), "{summary}"),
    }
    assert!(summary.contains("note: <N is a time below N"), "{summary}");
    // Under --raw-times nothing is taken out: every figure is a measurement.
    let raw = recording.report(&["--percentiles", "--raw-times"]);
    assert!(!raw.contains('<'), "{raw}");
    assert!(!recording
        .report(&["--format=json", "--raw-times"])
        .contains("resolution"));
}

/// The words of `function`'s row in a summary.
fn summary_row<'s>(summary: &'s str, function: &str) -> Vec<&'s str> {
    summary
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|row| row.last() == Some(&function))
        .unwrap_or_else(|| panic!("{function} is not in the summary: {summary}"))
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
fn correction_failure(recording: &Recording) -> Option<String> {
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
        return None;
    };
    Some(format!("{problem}:\n{corrected}{raw}{stderr}"))
}

/// Checks the probe shares `recording`'s reports give and the marks they put: each function's
/// `probe_share` is what the correction took out of its raw total (its raw total less its
/// corrected one, over its raw total, from the two json reports), a summary row has a `*` exactly
/// when that share is above one half, and the note counts them. Under `--raw-times` nothing is
/// taken out and nothing is marked. (Which functions come out above one half depends on what the
/// machine's probes cost that day; how the figure is made and shown does not.)
fn assert_probe_shares(recording: &Recording) {
    let raw: serde_json::Value =
        serde_json::from_str(&recording.report(&["--format=json", "--raw-times"])).unwrap();
    let corrected = recording.json();
    // (total, probe share, time preempted) by function. The time preempted is taken out too,
    // and is no probe cost: the share is of what was measured less that time.
    let figures = |json: &serde_json::Value| -> BTreeMap<String, (u64, f64, u64)> {
        let functions = json["functions"].as_array().unwrap();
        let entry = |f: &serde_json::Value| {
            let figures = (
                f["total_ns"].as_u64().unwrap(),
                f["probe_share"].as_f64().unwrap(),
                f["preempted_ns"].as_u64().unwrap_or(0),
            );
            (f["name"].as_str().unwrap().to_owned(), figures)
        };
        functions.iter().map(entry).collect()
    };
    let (raw, corrected) = (figures(&raw), figures(&corrected));
    assert!(raw.values().all(|&(_, share, _)| share == 0.0), "{raw:?}");
    let mut marked = BTreeMap::new();
    for (name, &(total, share, preempted)) in &corrected {
        let measured = raw[name].0.saturating_sub(preempted);
        let taken = measured.saturating_sub(total) as f64 / measured.max(1) as f64;
        assert!(
            (share - taken).abs() <= 0.0006,
            "{name}: share {share}, taken {taken}"
        );
        marked.insert(name.clone(), share > 0.5);
    }
    assert!(
        marked.contains_key("tiny") && marked.contains_key("work"),
        "{marked:?}"
    );

    let summary = recording.report(&[]);
    for (name, &mark) in &marked {
        let row = summary
            .lines()
            .find(|line| line.ends_with(&format!(" {name}")));
        let row = row.unwrap_or_else(|| panic!("no {name}: {summary}"));
        // `~` may follow `*`: a few long calls (preempted) carry the function.
        let starred = [format!("  * {name}"), format!("  * ~ {name}")];
        assert_eq!(starred.iter().any(|end| row.ends_with(end)), mark, "{row}");
    }
    let count = marked.values().filter(|&&mark| mark).count();
    let note = match count {
        0 => None,
        1 => Some("note: * marks 1 function whose times".to_owned()),
        n => Some(format!("note: * marks {n} functions whose times")),
    };
    match note {
        Some(note) => assert!(summary.contains(&note), "{note}: {summary}"),
        None => assert!(!summary.contains("note: * marks"), "{summary}"),
    }
    let raw_summary = recording.report(&["--raw-times"]);
    assert!(!raw_summary.contains("* "), "{raw_summary}");
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

/// The "Min self" of `function` in a `--avg-self` summary, in ns; a bound (`<90 ns`) as the
/// number it bounds.
fn min_self_ns(summary: &str, function: &str) -> f64 {
    let row = summary_row(summary, function);
    // total (2) | % | self (2) | calls | avg self (2) | min self (2) | max self (2) | name
    let value: f64 = row[8].trim_start_matches('<').parse().unwrap();
    let unit = match row[9] {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        other => panic!("unknown unit {other} in {summary}"),
    };
    value * unit
}

/// A calibration made on a busy machine (forced here: every other calibration call takes 50 µs
/// longer) is said in one warning, and bounds it makes of tiny calls are clamped to what was
/// measured around them: none in the summary, with percentiles, or in the call tree is above the
/// run, and no share above 100%.
#[test]
fn a_noisy_calibration_is_said_and_gives_no_bound_above_the_run() {
    if !bpf_available("a_noisy_calibration_is_said_and_gives_no_bound_above_the_run") {
        return;
    }
    let sort = compile("sort.c", "sort", &[]);
    let recording = record_with_env(
        &sort,
        &["500"],
        &[],
        &[("UTRACE_CALIBRATION_NOISE_NS", "50000")],
    );
    assert_success(&recording.output);
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    let noisy = "the probe costs were measured on a busy machine";
    assert_eq!(stderr.matches(noisy).count(), 1, "{stderr}");
    assert!(stderr.contains("or read --raw-times"), "{stderr}");
    assert!(recording.info().contains(noisy));

    let summary = recording.report(&["--percentiles"]);
    // "  Total % is of 46.167 ms: ..."
    let header: Vec<&str> = summary.lines().next().unwrap().split_whitespace().collect();
    let run_ns = nanoseconds(header[4], header[5].trim_end_matches(':'));
    let bounds = bounds_in(&summary);
    assert!(
        bounds.len() > 10,
        "a busy calibration makes bounds: {summary}"
    );
    assert!(
        bounds.iter().all(|&ns| ns <= run_ns),
        "run {run_ns} ns: {summary}"
    );
    for share in summary.split_whitespace().filter(|w| w.ends_with('%')) {
        let share: f64 = share.trim_matches(['<', '%']).parse().unwrap_or(0.0);
        assert!(share <= 100.0, "{summary}");
    }
    let tree = recording.report(&["--format=replay"]);
    assert!(bounds_in(&tree).iter().all(|&ns| ns <= run_ns), "{tree}");
}

/// Every bound (`<22.059 ms`, `<733 us`) in a report, in ns.
fn bounds_in(report: &str) -> Vec<u64> {
    let words: Vec<&str> = report.split_whitespace().collect();
    words
        .windows(2)
        .filter_map(|pair| {
            let number = pair[0].strip_prefix('<')?;
            ["ns", "us", "ms", "s"]
                .contains(&pair[1])
                .then(|| nanoseconds(number, pair[1]))
        })
        .collect()
}

/// `number` of `unit` (ns, us, ms, s) in ns.
fn nanoseconds(number: &str, unit: &str) -> u64 {
    let scale = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        other => panic!("not a unit: {other}"),
    };
    (number.parse::<f64>().unwrap() * scale) as u64
}
