//! However a recording ends (the recorder killed with SIGKILL, a second Ctrl-C, `--duration`),
//! the traced program runs untraced at its own speed again within a second, and the recorder is
//! gone. `test/busy.c` prints its own call rate every 100 ms, which shows whether it is still
//! traced: a traced call costs microseconds, and the rate drops by an order of magnitude.

mod common;

use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// How far the rate after the recorder has gone may stay below the untraced one: a fifth, or
/// two fifths in the emulated guest, whose speed varies that much from second to second (a 6.12
/// guest under `.ci/run` read 0.797). A probe left behind costs busy far more: it runs over 100×
/// slower traced.
fn own_speed() -> f64 {
    match in_emulated_guest() {
        false => 0.8,
        true => 0.6,
    }
}

/// Held by each test: each measures speeds and times on a machine of two cores, where another
/// test's busy threads and recorder would take the CPU its own need.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn measuring_alone() -> std::sync::MutexGuard<'static, ()> {
    MEASURING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `busy`'s lines as they come, with what it printed about its speed.
struct Rates {
    lines: Lines<BufReader<ChildStdout>>,
}

impl Rates {
    fn of(process: &mut Child) -> Rates {
        Rates {
            lines: BufReader::new(process.stdout.take().unwrap()).lines(),
        }
    }

    /// The next `count` rates (calls per second, one per 100 ms).
    fn next(&mut self, count: usize) -> Vec<f64> {
        let mut rates = Vec::new();
        while rates.len() < count {
            let line = self.lines.next().expect("busy ended early").unwrap();
            if let Some(rate) = line.strip_prefix("rate ") {
                rates.push(rate.parse().unwrap());
            }
        }
        rates
    }

    /// Skips the rates already written: busy wrote them before now (while the recorder was
    /// starting), and they would pass for rates under tracing. They come at once, where a new
    /// one takes 100 ms.
    fn skip_written(&mut self) {
        loop {
            let asked = Instant::now();
            self.next(1);
            if asked.elapsed() > Duration::from_millis(50) {
                return;
            }
        }
    }

    /// The median of the next `count` rates.
    fn median(&mut self, count: usize) -> f64 {
        let mut rates = self.next(count);
        rates.sort_by(f64::total_cmp);
        rates[count / 2]
    }

    /// Reads to the end: the program's own count lines.
    fn rest(self) -> String {
        self.lines
            .map(|line| line.unwrap() + "\n")
            .filter(|line| line.starts_with("calls "))
            .collect()
    }
}

/// `busy`'s untraced rate on this machine now.
fn untraced_rate(busy: &std::path::Path) -> f64 {
    let mut process = Command::new(busy)
        .arg("1.2")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let rate = Rates::of(&mut process).median(9);
    process.wait().unwrap();
    rate
}

/// Waits up to `limit` for `process` to end; how long it took, or `None` if it is still there.
fn ended_within(process: &mut Child, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if process.try_wait().unwrap().is_some() {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// `busy 5` recording under `utrace record`, with busy's untraced rate measured first.
struct BusyRecording {
    untraced: f64,
    recorder: Child,
    rates: Rates,
    data: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl BusyRecording {
    fn start() -> BusyRecording {
        let busy = compile("busy.c", "busy", &[]);
        let untraced = untraced_rate(&busy);
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("busy.data");
        // Where each probe goes on its own (before 6.6), a killed recorder takes seconds to go:
        // busy must outlast it and the second after.
        let seconds = match kernel_lacks("uprobe_multi") {
            false => "5",
            true => "30",
        };
        let mut recorder = utrace()
            .args(["record", "-o"])
            .arg(&data)
            .arg("--")
            .arg(&busy)
            .arg(seconds)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let rates = Rates::of(&mut recorder);
        BusyRecording {
            untraced,
            recorder,
            rates,
            data,
            _dir: dir,
        }
    }
}

/// The program slowed down while traced, and runs at its own speed again once the recorder has
/// gone: a second after `gone`, the median rate is back within [`own_speed`] of `untraced`.
fn assert_own_speed_again(rates: &mut Rates, untraced: f64, traced: f64) {
    assert!(
        traced < untraced / 2.0,
        "tracing did not slow busy down ({traced:.0} calls/s traced, {untraced:.0} untraced): \
         the test shows nothing"
    );
    // The rates busy wrote while the recorder went are not the ones after.
    rates.skip_written();
    rates.next(10);
    let after = rates.median(7);
    assert!(
        after >= untraced * own_speed(),
        "a second after the recorder went, busy ran at {after:.0} calls/s, against {untraced:.0} \
         untraced ({traced:.0} traced)"
    );
}

#[test]
fn killing_the_recorder_frees_the_program_at_once() {
    if !bpf_available("killing_the_recorder_frees_the_program_at_once") {
        return;
    }
    let _alone = measuring_alone();
    let BusyRecording {
        untraced,
        mut recorder,
        mut rates,
        data,
        _dir,
    } = BusyRecording::start();
    rates.next(3);
    let traced = rates.median(5);
    send_signal(recorder.id(), libc::SIGKILL);
    let took = ended_within(&mut recorder, recorder_exit_bound());
    assert!(
        took.is_some(),
        "the recorder was still there {:?} after kill -9",
        recorder_exit_bound()
    );
    assert_own_speed_again(&mut rates, untraced, traced);
    // The program goes on to its end, and the file reads up to its last chunk.
    assert!(rates.rest().contains(" tick\n"));
    let json = report_json(&data);
    assert!(calls_of(&json, "tick") > 0, "{json}");
}

#[test]
fn a_second_interrupt_ends_the_recording_at_once() {
    if !bpf_available("a_second_interrupt_ends_the_recording_at_once") {
        return;
    }
    let _alone = measuring_alone();
    let BusyRecording {
        untraced,
        mut recorder,
        mut rates,
        data,
        _dir,
    } = BusyRecording::start();
    // The first line comes 100 ms after the program started, which is when recording began.
    rates.next(1);
    let first_line = Instant::now();
    rates.next(2);
    let traced = rates.median(5);
    // The first goes to the command (which ignores it), the second stops the recording; in
    // between, once the command has run on for a second, utrace says so and how to stop.
    send_signal(recorder.id(), libc::SIGINT);
    std::thread::sleep(Duration::from_millis(1300));
    send_signal(recorder.id(), libc::SIGINT);
    let recorded = first_line.elapsed() + Duration::from_millis(100);
    let took = ended_within(&mut recorder, Duration::from_secs(1));
    assert!(
        took.is_some(),
        "the recorder was still there 1 s after the second SIGINT"
    );
    assert_eq!(recorder.wait().unwrap().code(), Some(130));
    assert_own_speed_again(&mut rates, untraced, traced);
    assert_duration_near(&data, recorded);
    // busy holds the recorder's stderr too: it reads to its end once busy has ended.
    assert!(rates.rest().contains(" tick\n"));
    let mut said = String::new();
    std::io::Read::read_to_string(&mut recorder.stderr.take().unwrap(), &mut said).unwrap();
    let hint = "sent SIGINT to busy (pid ";
    assert_eq!(said.matches(hint).count(), 1, "{said}");
    assert!(
        said.contains("; it runs on: press Ctrl-C again to stop recording"),
        "{said}"
    );
}

#[test]
fn a_duration_ends_an_attached_recording_on_time() {
    if !bpf_available("a_duration_ends_an_attached_recording_on_time") {
        return;
    }
    let _alone = measuring_alone();
    let busy = compile("busy.c", "busy", &[]);
    let untraced = untraced_rate(&busy);
    let mut program = Command::new(&busy)
        .arg("6")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut rates = Rates::of(&mut program);
    rates.next(2);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("duration.data");
    let recorder = AttachedRecorder::start(program.id(), &data, &["--duration", "1500ms"]);
    let attached = Instant::now();
    rates.skip_written();
    let traced = rates.median(5);
    recorder.finish();
    let took = attached.elapsed();
    assert!(
        took < Duration::from_millis(2500),
        "a 1.5 s recording ended after {took:?}"
    );
    assert_own_speed_again(&mut rates, untraced, traced);
    assert_duration_near(&data, Duration::from_millis(1500));
    assert!(rates.rest().contains(" tick\n"));
    assert!(program.wait().unwrap().success());
}

/// The recording's duration, as `utrace info` says, is within 10% of `real`.
fn assert_duration_near(data: &std::path::Path, real: Duration) {
    let info = utrace().arg("info").arg("-i").arg(data).output().unwrap();
    let text = String::from_utf8_lossy(&info.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("duration:"))
        .unwrap_or_else(|| panic!("no duration in {text}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let unit = match words.get(2) {
        Some(&"s") => 1.0,
        Some(&"ms") => 1e-3,
        _ => panic!("a recording of about a second, said as {line}"),
    };
    let seconds = words[1].parse::<f64>().unwrap() * unit;
    let real = real.as_secs_f64();
    assert!(
        (seconds - real).abs() <= real * 0.1,
        "info says the recording lasted {seconds} s, it lasted {real:.3} s"
    );
}
