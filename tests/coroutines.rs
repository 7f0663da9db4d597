//! End to end: a program that switches stacks (test/coroutines.c: getcontext, makecontext,
//! swapcontext) runs as untraced under every `--exit-probes` policy, and its call tree follows
//! each switch: the calls of the context switched to nest under the swapcontext that switched to
//! it, and the frames a context leaves are closed with unknown time, never those of the context
//! it switches to.

mod common;

use common::*;

/// The call tree of test/coroutines.c, 2 rounds, from the scheduler's first swapcontext to its
/// end, without durations: ping starts on its own stack under the swapcontext that switched to
/// it, and so does pong under ping's; pong's swapcontext returns on ping's stack, into ping's
/// call, and pong's calls are left there, with unknown time; resumed, pong goes on under ping's
/// next swapcontext (its pass_to's return is not paired again); ping returns on its own stack,
/// and its uc_link resumes the scheduler, as pong's does.
const EXPECTED_TREE: &str = include_str!("data/coroutines.tree.txt");

/// Every `--exit-probes` policy, and the default.
const POLICIES: [&[&str]; 3] = [&[], &["--exit-probes=uretprobe"], &["--exit-probes=ret"]];

/// The call tree of a replay report from `first` (a line's function part, as written) up to and
/// including `last`, with the durations column left out.
fn tree_between(tree: &str, first: &str, last: &str) -> Vec<String> {
    let calls: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_once('|').map(|(_, call)| call))
        .collect();
    let start = calls.iter().position(|call| *call == first);
    let start = start.unwrap_or_else(|| panic!("no `{first}` in\n{tree}"));
    let end = start
        + calls[start..]
            .iter()
            .position(|call| *call == last)
            .unwrap();
    calls[start..=end]
        .iter()
        .map(|call| call.to_string())
        .collect()
}

#[test]
fn coroutines_run_as_untraced_and_their_tree_follows_each_switch() {
    if !bpf_available("coroutines_run_as_untraced_and_their_tree_follows_each_switch") {
        return;
    }
    let program = compile("coroutines.c", "coroutines", &[]);
    for policy in POLICIES {
        let recording = record_unchanged(&program, &["2"], policy);
        let stdout = String::from_utf8_lossy(&recording.output.stdout);
        assert!(stdout.starts_with("order PpPp\n"), "{stdout}");
        let own = own_counts(&recording.output.stdout);
        assert_counts_match(&own, &recording.traced_counts());
        let stderr = String::from_utf8_lossy(&recording.output.stderr);
        assert!(
            stderr.contains("the program switches stacks (swapcontext)"),
            "{policy:?}: {stderr}"
        );
        let tree = recording.report(&["--format=replay"]);
        let expected: Vec<&str> = EXPECTED_TREE.lines().collect();
        assert_eq!(
            tree_between(&tree, expected[0], expected[expected.len() - 1]),
            expected,
            "{policy:?}:\n{tree}"
        );
        assert!(tree.contains("| main() {\n"), "{policy:?}:\n{tree}");
        assert!(tree.contains("| } /* main */\n"), "{policy:?}:\n{tree}");
    }
}

#[test]
fn coroutines_ping_ponging_many_times_count_exactly() {
    if !bpf_available("coroutines_ping_ponging_many_times_count_exactly") {
        return;
    }
    let program = compile("coroutines.c", "coroutines", &[]);
    let rounds = 500;
    for policy in POLICIES {
        let recording = record_unchanged(&program, &[&rounds.to_string()], policy);
        let own = own_counts(&recording.output.stdout);
        assert_eq!(own.get("swapcontext@plt"), Some(&(2 * rounds + 2)));
        assert_counts_match(&own, &recording.traced_counts());
        // Only pong's calls are left on a switch (pong's every pass_to and its swapcontext, and
        // pong itself the first time); every call of the scheduler and of ping is timed.
        let json = recording.json();
        for (name, unknown) in [
            ("pass_to", rounds),
            ("swapcontext@plt", rounds),
            ("pong", 1),
            ("ping", 0),
            ("work", 0),
            ("leaf", 0),
            ("schedule", 0),
            ("main", 0),
        ] {
            assert_eq!(unknown_time_of(&json, name), unknown, "{policy:?} {name}");
        }
    }
}

/// A program that may switch stacks gets no uretprobe, so a function is timed only where every
/// exit is found on its instructions (test/jumps.c): a switch's jump through its table stays in
/// the function, and a tail call through a pointer is the caller's exit, its callee a sibling.
/// Before both were told apart, `classify` and `apply` were counted with unknown times.
#[test]
fn switches_and_tail_calls_through_pointers_are_timed_without_uretprobes() {
    if !bpf_available("switches_and_tail_calls_through_pointers_are_timed_without_uretprobes") {
        return;
    }
    let program = compile("jumps.c", "jumps", &["-foptimize-sibling-calls"]);
    let recording = record_unchanged(&program, &["1000"], &[]);
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert!(
        stderr.contains("the program switches stacks (swapcontext)"),
        "{stderr}"
    );
    let own = own_counts(&recording.output.stdout);
    assert_eq!(own.get("classify"), Some(&1000));
    assert_counts_match(&own, &recording.traced_counts());
    let json = recording.json();
    for name in ["classify", "apply", "twice", "thrice", "main"] {
        assert_eq!(unknown_time_of(&json, name), 0, "{name}");
    }
    let tree = recording.report(&["--format=replay"]);
    let calls: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_once('|').map(|(_, call)| call))
        .collect();
    let first = calls.iter().position(|call| *call == "   classify();");
    let first = first.unwrap_or_else(|| panic!("no classify() in\n{tree}"));
    assert_eq!(
        calls[first..first + 6],
        [
            "   classify();",
            "   apply();",
            "   twice();",
            "   classify();",
            "   apply();",
            "   thrice();"
        ],
        "{tree}"
    );
}
