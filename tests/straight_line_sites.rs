//! End to end: functions whose first instructions the kernel single-steps (`test %rsi,%rsi`,
//! `mov 0x8(%rdi),%rax`) probed instead on the first one it emulates (the `je` after), past
//! straight-line instructions that write no memory (`test/straight.c`): the same counts as at
//! the entry, and the same arguments; a call whose first load faults is not counted there.

mod common;

use std::collections::BTreeMap;

use common::*;

/// What `record -d` says of the probe sites of the program: how many are past straight-line
/// instructions.
fn after_straight_line(stderr: &str) -> usize {
    let line = stderr
        .lines()
        .find(|line| line.starts_with("utrace: probe sites in ") && line.contains("/straight:"))
        .unwrap_or_else(|| panic!("record -d says nothing of the probe sites: {stderr}"));
    let (before, _) = line
        .split_once(" after straight-line instructions")
        .unwrap_or_else(|| panic!("{line}"));
    let count = before.rsplit(' ').next().unwrap();
    count.parse().unwrap_or_else(|_| panic!("{line}"))
}

/// The "faulted <count> <name>" lines of the program: calls whose first load faulted.
fn faulted_calls(stdout: &[u8]) -> BTreeMap<String, u64> {
    (String::from_utf8_lossy(stdout).lines())
        .filter_map(|line| line.strip_prefix("faulted "))
        .map(|rest| {
            let (count, name) = rest.split_once(' ').expect("faulted <count> <name>");
            (name.to_string(), count.parse().expect("a count"))
        })
        .collect()
}

#[test]
fn sites_past_straight_line_instructions_count_as_the_entry() {
    if !bpf_available("sites_past_straight_line_instructions_count_as_the_entry") {
        return;
    }
    let program = compile("straight.c", "straight", &[]);
    for (flags, moved) in [(&["-d"][..], true), (&["-d", "--probe-at-entry"], false)] {
        let recording = record_unchanged(&program, &["3000"], flags);
        let mut own = own_counts(&recording.output.stdout);
        assert_eq!(own["or_default"], 3000);
        let faulted = faulted_calls(&recording.output.stdout);
        assert_eq!(faulted["type_flags"], 300);
        // A call whose first load faults (and whose SIGSEGV handler jumps out) never reaches a
        // site past that load: not counted, and nothing left unpaired. At the entry it is a
        // call that never returned.
        if !moved {
            for (name, faults) in faulted {
                *own.entry(name).or_default() += faults;
            }
        }
        assert_counts_match(&own, &recording.traced_counts());
        let stderr = String::from_utf8_lossy(&recording.output.stderr);
        // or_default, clamp, type_flags and current_flags moved to their branch, or the counts
        // prove nothing new.
        match moved {
            true => assert!(after_straight_line(&stderr) >= 4, "{stderr}"),
            false => assert_eq!(after_straight_line(&stderr), 0, "{stderr}"),
        }
    }
}

#[test]
fn arguments_read_past_straight_line_instructions_are_the_entrys() {
    if !bpf_available("arguments_read_past_straight_line_instructions_are_the_entrys") {
        return;
    }
    let program = compile("straight.c", "straight", &[]);
    let specs = [
        "-A",
        "or_default@arg1",
        "-R",
        "or_default@retval",
        "-A",
        "clamp@arg1",
        "-R",
        "clamp@retval",
        "-f",
        "or_default,clamp",
    ];
    for exits in [None, Some("--exit-probes=ret")] {
        let mut flags = specs.to_vec();
        flags.extend(exits);
        let recording = record_unchanged(&program, &["12"], &flags);
        let stderr = String::from_utf8_lossy(&recording.output.stderr);
        assert!(!stderr.contains("are not captured"), "{stderr}");
        let expected: Vec<String> = String::from_utf8_lossy(&recording.output.stdout)
            .lines()
            .filter_map(|line| line.strip_prefix("  "))
            .map(str::to_owned)
            .collect();
        assert_eq!(expected.len(), 24);
        let replay = recording.report(&["--format=replay"]);
        let shown: Vec<String> = replay
            .lines()
            .filter_map(|line| line.split_once(" | ").map(|(_, call)| call.trim_start()))
            .filter(|call| call.starts_with("or_default(") || call.starts_with("clamp("))
            .map(str::to_owned)
            .collect();
        assert_eq!(shown, expected, "{exits:?}; the tree:\n{replay}");
    }
}

#[test]
fn a_site_is_not_moved_past_an_instruction_another_function_jumps_to() {
    if !bpf_available("a_site_is_not_moved_past_an_instruction_another_function_jumps_to") {
        return;
    }
    let program = compile("jumped_into.c", "jumped_into", &[]);
    let recording = record_unchanged(&program, &["500"], &["-d"]);
    let own = own_counts(&recording.output.stdout);
    assert_eq!(own["skipped_into"], 500);
    // Moved to its `nop`, skipped_into's probe would count jumper's 1000 calls as its own.
    assert_counts_match(&own, &recording.traced_counts());
}
