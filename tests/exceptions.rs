//! End to end: C++ exceptions and Rust panics that unwind through traced frames. Under
//! uretprobes (the default) the shadow stack gives the unwinder the return addresses the kernel
//! replaced and puts the trampoline back after the catch; under `--exit-probes=ret` no return
//! address is touched. Either way the program behaves exactly as untraced and every count is
//! exact.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use common::*;

/// Records `program` with each argument list and `extra` flags: the output and exit status are
/// those of the untraced program and utrace counts each function as the program did.
fn assert_unchanged_with_exact_counts(program: &Path, extra: &[&str]) -> Vec<String> {
    let mut stderrs = Vec::new();
    for args in [&[][..], &["50"][..]] {
        assert!(run_untraced(program, args).status.success());
        let recording = record_unchanged(program, args, extra);
        let stderr = String::from_utf8_lossy(&recording.output.stderr).into_owned();
        assert_counts_match(
            &own_counts(&recording.output.stdout),
            &recording.traced_counts(),
        );
        // A program that has ended has no thread left running at the detach.
        assert!(
            !stderr.contains("did not stop for the detach"),
            "a false warning: {stderr}"
        );
        stderrs.push(stderr);
    }
    stderrs
}

#[test]
fn exceptions_unwind_through_traced_frames_with_uretprobes() {
    if !bpf_available("exceptions_unwind_through_traced_frames_with_uretprobes") {
        return;
    }
    let _one = one_attach_at_a_time();
    // A copy of its own: uretprobes act on every process that runs the file, whatever the
    // link's pid filter, and only the traced process has a shadow stack: the test below running
    // the same file at the same time would die.
    let program = compile("exceptions.cpp", "exceptions-uretprobe", &[]);
    for stderr in assert_unchanged_with_exact_counts(&program, &["-d"]) {
        assert!(
            stderr.contains("utrace: shadow stack on: 5 unwinder entry points probed in"),
            "{stderr}"
        );
    }
}

#[test]
fn exceptions_unwind_through_traced_frames_with_ret_probes() {
    if !bpf_available("exceptions_unwind_through_traced_frames_with_ret_probes") {
        return;
    }
    let _one = one_attach_at_a_time();
    let program = compile("exceptions.cpp", "exceptions", &[]);
    assert_unchanged_with_exact_counts(&program, &["--exit-probes=ret"]);
}

/// Held by each test: their programs share libstdc++, where PLT calls are probed where they land,
/// and the kernel gives a process a return probe for another recorder's probe there too (its
/// uprobe session runs no program for a process not its own, but keeps the return), which is in
/// no shadow stack (README, Limits).
static ATTACHING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_attach_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ATTACHING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The exceptions program, started waiting for SIGUSR1 (`EXCEPTIONS_WAIT=1`) so that a
/// recorder can attach to it first, its output read line by line.
struct WaitingThrower {
    process: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    dir: tempfile::TempDir,
}

impl WaitingThrower {
    fn start(program: &Path, rounds: &str) -> WaitingThrower {
        let (process, lines) = start_waiting(
            Command::new(program)
                .arg(rounds)
                .env("EXCEPTIONS_WAIT", "1"),
        );
        WaitingThrower {
            process,
            lines,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn pid(&self) -> u32 {
        self.process.id()
    }

    /// Where the recorder writes.
    fn data(&self) -> std::path::PathBuf {
        self.dir.path().join("utrace.data")
    }

    /// `utrace record -d -p` with `extra` flags, once it has attached.
    fn attach(&self, extra: &[&str]) -> AttachedRecorder {
        AttachedRecorder::start(self.pid(), &self.data(), extra)
    }

    /// Lets the program throw.
    fn go(&self) {
        send_signal(self.pid(), libc::SIGUSR1);
    }

    /// Reads the program's output to its end: its exit status and lines.
    fn end(mut self) -> (std::process::ExitStatus, Vec<String>, tempfile::TempDir) {
        let stdout: Vec<String> = self.lines.map(|line| line.unwrap()).collect();
        (self.process.wait().unwrap(), stdout, self.dir)
    }
}

/// The pid of the program whose stops [`count_stops`] counts, and how many its parent (this
/// test process) was told of.
static WATCHED: AtomicI32 = AtomicI32::new(0);
static STOPS_SEEN: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_child(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let (code, pid) = unsafe { ((*info).si_code, (*info).si_pid()) };
    if code == libc::CLD_STOPPED && pid == WATCHED.load(Ordering::SeqCst) {
        STOPS_SEEN.fetch_add(1, Ordering::SeqCst);
    }
}

/// Counts the stops of `pid` its parent, this process, hears of (SIGCHLD with CLD_STOPPED): each
/// group stop of a SIGSTOP, as the shadow stack's pauses were under -p before ptrace.
fn count_stops(pid: u32) {
    WATCHED.store(pid as i32, Ordering::SeqCst);
    // SAFETY: a zeroed sigaction is a valid start; the handler uses atomics only.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_child as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&raw mut action.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGCHLD, &action, std::ptr::null_mut()),
            0
        );
    }
}

/// A C++ process utrace attaches to is held with ptrace: uretprobes and the shadow stack, as
/// under -c, its threads paused in stops its parent never sees; it throws through traced
/// frames as untraced, and every count is exact.
#[test]
fn an_attached_process_with_an_unwinder_is_held_with_ptrace_and_keeps_uretprobes() {
    if !bpf_available(
        "an_attached_process_with_an_unwinder_is_held_with_ptrace_and_keeps_uretprobes",
    ) {
        return;
    }
    let _one = one_attach_at_a_time();
    // Its own copy: another test's uretprobes on the same file would act here too.
    let program = compile("exceptions.cpp", "exceptions-attached", &[]);
    let untraced = run_untraced(&program, &["200"]);
    let thrower = WaitingThrower::start(&program, "200");
    count_stops(thrower.pid());
    let data = thrower.data();
    let recorder = thrower.attach(&[]);
    let before_attach = recorder.said.clone();
    thrower.go();
    let (status, stdout, _dir) = thrower.end();
    recorder.finish();

    let said = |text: &str| before_attach.iter().any(|line| line.contains(text));
    assert!(
        said("with ptrace (pauses for the shadow stack)"),
        "{before_attach:?}"
    );
    assert!(
        said("utrace: shadow stack on: 5 unwinder entry points"),
        "{before_attach:?}"
    );
    assert!(
        !said("exits probed on their instructions"),
        "{before_attach:?}"
    );
    assert_eq!(STOPS_SEEN.load(Ordering::SeqCst), 0, "the parent saw stops");
    assert_ran_as_untraced(status, &stdout, &untraced, &data);
}

/// Another tracer holds the process: ptrace is refused, one warning says so and what it costs,
/// and exits are probed on their instructions; counts are still exact.
#[test]
fn a_process_another_tracer_holds_gets_exit_probes_on_instructions() {
    if !bpf_available("a_process_another_tracer_holds_gets_exit_probes_on_instructions") {
        return;
    }
    let _one = one_attach_at_a_time();
    let program = compile("exceptions.cpp", "exceptions-traced-already", &[]);
    let untraced = run_untraced(&program, &["20"]);
    let thrower = WaitingThrower::start(&program, "20");
    // The other tracer: a thread of this test that seizes the program and holds it until the
    // end (its exit would detach it). Nothing in the program makes a ptrace stop.
    let pid = thrower.pid() as libc::pid_t;
    let (seized_tx, seized) = std::sync::mpsc::channel();
    let (end_tx, end) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        // SAFETY: PTRACE_SEIZE takes a pid and options only.
        let result = unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0usize, 0usize) };
        seized_tx.send(result).unwrap();
        let _ = end.recv();
    });
    assert_eq!(seized.recv().unwrap(), 0);
    let data = thrower.data();
    let recorder = thrower.attach(&[]);
    let before_attach = recorder.said.clone();
    thrower.go();
    let (status, stdout, _dir) = thrower.end();
    recorder.finish();
    drop(end_tx);
    holder.join().unwrap();

    let warnings: Vec<&String> = before_attach
        .iter()
        .filter(|line| line.contains("ptrace refused"))
        .collect();
    assert_eq!(warnings.len(), 1, "{before_attach:?}");
    assert!(warnings[0].contains("traces it already"), "{warnings:?}");
    assert!(
        warnings[0].contains("exits are probed on their instructions"),
        "{warnings:?}"
    );
    assert_ran_as_untraced(status, &stdout, &untraced, &data);
}

/// `--duration` ends the recording while the held process throws: its threads are held while
/// the probes go, the return addresses still replaced are given back, and it throws on as
/// untraced to its end.
#[test]
fn an_attached_process_throws_on_after_utrace_leaves() {
    if !bpf_available("an_attached_process_throws_on_after_utrace_leaves") {
        return;
    }
    let _one = one_attach_at_a_time();
    let program = compile("exceptions.cpp", "exceptions-left-running", &[]);
    let untraced = run_untraced(&program, &["1000"]);
    for _ in 0..3 {
        let thrower = WaitingThrower::start(&program, "1000");
        let recorder = thrower.attach(&["--duration", "0.3s"]);
        thrower.go();
        recorder.finish();
        let (status, stdout, _) = thrower.end();
        assert_output_as_untraced(status, &stdout, &untraced);
    }
}

/// `--duration` ends the recording of a started command while it throws: the command is
/// stopped while the probes go and its replaced return addresses are given back, and it throws
/// on to its untraced end (utrace waits for it and exits with its code).
#[test]
fn a_started_command_throws_on_after_the_recording_ends() {
    if !bpf_available("a_started_command_throws_on_after_the_recording_ends") {
        return;
    }
    let _one = one_attach_at_a_time();
    let program = compile("exceptions.cpp", "exceptions-duration", &[]);
    let untraced = run_untraced(&program, &["1000"]);
    for _ in 0..3 {
        let recording = record(&program, &["1000"], &["-d", "--duration", "0.3s"]);
        let stderr = String::from_utf8_lossy(&recording.output.stderr);
        assert_eq!(
            recording.output.status.code(),
            untraced.status.code(),
            "{stderr}"
        );
        assert_eq!(recording.output.stdout, untraced.stdout, "{stderr}");
    }
}

/// kill -9 of a recorder that holds a process throwing in a loop: the BPF program stops the
/// process before the probes go, the guardian gives back the return addresses still replaced and
/// lets it go (the kernel has let the ptrace hold go). The recorder is gone at once; the program
/// is never left stopped and ends as untraced.
#[test]
fn a_killed_recorder_leaves_the_attached_process_running() {
    if !bpf_available("a_killed_recorder_leaves_the_attached_process_running") {
        return;
    }
    let _one = one_attach_at_a_time();
    let program = compile("exceptions.cpp", "exceptions-killed-recorder", &[]);
    let rounds = "1000";
    let untraced = run_untraced(&program, &[rounds]);
    let thrower = WaitingThrower::start(&program, rounds);
    let recorder = thrower.attach(&[]);
    thrower.go();
    std::thread::sleep(std::time::Duration::from_millis(100));
    kill_recorder(recorder.pid(), || recorder.wait_killed());
    assert_never_left_stopped(thrower.pid());
    let (status, stdout, _) = thrower.end();
    assert_output_as_untraced(status, &stdout, &untraced);
}

/// The same for a command utrace started (`record -- exceptions 1000`), killed while it throws:
/// the program, left to the test (a subreaper) by its dead parent, ends with its untraced output
/// and exit code.
#[test]
fn a_killed_recorder_leaves_the_started_program_to_end_as_untraced() {
    if !bpf_available("a_killed_recorder_leaves_the_started_program_to_end_as_untraced") {
        return;
    }
    let _one = one_attach_at_a_time();
    let program = compile("exceptions.cpp", "exceptions-killed-started", &[]);
    let untraced = run_untraced(&program, &["1000"]);
    for _ in 0..3 {
        let mut recording = RecordingToKill::start(&program, &["1000"], &[]);
        let pid = child_running(recording.recorder_pid(), &program);
        // Traced, the 1000 rounds take seconds: killed while it throws.
        std::thread::sleep(std::time::Duration::from_millis(300));
        recording.kill();
        assert_never_left_stopped(pid);
        let (stdout, code) = recording.command_end(pid);
        assert_eq!(Some(code), untraced.status.code());
        assert_eq!(stdout, String::from_utf8_lossy(&untraced.stdout));
    }
}

/// Two threads throwing through up to 150 traced frames at the same time: each one's stop
/// for its stack writes must hold it, even while the other's is still on its way.
#[test]
fn threads_throwing_at_the_same_time_unwind_with_uretprobes() {
    if !bpf_available("threads_throwing_at_the_same_time_unwind_with_uretprobes") {
        return;
    }
    let _one = one_attach_at_a_time();
    let program = compile("thread_exceptions.cpp", "thread-exceptions", &[]);
    // Before the threads' stops were their own, each run died more often than not.
    for _ in 0..3 {
        let recording = record_unchanged(&program, &["200"], &[]);
        assert_counts_match(
            &own_counts(&recording.output.stdout),
            &recording.traced_counts(),
        );
    }
}

#[test]
fn panics_unwind_through_traced_frames_with_uretprobes() {
    if !bpf_available("panics_unwind_through_traced_frames_with_uretprobes") {
        return;
    }
    let _one = one_attach_at_a_time();
    let program = compile_rust("panics.rs", "panics");
    assert_unchanged_with_exact_counts(&program, &[]);
}

/// A C program maps no unwinder: no probe goes on one and no frame is followed.
#[test]
fn programs_without_an_unwinder_pay_nothing() {
    if !bpf_available("programs_without_an_unwinder_pay_nothing") {
        return;
    }
    let program = compile("calls.c", "calls-no-unwinder", &[]);
    let recording = record_unchanged(&program, &[], &["-d"]);
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert!(
        stderr.contains("utrace: shadow stack off: the program maps no unwinder"),
        "{stderr}"
    );
    assert!(!stderr.contains("unwinder entry points probed"), "{stderr}");
}

/// An attached run of the exceptions program ended as its untraced run did (`status`, the
/// `stdout` lines), and the recording at `data` counts every function as the program did; but
/// main, entered before the attach, whose exit is one of a call already running.
fn assert_ran_as_untraced(
    status: std::process::ExitStatus,
    stdout: &[String],
    untraced: &std::process::Output,
    data: &std::path::Path,
) {
    let stdout = assert_output_as_untraced(status, stdout, untraced);
    let mut own = own_counts(stdout.as_bytes());
    own.remove("main");
    let mut traced = counts_of(&report_json(data));
    traced.remove("main");
    assert_counts_match(&own, &traced);
}

/// A run of an exceptions program ended as its untraced run did: exit `status`, and the `stdout`
/// lines; returns them as one text.
fn assert_output_as_untraced(
    status: std::process::ExitStatus,
    stdout: &[String],
    untraced: &std::process::Output,
) -> String {
    assert_eq!(status.code(), untraced.status.code(), "{status}");
    let stdout = stdout.join("\n") + "\n";
    assert_eq!(stdout, String::from_utf8_lossy(&untraced.stdout));
    stdout
}

/// The time utrace holds a thread stopped to repair its shadow stack (one stop a caught exception,
/// at the unwinder's entry: the catching frame, main's, has no return probe to re-arm, its exits
/// being probed on its instructions) is a row of its own,
/// `[utrace: stack repair]`, and is taken out of the calls it fell in, as probe costs are: main's
/// corrected time leaves it all out, and `--raw-times` shows it as measured.
#[test]
fn stack_repairs_are_utrace_time_not_the_programs() {
    if !bpf_available("stack_repairs_are_utrace_time_not_the_programs") {
        return;
    }
    let _one = one_attach_at_a_time();
    let program = compile("catch_loop.cpp", "catch_loop-repairs", &[]);
    let recording = record_unchanged(&program, &["100"], &[]);
    assert_counts_match(
        &own_counts(&recording.output.stdout),
        &recording.traced_counts(),
    );
    let json = recording.json();
    let raw: serde_json::Value =
        serde_json::from_str(&recording.report(&["--format=json", "--raw-times"])).unwrap();
    let function = |json: &serde_json::Value, name: &str| {
        let functions = json["functions"].as_array().unwrap();
        let found = functions.iter().find(|f| f["name"] == name);
        found.unwrap_or_else(|| panic!("{name}: {json}")).clone()
    };
    let repair = function(&json, "[utrace: stack repair]");
    assert_eq!(repair["calls"], 100, "{repair}");
    assert_eq!(repair["module"], "[utrace]");
    let repair_ns = repair["total_ns"].as_u64().unwrap();
    assert!(repair_ns > 0);
    let main_ns = function(&json, "main")["total_ns"].as_u64().unwrap();
    let raw_main_ns = function(&raw, "main")["total_ns"].as_u64().unwrap();
    assert!(
        main_ns + repair_ns <= raw_main_ns,
        "main {main_ns} ns + repairs {repair_ns} ns, raw {raw_main_ns} ns"
    );
    // As measured, the stops are main's children: its self time leaves them out already.
    assert_eq!(
        function(&raw, "[utrace: stack repair]")["total_ns"],
        repair_ns
    );
    let summary = recording.report(&[]);
    let row = summary
        .lines()
        // (after a `~` where a few long stops carry the total)
        .find(|line| line.ends_with(" [utrace: stack repair]"))
        .unwrap_or_else(|| panic!("{summary}"));
    // No share of the program's time.
    assert_eq!(row.split_whitespace().nth(2), Some("-"), "{summary}");
}

/// Under -p the ptrace tracer pauses the thread for its stack, as the group stop does under -c:
/// each pause is a call of `[utrace: stack repair]` on the thread, where it happened (the same
/// number as under -c), and its time is taken out of the calls it fell in: the throwing and
/// catching calls' corrected totals leave out at least the pauses under them.
#[test]
fn pauses_of_an_attached_process_are_utrace_time_not_the_programs() {
    if !bpf_available("pauses_of_an_attached_process_are_utrace_time_not_the_programs") {
        return;
    }
    let _one = one_attach_at_a_time();
    let program = compile("exceptions.cpp", "exceptions-attached-pauses", &[]);
    let started = record_unchanged(&program, &["100"], &[]);
    let repair_calls = |json: &serde_json::Value| {
        let functions = json["functions"].as_array().unwrap();
        let repair = functions
            .iter()
            .find(|f| f["name"] == "[utrace: stack repair]");
        repair.unwrap_or_else(|| panic!("no stack repair in {json}"))["calls"].clone()
    };
    let expected = repair_calls(&started.json());
    assert!(expected.as_u64().unwrap() >= 100, "{expected}");

    let untraced = run_untraced(&program, &["100"]);
    let thrower = WaitingThrower::start(&program, "100");
    let data = thrower.data();
    let recorder = thrower.attach(&[]);
    thrower.go();
    let (status, stdout, _dir) = thrower.end();
    recorder.finish();
    assert_ran_as_untraced(status, &stdout, &untraced, &data);
    assert_eq!(repair_calls(&report_json(&data)), expected);

    let report = |args: &[&str]| {
        let output = report_output(&data, args);
        assert_success(&output);
        String::from_utf8(output.stdout).unwrap()
    };
    // Self time of each path, in ns: the pauses are their own frames.
    let folded = report(&["--format=flame-graph"]);
    let paused_under = |caller: &str| -> u64 {
        (folded.lines())
            .filter(|line| line.contains(&format!("{caller};")))
            .filter_map(|line| line.rsplit_once(' '))
            .filter(|(frames, _)| frames.ends_with(";[utrace: stack repair]"))
            .map(|(_, ns)| ns.parse::<u64>().unwrap())
            .sum()
    };
    let total_ns = |json: &serde_json::Value, name: &str| {
        let functions = json["functions"].as_array().unwrap();
        let found = functions.iter().find(|f| f["name"] == name);
        found.unwrap_or_else(|| panic!("{name}: {json}"))["total_ns"]
            .as_u64()
            .unwrap()
    };
    let corrected: serde_json::Value = serde_json::from_str(&report(&["--format=json"])).unwrap();
    let raw: serde_json::Value =
        serde_json::from_str(&report(&["--format=json", "--raw-times"])).unwrap();
    for caller in ["catch_through(int)", "__cxa_begin_catch@plt"] {
        let paused = paused_under(caller);
        assert!(paused > 0, "no pause under {caller}: {folded}");
        let (corrected_ns, raw_ns) = (total_ns(&corrected, caller), total_ns(&raw, caller));
        assert!(
            corrected_ns + paused <= raw_ns,
            "{caller}: corrected {corrected_ns} ns + paused {paused} ns, raw {raw_ns} ns"
        );
    }
}
