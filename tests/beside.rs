//! A recording beside another tracer's: a second utrace recording, or bpftrace's return probes,
//! on a program that never leaves `main` and keeps calling traced functions. The kernel frees a
//! uprobe only once every return probe taken before it has returned (see src/probe/release.rs),
//! which such a program holds up for as long as it runs: the short recording must still end at
//! once with a whole file, and the long one count exactly.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// How long the short recording may take, start to end, on this machine of two cores that the
/// hot program and the other tracer share with it.
const SHORT_RECORDING: Duration = Duration::from_secs(2);

/// What utrace says when the kernel keeps it waiting.
const WAITING: &str = "detaching waits for the kernel";

/// Held by each test: they measure how long a recording takes beside a hot program.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn measuring_alone() -> std::sync::MutexGuard<'static, ()> {
    MEASURING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Records `calls` (a short program that counts its own calls) and checks that it ended within
/// [`SHORT_RECORDING`], unchanged, every count exact, its file whole; returns what utrace said.
fn record_short_beside() -> String {
    let calls = compile("calls.c", "calls-beside", &[]);
    let started = Instant::now();
    let recording = record_unchanged(&calls, &[], &[]);
    let took = started.elapsed();
    let said = String::from_utf8_lossy(&recording.output.stderr).into_owned();
    assert!(
        took < SHORT_RECORDING,
        "the short recording took {took:?}: {said}"
    );
    assert_counts_match(
        &own_counts(&recording.output.stdout),
        &recording.traced_counts(),
    );
    let (_, report_said) = report_json_and_stderr(&recording.data());
    assert!(!report_said.contains("cut short"), "{report_said}");
    said
}

/// Waits until a line of `stream` starts with `start`. The stream stays open: the process writes
/// more.
fn wait_for_line(stream: &mut impl std::io::Read, start: &str) {
    for line in BufReader::new(stream).lines() {
        if line.unwrap().starts_with(start) {
            return;
        }
    }
    panic!("never said {start:?}");
}

/// Waits for `process` to end, and its counts.
fn own_counts_at_end(process: Child) -> std::collections::BTreeMap<String, u64> {
    let output = process.wait_with_output().unwrap();
    assert!(output.status.success());
    own_counts(&output.stdout)
}

/// A short recording beside a long one of `loop 4 EXTRA`, hot in tick() under a function that
/// never returns while it runs: the short one ends at once, and the long one counts exactly.
fn assert_short_recording_ends_beside_hot_loop(extra: &[&str]) {
    let _alone = measuring_alone();
    let loop_program = compile("loop.c", "loop-beside", &[]);
    let dir = tempfile::tempdir().unwrap();
    let long_data = dir.path().join("long.data");
    let mut long = utrace()
        .args(["record", "-d", "-o"])
        .arg(&long_data)
        .arg("--")
        .arg(&loop_program)
        .arg("4")
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut long_said = long.stderr.take().unwrap();
    wait_for_line(&mut long_said, "utrace: attached");
    // Hot by now: thousands of calls of tick a millisecond, main (or spin) never left.
    std::thread::sleep(Duration::from_millis(300));
    let said = record_short_beside();
    // utrace holds no return probe of its own for as long as the program runs (the exits of
    // main and of a thread's start routine are probed on their instructions), so nothing held
    // the short one's release up.
    assert!(!said.contains(WAITING), "{said}");
    // Read on, or the recorder's last lines would find no reader.
    let rest = std::thread::spawn(move || std::io::read_to_string(long_said));
    let counts = own_counts_at_end(long);
    let long_said = rest.join().unwrap().unwrap();
    assert!(long_said.contains(" 0 lost"), "{long_said}");
    assert_counts_match(&counts, &counts_of(&report_json(&long_data)));
}

#[test]
fn a_short_recording_ends_beside_a_hot_one() {
    if !bpf_available("a_short_recording_ends_beside_a_hot_one") {
        return;
    }
    assert_short_recording_ends_beside_hot_loop(&[]);
}

#[test]
fn a_short_recording_ends_beside_a_hot_thread_of_another() {
    if !bpf_available("a_short_recording_ends_beside_a_hot_thread_of_another") {
        return;
    }
    assert_short_recording_ends_beside_hot_loop(&["--thread"]);
}

#[test]
fn a_recording_ends_beside_bpftrace_return_probes() {
    if !bpf_available("a_recording_ends_beside_bpftrace_return_probes") {
        return;
    }
    let _alone = measuring_alone();
    let loop_program = compile("loop.c", "loop-beside", &[]);
    let bpftrace = BpftraceRunning::start(&loop_program, "4");
    std::thread::sleep(Duration::from_millis(300));
    let said = record_short_beside();
    // bpftrace's return probe on main is never given back while tick's keep coming: utrace says
    // why it does not wait, and leaves the release to a process of its own.
    assert_eq!(said.matches(WAITING).count(), 1, "{said}");
    // It names the process whose return probes hold the release up, bpftrace's program.
    let held_by = format!("pid {} (loop-beside)", bpftrace.program_pid());
    assert!(said.contains(&held_by), "{held_by} not in {said}");
    let releaser = releaser_pid(&said);
    assert!(is_running(releaser), "{said}");
    // Once bpftrace and its program have gone, so has the release.
    let output = bpftrace.finish();
    let gone = Instant::now();
    while is_running(releaser) {
        assert!(
            gone.elapsed() < Duration::from_secs(2),
            "the releaser (pid {releaser}) was still there 2 s after bpftrace left"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The hot program ran undisturbed to its end.
    assert_eq!(
        own_counts(output.as_bytes()).get("main"),
        Some(&1),
        "{output}"
    );
}

/// How long a recorder killed with SIGKILL may take to go, whatever holds the kernel up.
const KILLED_RECORDER_GONE: Duration = Duration::from_secs(1);

/// A recording of a hot program killed with SIGKILL beside bpftrace's return probes on another:
/// the recorder's exit would close its links, and the last close of a link waits for the kernel's
/// release, which bpftrace's program holds up for as long as it runs. The guardian keeps a
/// reference to each link, so the recorder goes at once; its program runs on untouched to its own
/// end, and the file reads up to the kill.
#[test]
fn a_recorder_killed_beside_bpftrace_return_probes_goes_at_once() {
    if !bpf_available("a_recorder_killed_beside_bpftrace_return_probes_goes_at_once") {
        return;
    }
    let _alone = measuring_alone();
    let loop_program = compile("loop.c", "loop-beside", &[]);
    let killed_program = compile("loop.c", "loop-killed-beside", &[]);
    // Runs on for seconds after the kill, the release held up all that time.
    let bpftrace = BpftraceRunning::start(&loop_program, "8");
    std::thread::sleep(Duration::from_millis(300));
    let mut recording = RecordingToKill::start(&killed_program, &["5"], &[]);
    // Running its program, the recorder has attached; hot a while later.
    let pid = child_running(recording.recorder_pid(), &killed_program);
    std::thread::sleep(Duration::from_millis(800));
    // Killed while its program runs (an orphan then, which this test reaps).
    assert!(is_running(pid), "pid {pid} ended before the kill");
    // Where each probe is a uprobe of its own (before 6.6), the recorder releases them itself,
    // and nothing of bpftrace's holds that up (only qemu's slowness, in CI's guests).
    recording.kill_within(match kernel_lacks("uprobe_multi") {
        false => KILLED_RECORDER_GONE,
        true => recorder_exit_bound(),
    });
    assert_never_left_stopped(pid);
    let (json, said) = report_json_and_stderr(&recording.data());
    let (stdout, code) = recording.command_end(pid);
    assert_eq!(code, 0, "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines.len() == 3 && lines[0].starts_with("loop: done ("),
        "{stdout}"
    );
    let own = own_counts(stdout.as_bytes());
    assert_eq!(own.get("main"), Some(&1), "{stdout}");
    // Counted until the kill, a second into the program's five.
    let traced_ticks = counts_of(&json).get("tick").copied().unwrap_or(0);
    assert!(
        traced_ticks > 0 && traced_ticks < own["tick"],
        "{traced_ticks} of {} ticks: {said}",
        own["tick"]
    );
    let output = bpftrace.finish();
    assert_eq!(
        own_counts(output.as_bytes()).get("main"),
        Some(&1),
        "{output}"
    );
}

/// Where the recorder releases its links itself (one uprobe each, before 6.6 or as forced here),
/// the release waits beside bpftrace's return probes for as long as bpftrace's program runs.
/// Everything the recording holds is on disk before that wait: the file, read while the recorder
/// still waits and after it is killed there, has every call the program counted.
#[test]
fn a_recording_is_on_disk_before_its_release_waits() {
    if !bpf_available("a_recording_is_on_disk_before_its_release_waits") {
        return;
    }
    let _alone = measuring_alone();
    let loop_program = compile("loop.c", "loop-beside", &[]);
    let calls = compile("calls.c", "calls-beside", &[]);
    let bpftrace = BpftraceRunning::start(&loop_program, "8");
    std::thread::sleep(Duration::from_millis(300));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("short.data");
    let stdout = dir.path().join("stdout");
    let mut recorder = utrace()
        .env("UTRACE_ATTACH_MODE", "single")
        .args(["record", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&calls)
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let program = child_running(recorder.id(), &calls);
    let started = Instant::now();
    while is_running(program) {
        assert!(started.elapsed() < Duration::from_secs(5), "calls ran on");
        std::thread::sleep(Duration::from_millis(10));
    }
    let own = own_counts(&std::fs::read(&stdout).unwrap());
    // The recorder stops, takes the last events and writes them, then waits for the release.
    let mut traced = BTreeMap::new();
    while traced != own && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
        traced = counts_of(&report_json_and_stderr(&data).0);
    }
    assert_counts_match(&own, &traced);
    assert!(
        recorder.try_wait().unwrap().is_none(),
        "the recorder did not wait for its release: the test shows nothing"
    );
    send_signal(recorder.id(), libc::SIGKILL);
    // Gone once bpftrace's program has ended and the kernel lets the release finish.
    let output = bpftrace.finish();
    recorder.wait().unwrap();
    assert_counts_match(&own, &counts_of(&report_json(&data)));
    assert_eq!(
        own_counts(output.as_bytes()).get("main"),
        Some(&1),
        "{output}"
    );
}

/// `bpftrace -c PROGRAM SECONDS` with return probes on `main` and `tick`, killed if the test
/// fails first.
struct BpftraceRunning {
    process: Child,
    output: std::process::ChildStdout,
}

impl BpftraceRunning {
    /// Starts it and waits until its probes are attached.
    fn start(program: &Path, seconds: &str) -> BpftraceRunning {
        let path = program.display();
        let script = format!(
            "uretprobe:{path}:main {{ @main = count(); }} \
             uretprobe:{path}:tick {{ @tick = count(); }}"
        );
        let mut process = Command::new("bpftrace")
            .args(["-e", &script, "-c", &format!("{path} {seconds}")])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("bpftrace (tools/setup.sh installs it)");
        let mut output = process.stdout.take().unwrap();
        wait_for_line(&mut output, "Attaching 2 probes");
        BpftraceRunning { process, output }
    }

    /// The pid of the program bpftrace started (`-c`), its child.
    fn program_pid(&self) -> u32 {
        let parent = self.process.id().to_string();
        let children = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|entry| {
                let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
                let (_, rest) = stat.rsplit_once(") ")?;
                (rest.split_whitespace().nth(1) == Some(parent.as_str()))
                    .then(|| entry.file_name().to_str()?.parse().ok())?
            });
        children.min().expect("bpftrace's program")
    }

    /// Waits for the program and bpftrace to end; what they wrote.
    fn finish(mut self) -> String {
        let written = std::io::read_to_string(&mut self.output).unwrap();
        assert!(self.process.wait().unwrap().success());
        written
    }
}

impl Drop for BpftraceRunning {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// The releaser's pid, in what utrace said of it ("…, and process N finishes …").
fn releaser_pid(said: &str) -> u32 {
    let after = said.split("and process ").nth(1).expect("a releaser named");
    after
        .split_whitespace()
        .next()
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {said}"))
}

/// Whether process `pid` still runs (a zombie has ended).
fn is_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next());
            state != Some("Z")
        }
        Err(_) => false,
    }
}
