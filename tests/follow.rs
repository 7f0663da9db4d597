//! End to end: `--follow`, the processes the target forks and the programs they exec, each
//! counted exactly and labelled by its pid in the reports.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use common::*;

/// test/forkexec.c and the program its child execs (test/calls.c, under a name of its own).
fn forkexec_and_calls() -> (PathBuf, PathBuf) {
    (
        compile("forkexec.c", "forkexec", &[]),
        compile("calls.c", "calls-exec", &[]),
    )
}

/// The target's pid and the other process's, from a JSON report of two processes.
fn target_and_child(json: &serde_json::Value) -> (u64, u64) {
    let processes = counts_by_pid(json);
    let target = json["pid"].as_u64().unwrap();
    assert_eq!(processes.len(), 2, "expected two processes: {processes:?}");
    assert!(processes.contains_key(&target), "{processes:?}");
    let child = *processes.keys().find(|&&pid| pid != target).unwrap();
    (target, child)
}

#[test]
fn follow_traces_a_forked_child_that_execs_another_program() {
    if !bpf_available("follow_traces_a_forked_child_that_execs_another_program") {
        return;
    }
    let (forkexec, calls) = forkexec_and_calls();
    let calls_arg = calls.to_str().unwrap();
    let recording = record_unchanged(&forkexec, &[calls_arg], &["--follow"]);
    let json = recording.json();
    let (target, child, processes) = assert_forkexec_counts(&recording, &json);
    // Each process only what it ran: main's frame in the child was inherited, never entered.
    assert_eq!(processes[&target].get("child_work"), None);
    assert_eq!(processes[&target].get("fib"), None);
    assert_eq!(processes[&child].get("parent_work"), None);
    assert_eq!(module_in(&json, child, "fib"), "calls-exec");
    assert_eq!(module_in(&json, child, "child_work"), "forkexec");

    // The reports say which process each call ran in.
    let replay = recording.report(&["--format=replay"]);
    assert!(replay.starts_with("# DURATION    PID   TID"), "{replay}");
    let line_of = |name: &str| {
        replay
            .lines()
            .find(|line| line.contains(name))
            .unwrap_or_else(|| panic!("{name} not in the replay"))
            .to_string()
    };
    assert!(line_of("parent_work").contains(&format!(" {target} [")));
    assert!(line_of("child_work").contains(&format!(" {child} [")));
    assert!(line_of("worker_step").contains(&format!(" {child} [")));
    // The exec ends the calls it cut short: calls' main starts a new tree in the child.
    assert!(line_of("execv@plt").contains("/* no exit */"), "{replay}");
    let calls_main = replay
        .lines()
        .find(|line| line.contains(&format!(" {child} [")) && line.ends_with("| main() {"));
    assert!(calls_main.is_some(), "{replay}");

    // Weighed by calls: a stack whose corrected self time comes to 0 has no line by time (fib's,
    // on a slow run).
    let folded = recording.report(&["--format=flame-graph", "--weight", "calls"]);
    assert!(folded.lines().all(
        |line| line.starts_with(&format!("forkexec [pid {target}];"))
            || line.starts_with(&format!("forkexec [pid {child}];"))
            || line.starts_with(&format!("calls-exec [pid {child}];"))
    ));
    assert!(folded.contains(&format!("calls-exec [pid {child}];main;fib ")));
    assert!(folded.contains(&format!("forkexec [pid {child}];run_child;child_work ")));
    assert!(folded.contains(&format!("forkexec [pid {target}];main;parent_work ")));

    let processes_line = format!("processes:   2 ({target}, {child})");
    assert!(recording.info().contains(&processes_line));

    let per_thread = recording.report(&["--format=summary", "--per-thread"]);
    assert!(per_thread.contains(&format!("Thread {target} (pid {target})")));
    assert!(per_thread.contains(&format!("Thread {child} (pid {child})")));
}

/// The module of `name` in process `pid` of a JSON report.
fn module_in(json: &serde_json::Value, pid: u64, name: &str) -> String {
    json["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["pid"] == pid && f["name"] == name)
        .map(|f| f["module"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("{name} not traced in pid {pid}"))
}

#[test]
fn follow_traces_a_forked_child_running_the_same_program() {
    if !bpf_available("follow_traces_a_forked_child_running_the_same_program") {
        return;
    }
    let forkexec = compile("forkexec.c", "forkexec", &[]);
    let recording = record_unchanged(&forkexec, &[], &["--follow"]);
    let json = recording.json();
    let (_, child, processes) = parent_checked(&recording, &json);
    let child_counts = role_counts(&recording.output.stdout, "child");
    assert_counts_match(&child_counts, &processes[&child]);
    assert_eq!(processes[&child].get("parent_work"), None);
    assert_eq!(processes[&child].get("main"), None);
}

/// A C++ program a followed child execs: its exceptions unwind through traced frames, though the
/// shadow stack follows only the target (src/bpf/shadow.bpf.h).
#[test]
fn follow_keeps_the_exceptions_of_an_execed_program_alive() {
    if !bpf_available("follow_keeps_the_exceptions_of_an_execed_program_alive") {
        return;
    }
    let forkexec = compile("forkexec.c", "forkexec", &[]);
    let exceptions = compile("exceptions.cpp", "exceptions-execed", &[]);
    let recording = record_unchanged(&forkexec, &[exceptions.to_str().unwrap()], &["--follow"]);
    assert_forkexec_counts(&recording, &recording.json());
}

#[test]
fn without_follow_only_the_target_is_traced() {
    if !bpf_available("without_follow_only_the_target_is_traced") {
        return;
    }
    let (forkexec, calls) = forkexec_and_calls();
    let recording = record_unchanged(&forkexec, &[calls.to_str().unwrap()], &[]);
    let json = recording.json();
    // One process: the report is as it always was, without pids.
    assert!(json["functions"][0].get("pid").is_none(), "{json}");
    let traced = recording.traced_counts();
    assert_counts_match(&role_counts(&recording.output.stdout, "parent"), &traced);
    for name in ["run_child", "child_work", "fib", "worker_step"] {
        assert_eq!(traced.get(name), None, "{name} traced without --follow");
    }
    let replay = recording.report(&["--format=replay"]);
    assert!(replay.starts_with("# DURATION   FUNCTION"), "{replay}");
}

#[test]
fn follow_traces_the_children_of_an_attached_process() {
    if !bpf_available("follow_traces_the_children_of_an_attached_process") {
        return;
    }
    let (forkexec, calls) = forkexec_and_calls();
    let (mut program, lines) = start_waiting(
        Command::new(&forkexec)
            .arg(&calls)
            .env("FORKEXEC_WAIT", "1"),
    );
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("utrace.data");
    let recorder = AttachedRecorder::start(program.id(), &data, &["--follow"]);
    send_signal(program.id(), libc::SIGUSR1);

    let stdout: Vec<String> = lines.map(|line| line.unwrap()).collect();
    assert!(program.wait().unwrap().success());
    // The recording ends by itself once the process and its child have ended.
    recorder.finish();

    let stdout = stdout.join("\n");
    let json = report_json(&data);
    let (target, child) = target_and_child(&json);
    let processes = counts_by_pid(&json);
    let mut parent = role_counts(stdout.as_bytes(), "parent");
    // main was running when utrace attached: its exit has no entry.
    parent.remove("main");
    assert_counts_match(&parent, &processes[&target]);
    let mut child_counts = role_counts(stdout.as_bytes(), "child");
    child_counts.extend(own_counts(stdout.as_bytes()));
    assert_counts_match(&child_counts, &processes[&child]);
}

#[test]
fn live_follow_prints_each_process_under_its_pid() {
    if !bpf_available("live_follow_prints_each_process_under_its_pid") {
        return;
    }
    let (forkexec, calls) = forkexec_and_calls();
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("live.txt");
    let output = utrace()
        .args(["live", "--follow", "-o"])
        .arg(&tree)
        .arg("--")
        .arg(&forkexec)
        .arg(&calls)
        .output()
        .unwrap();
    assert_success(&output);
    assert_eq!(
        output.stdout,
        run_untraced(&forkexec, &[calls.to_str().unwrap()]).stdout
    );
    let tree = std::fs::read_to_string(&tree).unwrap();
    // The process id column comes on, under a new header, when the child first calls.
    let header = tree
        .lines()
        .position(|line| line.starts_with("# DURATION    PID   TID"))
        .unwrap_or_else(|| panic!("no PID column: {tree}"));
    let pid_of = |line: &str| line[10..].split_whitespace().next().unwrap().to_string();
    // The lines of the calls of `name`: `name();`, or `name() {` for a call held back too long.
    let lines_of = |name: &str| -> Vec<&str> {
        let (leaf, open) = (format!("{name}();"), format!("{name}() {{"));
        tree.lines()
            .filter(|line| {
                let call = line.split(" | ").nth(1).map(str::trim);
                call == Some(&leaf) || call == Some(&open)
            })
            .collect()
    };
    let child_work = lines_of("child_work");
    assert_eq!(child_work.len(), 11, "{tree}");
    let child = pid_of(child_work[0]);
    assert!(child_work.iter().all(|line| pid_of(line) == child));
    // The exec'ed program's functions are named, in the child.
    let worker_steps = lines_of("worker_step");
    assert_eq!(worker_steps.len(), 10_000);
    assert!(worker_steps.iter().all(|line| pid_of(line) == child));
    // The parent's calls after the fork are under the new header, with its own pid.
    assert_eq!(lines_of("parent_work").len(), 7, "{tree}");
    let after_header: Vec<&str> = tree.lines().skip(header).collect();
    let parent_after: Vec<&&str> = after_header
        .iter()
        .filter(|line| line.trim_end().ends_with("parent_work();"))
        .collect();
    assert_eq!(parent_after.len(), 2, "{tree}");
    assert!(parent_after.iter().all(|line| pid_of(line) != child));
}

#[test]
fn record_time_filters_keep_the_processes_apart() {
    if !bpf_available("record_time_filters_keep_the_processes_apart") {
        return;
    }
    let (forkexec, calls) = forkexec_and_calls();
    let recording = record_unchanged(
        &forkexec,
        &[calls.to_str().unwrap()],
        &["--follow", "--max-depth", "2"],
    );
    let json = recording.json();
    let (target, child) = target_and_child(&json);
    let processes = counts_by_pid(&json);
    assert_eq!(processes[&target]["parent_work"], 7);
    assert_eq!(processes[&child]["child_work"], 11);
    // Depth 2 in calls: main's fib and each worker thread's, not their recursion.
    assert_eq!(processes[&child]["fib"], 5);
    // The file keeps the exec: calls' main is an outermost call, not one under execv@plt.
    let replay = recording.report(&["--format=replay"]);
    let calls_main = format!(" {child} [{child:>6}] | main() {{");
    assert!(
        replay.lines().any(|line| line.ends_with(&calls_main)),
        "{replay}"
    );
}

/// The target's and the child's pids and the counts per process of a `--follow` recording of a
/// program that forks once, having checked the parent's counts against what it printed.
fn parent_checked(
    recording: &Recording,
    json: &serde_json::Value,
) -> (u64, u64, BTreeMap<u64, BTreeMap<String, u64>>) {
    let (target, child) = target_and_child(json);
    let processes = counts_by_pid(json);
    let stdout = &recording.output.stdout;
    assert_counts_match(&role_counts(stdout, "parent"), &processes[&target]);
    (target, child, processes)
}

/// Checks the counts of a `forkexec` recording against what each process printed: the parent's,
/// and the child's (forkexec's functions before its exec, the exec'ed program's after). Returns
/// the target's and the child's pids and the counts per process.
fn assert_forkexec_counts(
    recording: &Recording,
    json: &serde_json::Value,
) -> (u64, u64, BTreeMap<u64, BTreeMap<String, u64>>) {
    let (target, child, processes) = parent_checked(recording, json);
    let stdout = &recording.output.stdout;
    let mut child_counts = role_counts(stdout, "child");
    child_counts.extend(own_counts(stdout));
    assert_counts_match(&child_counts, &processes[&child]);
    (target, child, processes)
}

/// A child that execs its own program (`/proc/self/exe`): the probes it got at the fork already
/// cover that file, and probing it again at the exec would count every call twice.
#[test]
fn a_child_that_execs_its_own_program_is_counted_once() {
    if !bpf_available("a_child_that_execs_its_own_program_is_counted_once") {
        return;
    }
    let program = compile("reexec.c", "reexec", &[]);
    let recording = record_unchanged(&program, &[], &["--follow"]);
    let json = recording.json();
    let (_, child, processes) = parent_checked(&recording, &json);
    let child_counts = role_counts(&recording.output.stdout, "child");
    assert_counts_match(&child_counts, &processes[&child]);

    let replay = recording.report(&["--format=replay"]);
    let child_tree: Vec<&str> = replay
        .lines()
        .filter(|line| line.contains(&format!(" {child} [")))
        .map(|line| line.split_once("| ").unwrap().1)
        .collect();
    assert_eq!(
        child_tree,
        [
            "execl@plt(); /* no exit */",
            "main() {",
            "  strcmp@plt();",
            "  work();",
            "  work();",
            "  work();",
            "  printf@plt();",
            "  printf@plt();",
            "} /* main */",
            "__cxa_finalize@plt();",
        ],
        "{replay}"
    );
    // The one unfinished call is the child's execl. The child's return from fork, a call its
    // parent made, is not reported since functions' return probes are uprobe sessions (with a
    // plain uretprobe the kernel reported it in the child, as an exit without an entry).
    assert!(
        replay.ends_with(
            "# note: 1 unfinished call (no exit seen: timed up to the end of the trace or to an \
             outer return)\n"
        ),
        "{replay}"
    );
}

/// kill -9 of the recorder while a forked child is held at its fork, waiting to be probed: the
/// BPF program lets every followed process go on, so the child runs its calls and exits, and the
/// parent (which waits for each child) ends as untraced. The recorder is gone at once.
///
/// The recorder is stopped first, so that the next child stays held until the kill: a child the
/// recorder lets go within a millisecond was missed by polling in a slow (TCG) guest.
#[test]
fn a_killed_recorder_lets_a_child_held_at_its_fork_go() {
    if !bpf_available("a_killed_recorder_lets_a_child_held_at_its_fork_go") {
        return;
    }
    let program = compile("forks.c", "forks", &[]);
    let untraced = run_untraced(&program, &["400"]);
    let mut recording = RecordingToKill::start(&program, &["400"], &["--follow"]);
    let target = child_running(recording.recorder_pid(), &program);
    send_signal(recording.recorder_pid(), libc::SIGSTOP);
    let held = stopped_child_of(target);
    recording.kill();
    assert_never_left_stopped(held);
    assert_never_left_stopped(target);
    let (stdout, code) = recording.command_end(target);
    assert_eq!(Some(code), untraced.status.code());
    assert_eq!(stdout, String::from_utf8_lossy(&untraced.stdout));
}

/// The pid of a child of `parent` seen stopped (held at its fork), polled for.
fn stopped_child_of(parent: u32) -> u32 {
    let started = std::time::Instant::now();
    loop {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let fields: Vec<&str> = match stat.rsplit_once(')') {
                Some((_, rest)) => rest.split_whitespace().collect(),
                None => continue,
            };
            if fields.len() > 1 && fields[0] == "T" && fields[1] == parent.to_string() {
                return entry.file_name().to_str().unwrap().parse().unwrap();
            }
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "no child of {parent} was ever seen held at its fork"
        );
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// A child forked after the target closed a library and opened it again elsewhere (another
/// library in its old place) is probed in both libraries where they are now, not where the first
/// one was.
#[test]
fn follow_probes_a_child_in_a_library_opened_again() {
    if !bpf_available("follow_probes_a_child_in_a_library_opened_again") {
        return;
    }
    let reopen = Reopen::build();
    let args = [&reopen.libraries()[..], &["fork"]].concat();
    let flags = [&["--follow"][..], &Reopen::NEST_LIBS].concat();
    let recording = record_unchanged(&reopen.program, &args, &flags);
    let json = recording.json();
    let (target, child) = target_and_child(&json);
    let processes = counts_by_pid(&json);
    let child_counts = role_counts(&recording.output.stdout, "child");
    assert_eq!(child_counts, Reopen::counts(2, 3));
    assert_counts_match(&child_counts, &processes[&child]);
    assert_counts_match(&own_counts(&recording.output.stdout), &processes[&target]);
}
