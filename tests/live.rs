//! End to end: `utrace live` prints the call tree while the program runs, the same tree that
//! `report --format=replay` prints from a recording; filters given at record time.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

/// The duration column blanked: the tree's shape and names are what must match.
fn mask_durations(tree: &str) -> String {
    tree.lines()
        .map(|line| match line.char_indices().nth(10) {
            Some((at, _)) => format!("{:10}{}", "", &line[at..]),
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

fn expected(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/live")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn live_and_replay_print_the_expected_tree() {
    if !bpf_available("live_and_replay_print_the_expected_tree") {
        return;
    }
    let sort = compile("sort.c", "sort", &[]);
    let (output, live) = live_to_file(&[], &sort, &["4"]);
    // The program's own output is untouched by the tree.
    assert_eq!(output.stdout, run_untraced(&sort, &["4"]).stdout);
    assert_eq!(mask_durations(&live), expected("sort4.tree"));

    let recording = record(&sort, &["4"], &[]);
    let replay = recording.report(&["--format=replay"]);
    assert_eq!(mask_durations(&replay), expected("sort4.tree"));
}

#[test]
fn live_lines_appear_while_the_program_runs() {
    if !bpf_available("live_lines_appear_while_the_program_runs") {
        return;
    }
    let program = compile("loop.c", "loop", &[]);
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("live.txt");
    let mut live = utrace()
        .args(["live", "-o"])
        .arg(&tree)
        .arg("--")
        .arg(&program)
        .arg("3")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The program calls tick() all the time: lines must show up long before it ends.
    let started = Instant::now();
    let mut seen = false;
    while started.elapsed() < Duration::from_millis(1500) && !seen {
        std::thread::sleep(Duration::from_millis(100));
        seen = std::fs::read_to_string(&tree).is_ok_and(|t| t.contains("tick();"));
    }
    assert!(seen, "no line within 1.5 s");
    assert!(
        live.try_wait().unwrap().is_none(),
        "the program should still run"
    );
    assert!(live.wait().unwrap().success());
}

#[test]
fn live_shows_thread_ids_once_there_are_threads() {
    if !bpf_available("live_shows_thread_ids_once_there_are_threads") {
        return;
    }
    let calls = compile("calls.c", "calls", &[]);
    let (_, live) = live_to_file(&["--max-depth", "1"], &calls, &[]);
    // The first thread's lines come before the column exists; then a new header brings it.
    assert!(live
        .lines()
        .next()
        .unwrap()
        .starts_with("# DURATION   FUNCTION"));
    let workers: std::collections::BTreeSet<&str> = live
        .lines()
        // A worker runs long enough that live mode may print it as an open block rather than
        // hold its line back: either form counts.
        .filter(|l| l.ends_with("| worker();") || l.ends_with("| worker() {"))
        .map(|l| l[10..].split(']').next().unwrap())
        .collect();
    assert_eq!(
        workers.len(),
        4,
        "four worker threads, each with its id:\n{live}"
    );
    assert!(live.contains("TID"), "{live}");
}

#[test]
fn filters_at_record_time_keep_only_what_they_show() {
    if !bpf_available("filters_at_record_time_keep_only_what_they_show") {
        return;
    }
    let calls = compile("calls.c", "calls", &[]);
    // Only fib is probed: every call of it, and nothing else.
    let recording = record(&calls, &[], &["-f", "fib"]);
    let json = recording.json();
    assert_eq!(
        counts_of(&json).into_iter().collect::<Vec<_>>(),
        [("fib".to_string(), 23573)]
    );
    assert_eq!(
        json["events"],
        2 * 23573 + preemption_events(&recording.data())
    );

    // Depth 1: main and the four thread roots; everything below counts in their self time.
    let recording = record(&calls, &[], &["--max-depth", "1"]);
    let json = recording.json();
    let counts = counts_of(&json);
    assert_eq!(counts.get("main"), Some(&1));
    assert_eq!(counts.get("worker"), Some(&4));
    assert_eq!(counts.get("fib"), None);
    for f in json["functions"].as_array().unwrap() {
        assert_eq!(
            f["self_ns"], f["total_ns"],
            "{}: nothing below depth 1",
            f["name"]
        );
    }

    // A time filter hides the short calls: op_add takes microseconds, main (21,891 traced fib
    // calls, then the threads) far longer. 20 ms, not less: on a loaded 2-vCPU CI machine a
    // preempted op_add once lasted over 1 ms.
    let recording = record(&calls, &[], &["--time-filter", "20ms"]);
    let counts = recording.traced_counts();
    assert_eq!(counts.get("main"), Some(&1));
    assert_eq!(counts.get("op_add"), None);
}

#[test]
fn flat_and_timestamp_output() {
    if !bpf_available("flat_and_timestamp_output") {
        return;
    }
    let sort = compile("sort.c", "sort", &[]);
    let live = |flags: &[&str]| {
        let output = utrace()
            .arg("live")
            .args(flags)
            .arg("--")
            .arg(&sort)
            .arg("4")
            .output()
            .unwrap();
        assert_success(&output);
        String::from_utf8(output.stderr).unwrap()
    };
    // One line per event: as many entries as exits of the tree's calls, in time order.
    let flat = live(&["--flat"]);
    let tree_calls = expected("sort4.tree")
        .lines()
        .filter(|l| l.ends_with(");") || l.contains("} /* "))
        .count();
    let events: Vec<&str> = flat
        .lines()
        .filter(|l| l.contains("==> ") || l.contains("<== "))
        .collect();
    assert_eq!(
        events.iter().filter(|l| l.contains("==> ")).count(),
        tree_calls
    );
    assert_eq!(
        events.iter().filter(|l| l.contains("<== ")).count(),
        tree_calls
    );
    let times: Vec<f64> = events
        .iter()
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{flat}");

    // --timestamp adds a column and leaves the tree as it was.
    let stamped = live(&["--timestamp"]);
    let unstamped: String = stamped
        .lines()
        .skip_while(|l| !l.starts_with("# DURATION"))
        .map(|l| match l.char_indices().nth(31) {
            Some((at, _)) if !l.starts_with('#') => format!("{:10}{}\n", "", &l[at..]),
            _ => format!("{:10}   FUNCTION\n", ""),
        })
        .collect();
    assert_eq!(unstamped, expected("sort4.tree"));
}

#[test]
fn cpu_ids_are_shown_live_and_in_replay() {
    if !bpf_available("cpu_ids_are_shown_live_and_in_replay") {
        return;
    }
    let sort = compile("sort.c", "sort", &[]);
    let cpus = std::thread::available_parallelism().unwrap().get() as u32;
    let check = |tree: &str| {
        assert!(tree.lines().next().unwrap().contains("CPU"), "{tree}");
        for line in tree.lines().skip(1) {
            let cpu: u32 = line[10..]
                .split('|')
                .next()
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert!(cpu < cpus, "CPU {cpu} on a machine with {cpus}: {line}");
        }
        // The column comes before the tree, which is unchanged.
        let without: String = tree
            .lines()
            .skip(1)
            .map(|l| format!("{:10}{}\n", "", &l[l.find(" |").unwrap()..]))
            .collect();
        assert_eq!(
            without,
            expected("sort4.tree")
                .lines()
                .skip(1)
                .map(|l| format!("{l}\n"))
                .collect::<String>()
        );
    };
    let (_, live) = live_to_file(&["--cpuid"], &sort, &["4"]);
    check(&live);
    let recording = record(&sort, &["4"], &[]);
    check(&recording.report(&["--format=replay", "--cpuid"]));
}

#[test]
fn a_thread_filter_at_record_time_keeps_that_thread_only() {
    if !bpf_available("a_thread_filter_at_record_time_keeps_that_thread_only") {
        return;
    }
    // server.c calls tick() on its main thread (tid = pid) and work() on another.
    let server = Running::start(&compile("server.c", "server", &[]));
    let pid = server.pid().to_string();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("utrace.data");
    let output = utrace()
        .args([
            "record",
            "-p",
            &pid,
            "--tid-filter",
            &pid,
            "--duration",
            "500ms",
            "-o",
        ])
        .arg(&data)
        .output()
        .unwrap();
    server.stop();
    assert_success(&output);
    let json = report_json(&data);
    assert!(calls_of(&json, "tick") > 10, "{json}");
    assert_eq!(calls_of(&json, "work"), 0, "{json}");
}

/// Where the ring buffer overflowed, the live tree says how many events were lost, and the
/// marks add up to the loss utrace reports at the end.
#[test]
fn live_marks_where_events_were_lost() {
    if !bpf_available("live_marks_where_events_were_lost") {
        return;
    }
    let program = compile("loop.c", "loop", &[]);
    let (output, tree) = live_to_file(&["--buffer-size", "4096"], &program, &["1"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let reported: u64 = stderr
        .split("utrace: warning: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no loss reported: {stderr}"));
    let marked: u64 = tree
        .lines()
        .filter_map(|line| line.strip_prefix("# note: "))
        .filter_map(|note| note.strip_suffix(" events lost here (the ring buffer was full): calls around this point are missing; a larger --buffer-size helps"))
        .map(|count| count.parse::<u64>().unwrap())
        .sum();
    assert!(reported > 0);
    assert_eq!(marked, reported, "{stderr}");
}

#[test]
fn live_refuses_stack_in_one_line() {
    // Unwound stacks are symbolized when a recording ends: live has nowhere to show them, and
    // says so rather than ignore the flag.
    let output = utrace()
        .args(["live", "--stack", "target", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--stack"), "{stderr}");
}
