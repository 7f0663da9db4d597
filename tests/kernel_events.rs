//! End to end: events beside the user functions (`-E`): off-CPU time as calls of
//! `linux:schedule`, system calls as calls of `sys_NAME` with their return values, USDT probes
//! as comment lines with their arguments; each nested under the user call where it happened.

mod common;

use std::collections::BTreeMap;

use common::*;

/// Per folded stack (`main;sleep_all;nanosleep@plt;linux:schedule`), its weight: self time in ns,
/// or calls.
fn folded(recording: &Recording, weight: &str) -> BTreeMap<String, u64> {
    let report = recording.report(&["--format=flame-graph", &format!("--weight={weight}")]);
    report
        .lines()
        .map(|line| {
            let (stack, weight) = line.rsplit_once(' ').expect("a folded stack line");
            (stack.to_owned(), weight.parse().expect("a weight"))
        })
        .collect()
}

/// The summed weight of the stacks that pass through `caller` and end in `function`.
fn under(stacks: &BTreeMap<String, u64>, caller: &str, function: &str) -> u64 {
    stacks
        .iter()
        .filter(|(stack, _)| {
            let frames: Vec<&str> = stack.split(';').collect();
            frames.last() == Some(&function) && frames.contains(&caller)
        })
        .map(|(_, weight)| weight)
        .sum()
}

#[test]
fn off_cpu_time_is_a_call_of_linux_schedule_where_the_thread_slept() {
    if !bpf_available("off_cpu_time_is_a_call_of_linux_schedule_where_the_thread_slept") {
        return;
    }
    let sleeper = compile("sleeper.c", "sleeper", &[]);
    const SLEEPS: u64 = 50;
    let recording = record_unchanged(&sleeper, &[&SLEEPS.to_string(), "3"], &["-E", "offcpu"]);
    let calls = folded(&recording, "calls");
    let times = folded(&recording, "time");
    let naps = under(&calls, "sleep_all", "linux:schedule");
    assert!(
        naps >= SLEEPS,
        "{naps} off-CPU intervals in sleep_all: {calls:?}"
    );
    let slept = under(&times, "sleep_all", "linux:schedule") as f64;
    let asked = (SLEEPS * 2_000_000) as f64;
    assert!(
        (slept - asked).abs() <= 0.2 * asked,
        "{slept} ns off the CPU in sleep_all, for {asked} ns of sleeps"
    );
    // The pseudo-function is the kernel's, and the summary counts it.
    let json = recording.json();
    assert_eq!(
        module_of(&json, "linux:schedule").as_deref(),
        Some("[kernel]")
    );
    // The tracepoint's short and long names are one thing.
    let long = record(
        &sleeper,
        &["2", "1"],
        &["-E", "tracepoint:sched:sched_switch"],
    );
    assert!(calls_of(&long.json(), "linux:schedule") >= 2);
}
