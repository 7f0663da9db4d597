//! End to end: `record --budget` keeps a program within a slowdown by detaching the functions
//! whose probes cost the most (`test/budget.c`: a hot tiny leaf under slower callers), never
//! losing or doubling a call of the functions it keeps while their probes are replaced.

mod common;

use common::*;

/// Held by each test that weighs a traced program's speed: two at once slow each other down,
/// and the probe costs the recorder measures at its start with them.
static WEIGHING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The program's rounds in its last second: how fast it ran once the budget had taken effect.
fn last_second_rate(stdout: &[u8]) -> u64 {
    let stdout = String::from_utf8_lossy(stdout);
    (stdout.lines())
        .find_map(|line| line.strip_prefix("rate "))
        .and_then(|rate| rate.parse().ok())
        .unwrap_or_else(|| panic!("no rate line in {stdout}"))
}

/// Whether the summary shows `function`, and whether it marks it detached.
fn summary_shows(summary: &str, function: &str) -> Option<bool> {
    summary.lines().find_map(|line| {
        // The name is the last column: "* step [detached] (1 of unknown time)".
        let name = line.rsplit("  ").next()?.trim_start_matches("* ");
        let name = name.split(" (").next()?;
        match name.strip_suffix(" [detached]") {
            Some(name) => (name == function).then_some(true),
            None => (name == function).then_some(false),
        }
    })
}

#[test]
fn a_hot_leaf_is_detached_to_keep_the_program_within_its_budget() {
    if !bpf_available("a_hot_leaf_is_detached_to_keep_the_program_within_its_budget") {
        return;
    }
    let _alone = WEIGHING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let program = compile("budget.c", "budget", &[]);
    if kernel_lacks("uprobe sessions") {
        let refused = record(&program, &["1"], &["--budget", "2x"]).output;
        assert!(!refused.status.success());
        // The kernel's fallbacks may be said before, in lines of their own.
        let stderr = String::from_utf8_lossy(&refused.stderr);
        let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
        let refusal = "utrace: error: --budget needs uprobe sessions (Linux 6.13) on uprobe_multi \
                       links, which this kernel lacks";
        assert_eq!(errors, [refusal], "{stderr}");
        // Refused before the program ran: it prints its counts when it ends.
        assert!(refused.stdout.is_empty(), "{stderr}");
        return;
    }
    let untraced = run_untraced(&program, &["3"]);
    let recording = record(&program, &["3"], &["--budget", "2x"]);
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert!(recording.output.status.success(), "{stderr}");
    assert!(stderr.contains("0 lost"), "{stderr}");
    assert!(stderr.contains("--budget: detached"), "{stderr}");

    let own = own_counts(&recording.output.stdout);
    let json = recording.json();
    let traced = counts_of(&json);
    // json says when, and how hot it was then.
    let tiny = (json["functions"].as_array().unwrap().iter())
        .find(|f| f["name"] == "tiny")
        .unwrap();
    assert!(tiny["detached"]["after_ns"].as_u64().unwrap() > 0, "{tiny}");
    assert!(
        tiny["detached"]["calls_per_s"].as_u64().unwrap() > 0,
        "{tiny}"
    );
    let summary = recording.report(&[]);
    let detached = |name: &str| {
        summary_shows(&summary, name).unwrap_or_else(|| panic!("no {name}: {summary}"))
    };
    // The leaf goes first, counted up to then: it ran before the first step weighed it.
    assert!(detached("tiny"), "{summary}");
    assert!(
        traced["tiny"] > 0 && traced["tiny"] < own["tiny"],
        "{traced:?} {own:?}"
    );
    assert!(summary.contains("note: [detached] marks functions whose probes --budget took off"));
    // Every function kept is counted exactly, though its probes were replaced while it ran
    // (round_of_steps and step run through each replacement); one detached, up to then.
    for name in ["main", "round_of_steps", "step"] {
        match detached(name) {
            true => assert!(traced[name] <= own[name], "{name}: {traced:?} {own:?}"),
            false => assert_eq!(traced[name], own[name], "{name}: {traced:?} {own:?}"),
        }
    }
    assert!(
        !detached("main") && !detached("round_of_steps"),
        "{summary}"
    );

    // Within 2x of untraced once the budget took effect, with a margin for a busy machine. The
    // emulated guest's speed varies too much from one second to the next for a bound: there the
    // counts above are what is checked.
    if !in_emulated_guest() {
        let (rate, untraced_rate) = (
            last_second_rate(&recording.output.stdout),
            last_second_rate(&untraced.stdout),
        );
        assert!(
            rate as f64 >= 0.4 * untraced_rate as f64,
            "{rate} rounds/s traced against {untraced_rate} untraced: {stderr}"
        );
    }
}

#[test]
fn a_running_process_that_tracing_slows_down_much_gets_a_suggestion() {
    if !bpf_available("a_running_process_that_tracing_slows_down_much_gets_a_suggestion") {
        return;
    }
    let _alone = WEIGHING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let program = compile("budget.c", "budget", &[]);
    let mut running = std::process::Command::new(&program)
        .arg("5")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let output = utrace()
        .args(["record", "--duration", "2", "-o"])
        .arg(data.path().join("utrace.data"))
        .args(["-p", &running.id().to_string()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let suggestions: Vec<&str> = (stderr.lines())
        .filter(|line| line.contains("--budget 2x keeps it near its speed"))
        .collect();
    assert_eq!(suggestions.len(), 1, "{stderr}");
    assert!(
        suggestions[0]
            .starts_with("utrace: tracing this process costs it over 3x (its probes take ~"),
        "{stderr}"
    );
    // It ran on, and ends as it would have.
    assert!(running.wait().unwrap().success());
}

#[test]
fn a_budget_that_is_no_slowdown_is_refused_in_one_line() {
    for (budget, said) in [
        ("0", "is not a slowdown like 2x"),
        ("abc", "is not a slowdown like 2x"),
        ("1x", "leaves the probes no time"),
        ("0%", "leaves the probes no time"),
    ] {
        let output = utrace()
            .args(["record", "--budget", budget, "-c", "true"])
            .output()
            .unwrap();
        assert_clear_failure(&output, &[said, budget]);
    }
}
