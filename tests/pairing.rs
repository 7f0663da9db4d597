//! End to end: exits are paired with their entries by the return-address slot the events carry,
//! which keeps the replay exact when returns are never seen (longjmp, recursion deeper than the
//! kernel's 64 nested uretprobes, lost events).

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::*;
use utrace::data::DataReader;
use utrace::replay::{FinishedCall, Replayer};

/// Pairs the events of a well-nested trace by function id, thread by thread, and returns how many
/// exits there were and the pairs whose entry and exit carry different stack slots.
fn slot_mismatches(data: &Path) -> (u64, Vec<String>) {
    let mut reader = DataReader::open(data).unwrap();
    let names: Vec<String> = reader
        .functions()
        .functions
        .iter()
        .map(|f| f.name.clone())
        .collect();
    let mut stacks: HashMap<u32, Vec<(u32, u32)>> = HashMap::new();
    let (mut exits, mut mismatches) = (0, Vec::new());
    while let Some(events) = reader.next_events().unwrap() {
        for event in events {
            // The time preempted is no call, and has no slot.
            if names[event.function_id() as usize] == utrace::table::PREEMPTION_FUNCTION {
                continue;
            }
            assert_ne!(event.stack, 0, "an event without its stack slot");
            let stack = stacks.entry(event.tid()).or_default();
            if !event.is_exit() {
                stack.push((event.function_id(), event.stack));
                continue;
            }
            exits += 1;
            // Under --exit-probes=ret a PLT call whose return site is also its caller's exit
            // has no exit of its own: skip such frames.
            let (function, slot) = loop {
                let (function, slot) = stack.pop().expect("an exit without an entry");
                if function == event.function_id() {
                    break (function, slot);
                }
            };
            if slot != event.stack {
                mismatches.push(format!(
                    "{}: entry {slot:#x}, exit {:#x}",
                    names[function as usize], event.stack
                ));
            }
        }
    }
    (exits, mismatches)
}

#[test]
fn entries_and_exits_carry_the_same_stack_slot() {
    if !bpf_available("entries_and_exits_carry_the_same_stack_slot") {
        return;
    }
    let plain = compile("calls.c", "calls-slots", &[]);
    // Functions and PLT stubs that start with endbr64: their probes sit past it.
    let cet = compile(
        "calls.c",
        "calls-slots-cet",
        &["-fcf-protection=full", "-Wl,-z,ibtplt"],
    );
    for program in [&plain, &cet] {
        for exits in ["--exit-probes=uretprobe", "--exit-probes=ret"] {
            let recording = record_unchanged(program, &[], &[exits]);
            let (count, mismatches) = slot_mismatches(&recording.data());
            assert!(count > 20_000, "{exits}: only {count} exits");
            assert!(
                mismatches.is_empty(),
                "{} {exits}: {} of {count} exits differ from their entry's slot:\n{}",
                program.display(),
                mismatches.len(),
                mismatches[..mismatches.len().min(20)].join("\n")
            );
        }
    }
}

/// (function, start, duration) of every call, sorted.
type Timed = Vec<(u32, u64, u64)>;

/// The calls whose entry and exit are both in the trace, paired on their own here by thread and
/// stack slot (right for programs without tail calls: a slot is reused only once its call is
/// over), and the calls the replayer times: they must be the same.
fn timed_by_events_and_by_replay(data: &Path) -> (Timed, Timed) {
    let mut reader = DataReader::open(data).unwrap();
    let mut replayer = Replayer::new(reader.functions().functions.len());
    let mut by_replay = Vec::new();
    let mut sink = |call: &FinishedCall, _: &[u32]| {
        if call.complete {
            by_replay.push((call.function, call.start_ns, call.duration_ns));
        }
    };
    let mut open: HashMap<(u32, u32), (u32, u64)> = HashMap::new();
    let mut by_events = Vec::new();
    while let Some(events) = reader.next_events().unwrap() {
        for event in events {
            let key = (event.tid(), event.stack);
            if !event.is_exit() {
                open.insert(key, (event.function_id(), event.timestamp_ns));
            } else if let Some((function, start)) = open.remove(&key) {
                if function == event.function_id() {
                    by_events.push((function, start, event.timestamp_ns - start));
                }
            }
        }
        replayer.push_all(events, &mut sink);
    }
    replayer.finish(u64::MAX, &mut sink);
    by_events.sort_unstable();
    by_replay.sort_unstable();
    (by_events, by_replay)
}

/// Asserts that the replayer timed exactly the calls whose entry and exit the trace holds, with
/// their own times.
fn assert_timed_as_the_events_say(data: &Path, exits: &str) {
    let (by_events, by_replay) = timed_by_events_and_by_replay(data);
    assert!(!by_events.is_empty(), "{exits}: no call was timed");
    assert!(
        by_events == by_replay,
        "{exits}: the replayer's times differ"
    );
}

/// How many lines of a replay tree show a call of `name` starting, and how many end one with
/// unknown time.
fn replay_lines_of(tree: &str, name: &str) -> (usize, usize) {
    let (entered, leaf, unknown) = (
        format!("{name}() {{"),
        format!("{name}();"),
        format!("{name}: time unknown */"),
    );
    let calls = tree
        .lines()
        .filter(|line| line.ends_with(&entered) || line.contains(&leaf))
        .count();
    let unknown_time = tree
        .lines()
        .filter(|line| {
            line.ends_with(&unknown) || line.ends_with(&format!("{leaf} /* time unknown */"))
        })
        .count();
    (calls, unknown_time)
}

#[test]
fn recursion_deeper_than_the_uretprobe_limit_counts_every_call() {
    if !bpf_available("recursion_deeper_than_the_uretprobe_limit_counts_every_call") {
        return;
    }
    let program = compile("recurse.c", "recurse", &[]);
    // The kernel reports the returns of 64 nested uretprobes per thread: those of the outer 64
    // calls of descend (main's exit is probed on its instructions). Probes on `ret` see every
    // return.
    for (exits, timed_per_round, bottom_unknown) in [
        ("--exit-probes=uretprobe", 64, 2),
        ("--exit-probes=ret", 3001, 0),
    ] {
        let recording = record_unchanged(&program, &[], &[exits]);
        let own = own_counts(&recording.output.stdout);
        assert_eq!(own["descend"], 6002);
        let json = recording.json();
        assert_counts_match(&own, &counts_of(&json));
        assert_eq!(
            unknown_time_of(&json, "descend"),
            2 * (3001 - timed_per_round),
            "{exits}"
        );
        assert_eq!(unknown_time_of(&json, "bottom"), bottom_unknown, "{exits}");
        assert_eq!(unknown_time_of(&json, "main"), 0, "{exits}");
        assert_timed_as_the_events_say(&recording.data(), exits);
        let tree = recording.report(&["--format=replay"]);
        assert_eq!(
            replay_lines_of(&tree, "descend"),
            (6002, 2 * (3001 - timed_per_round) as usize),
            "{exits}"
        );
    }
}

#[test]
fn longjmp_across_traced_frames_closes_them_where_it_lands() {
    if !bpf_available("longjmp_across_traced_frames_closes_them_where_it_lands") {
        return;
    }
    let program = compile("longjmp.c", "longjmp", &[]);
    for exits in ["--exit-probes=uretprobe", "--exit-probes=ret"] {
        // Untraced and traced alike: 75 of 100 rounds jump (a uretprobe on setjmp would make
        // the jumps land on the kernel's trampoline).
        let recording = record_unchanged(&program, &["100"], &[exits]);
        let stdout = String::from_utf8_lossy(&recording.output.stdout);
        assert!(stdout.contains("75 of 100 rounds jumped"), "{stdout}");
        let own = own_counts(&recording.output.stdout);
        let json = recording.json();
        assert_counts_match(&own, &counts_of(&json));
        for (name, unknown) in [
            ("outer", 75),
            ("middle", 75),
            ("inner", 75),
            ("longjmp@plt", 50),
            ("siglongjmp@plt", 25),
            ("play", 0),
            ("after_round", 0),
            ("_setjmp@plt", 0),
            ("__sigsetjmp@plt", 0),
        ] {
            assert_eq!(unknown_time_of(&json, name), unknown, "{exits} {name}");
        }
        // Where each jump lands, the three frames it left end, and play goes on with its round.
        let tree = recording.report(&["--format=replay"]);
        let lines: Vec<&str> = tree.lines().collect();
        let landings = lines
            .windows(2)
            .filter(|pair| {
                pair[0].ends_with("|     } /* outer: time unknown */")
                    && pair[1].ends_with("|     after_round();")
            })
            .count();
        assert_eq!(landings, 75, "{exits}:\n{tree}");
        assert_eq!(replay_lines_of(&tree, "outer"), (100, 75));
        assert!(tree.contains("|   } /* play */\n"), "{tree}");
        assert_timed_as_the_events_say(&recording.data(), exits);
    }
}

#[test]
fn lost_events_are_counted_per_thread_and_the_report_stays_consistent() {
    if !bpf_available("lost_events_are_counted_per_thread_and_the_report_stays_consistent") {
        return;
    }
    let program = compile("calls.c", "calls-overload", &[]);
    let untraced = run_untraced(&program, &[]);
    // One page of ring buffer holds about 128 events: most of the 68,000 are lost.
    let recording = record(&program, &[], &["--buffer-size=4K"]);
    assert_eq!(recording.output.status.code(), untraced.status.code());
    assert_eq!(recording.output.stdout, untraced.stdout);
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    let lost: u64 = stderr
        .split(" lost,")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no lost count in: {stderr}"));
    assert!(lost > 0, "nothing was lost: {stderr}");

    // info: the total, then the threads that lost some, adding up to it.
    let info = recording.info();
    assert!(info.contains(&format!("lost events: {lost}\n")), "{info}");
    let per_thread: Vec<(u32, u64)> = info
        .lines()
        .filter_map(|line| line.strip_prefix("  thread "))
        .map(|rest| {
            let (tid, count) = rest.split_once(": ").unwrap();
            (tid.parse().unwrap(), count.parse().unwrap())
        })
        .collect();
    assert_eq!(
        per_thread.iter().map(|(_, n)| n).sum::<u64>(),
        lost,
        "{info}"
    );
    let summary = recording.report(&["--per-thread"]);
    let calling: Vec<&str> = summary
        .lines()
        .filter(|l| l.starts_with("Thread "))
        .collect();
    assert!(
        calling.iter().any(|line| line.ends_with(" lost)")),
        "no thread shows its losses:\n{summary}"
    );
    for (tid, count) in per_thread.iter().filter(|(tid, _)| {
        calling
            .iter()
            .any(|line| line.starts_with(&format!("Thread {tid} ")))
    }) {
        let events = if *count == 1 { "event" } else { "events" };
        assert!(
            summary.contains(&format!("Thread {tid} ({count} {events} lost)\n")),
            "{summary}"
        );
    }

    // What is left is consistent: no call longer than the recording, self within total, and
    // never more calls than the program made.
    let json = recording.json();
    let duration = json["duration_ns"].as_u64().unwrap();
    let own = own_counts(&recording.output.stdout);
    for function in json["functions"].as_array().unwrap() {
        let name = function["name"].as_str().unwrap();
        if let Some(&made) = own.get(name) {
            assert!(
                function["calls"].as_u64().unwrap() <= made,
                "{name}: {function}"
            );
        }
        // A function whose every call lost an event has no times: null, not 0.
        if function["unknown_time_calls"] == function["calls"] {
            assert!(function["total_ns"].is_null(), "{name}: {function}");
            assert!(function["max_ns"].is_null(), "{name}: {function}");
            continue;
        }
        let figure = |key: &str| function[key].as_u64().unwrap();
        assert!(figure("max_ns") <= duration, "{name}: {function}");
        assert!(figure("min_ns") <= figure("max_ns"), "{name}: {function}");
        assert!(
            figure("self_ns") <= figure("total_ns"),
            "{name}: {function}"
        );
        assert!(
            figure("unknown_time_calls") <= figure("calls"),
            "{name}: {function}"
        );
    }
}
