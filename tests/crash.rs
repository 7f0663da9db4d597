//! The recorder dies, is signalled, or runs out of disk while the traced program runs: the
//! program goes on unharmed, and what was recorded can still be reported.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use common::*;

/// Lets the traced program run under its probes for a while before the test acts.
/// How long a recording runs after the program started (its marker file appeared) before the
/// test does what it tests.
const WARM_UP: Duration = Duration::from_millis(300);

/// Starts `utrace record` on `loop ARGS` writing `data`, and returns once the program runs (it
/// creates its marker first thing), so under emulation too (tools/vm-test.sh, where utrace takes
/// seconds to start) the recording is under way, plus [`WARM_UP`].
fn start_recording_loop(data: &Path, program: &Path, args: &[&str]) -> std::process::Child {
    let marker = data.with_file_name("loop-started");
    let marker_arg = format!("--marker={}", marker.display());
    let mut args = args.to_vec();
    args.push(&marker_arg);
    let recorder = spawn_record(data, program, &args);
    let started = Instant::now();
    while !marker.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the program did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(WARM_UP);
    recorder
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn a_killed_recorder_leaves_the_program_running_and_a_readable_file() {
    if !bpf_available("a_killed_recorder_leaves_the_program_running_and_a_readable_file") {
        return;
    }
    // The traced program outlives utrace and is reparented; as a subreaper this test gets it,
    // so it can see how the program ended.
    // SAFETY: prctl with these arguments only sets a flag on this process.
    assert_eq!(
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) },
        0
    );
    let dir = TempDir::new().unwrap();
    let data = dir.path().join("utrace.data");
    let program = compile("loop.c", "loop", &[]);
    let recorder = start_recording_loop(&data, &program, &["3"]);
    send_signal(recorder.id(), libc::SIGKILL);
    // The program keeps the pipes open: this returns once it has finished too.
    let output = recorder.wait_with_output().unwrap();
    assert_eq!(shell_code(output.status), 128 + libc::SIGKILL);

    let (json, stderr) = report_json_and_stderr(&data);
    assert!(stderr.contains("cut short"), "no warning: {stderr}");
    let pid = json["pid"].as_u64().unwrap() as libc::pid_t;
    let mut status = 0;
    // SAFETY: waitpid writes only to `status`.
    assert_eq!(unsafe { libc::waitpid(pid, &raw mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the program did not exit normally: wait status {status:#x}"
    );
    let out = stdout(&output);
    assert!(out.contains("loop: done"), "program output: {out}");
    let own = own_counts(&output.stdout)["tick"];
    let traced = calls_of(&json, "tick");
    assert!(
        traced > 0 && traced < own,
        "traced {traced} of the program's {own} ticks"
    );
}

#[test]
fn sigterm_is_forwarded_and_the_recording_completes() {
    if !bpf_available("sigterm_is_forwarded_and_the_recording_completes") {
        return;
    }
    let dir = TempDir::new().unwrap();
    let data = dir.path().join("utrace.data");
    let program = compile("loop.c", "loop", &[]);
    let recorder = start_recording_loop(&data, &program, &["20"]);
    send_signal(recorder.id(), libc::SIGTERM);
    let output = recorder.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let out = stdout(&output);
    assert!(
        out.contains("loop: SIGTERM received"),
        "not forwarded: {out}"
    );
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("utrace: traced"), "{stderr}");

    let (json, stderr) = report_json_and_stderr(&data);
    assert!(stderr.is_empty(), "the recording is complete: {stderr}");
    // Recording went on until the program ended: every call is in the file.
    assert_eq!(calls_of(&json, "tick"), own_counts(&output.stdout)["tick"]);
}

#[test]
fn a_second_sigterm_stops_at_once_with_a_complete_file() {
    if !bpf_available("a_second_sigterm_stops_at_once_with_a_complete_file") {
        return;
    }
    let dir = TempDir::new().unwrap();
    let data = dir.path().join("utrace.data");
    let program = compile("loop.c", "loop", &[]);
    let mut recorder = start_recording_loop(&data, &program, &["4", "--stay"]);
    send_signal(recorder.id(), libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(200));
    let second = Instant::now();
    send_signal(recorder.id(), libc::SIGTERM);
    let status = recorder.wait().unwrap();
    assert!(
        second.elapsed() < Duration::from_secs(2),
        "utrace took {:?} to stop",
        second.elapsed()
    );
    assert_ne!(status.code(), Some(0), "stopped before the command ended");
    assert_eq!(shell_code(status), 128 + libc::SIGTERM);

    let (json, stderr) = report_json_and_stderr(&data);
    assert!(stderr.is_empty(), "statistics must be written: {stderr}");
    assert!(calls_of(&json, "tick") > 0, "{json}");
    assert!(json["duration_ns"].as_u64().unwrap() > 0);

    // The program goes on untraced and ends as it would have.
    let output = recorder.wait_with_output().unwrap();
    let out = stdout(&output);
    assert!(
        out.contains("loop: SIGTERM received") && out.contains("loop: done"),
        "{out}"
    );
}

/// A tmpfs mounted for one test, unmounted when dropped, even when the test fails.
struct TinyDisk {
    dir: TempDir,
}

impl TinyDisk {
    fn mount(size: &str) -> TinyDisk {
        let dir = TempDir::new().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "mount -t tmpfs failed");
        TinyDisk { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for TinyDisk {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        // A lazy unmount still frees the directory when a file there is held open.
        if !unmounted {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

#[test]
fn a_full_disk_stops_the_recording_not_the_program() {
    if !bpf_available("a_full_disk_stops_the_recording_not_the_program") {
        return;
    }
    let disk = TinyDisk::mount("64k");
    let data = disk.path().join("utrace.data");
    let program = compile("loop.c", "loop", &[]);
    let output = spawn_record(&data, &program, &["1"])
        .wait_with_output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_clear_failure(
        &output,
        &[&data.display().to_string(), "No space left on device"],
    );
    let out = stdout(&output);
    assert!(
        out.contains("loop: done"),
        "the program did not finish: {out}"
    );
    assert!(own_counts(&output.stdout)["tick"] > 0, "{stderr}");

    // Readable up to its last whole chunk, and said to be cut short.
    let (json, stderr) = report_json_and_stderr(&data);
    assert!(stderr.contains("cut short"), "{stderr}");
    assert!(json["functions"].is_array(), "{json}");
}

#[test]
fn a_stopped_and_continued_program_is_recorded_to_its_end() {
    if !bpf_available("a_stopped_and_continued_program_is_recorded_to_its_end") {
        return;
    }
    // Job control (Ctrl-Z, then fg) stops and continues the traced program; utrace waits it out.
    let dir = TempDir::new().unwrap();
    let data = dir.path().join("utrace.data");
    let program = compile("loop.c", "loop", &[]);
    let recorder = spawn_record(&data, &program, &["2"]);
    std::thread::sleep(Duration::from_millis(500));
    let pid = traced_pid(recorder.id());
    send_signal(pid, libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(300));
    send_signal(pid, libc::SIGCONT);
    let output = recorder.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (json, stderr) = report_json_and_stderr(&data);
    assert!(stderr.is_empty(), "the recording is complete: {stderr}");
    assert_eq!(calls_of(&json, "tick"), own_counts(&output.stdout)["tick"]);
}

/// The pid of the program a recorder started: its only child.
fn traced_pid(recorder: u32) -> u32 {
    let children = std::fs::read_to_string(format!("/proc/{recorder}/task/{recorder}/children"))
        .expect("reading the recorder's children");
    children
        .split_whitespace()
        .next()
        .expect("the recorder has started the program")
        .parse()
        .unwrap()
}
