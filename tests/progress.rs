//! The progress bars of long reports: drawn on a terminal (a pty from `script`), erased at the
//! end of each pass over the file, and absent when stderr is not a terminal.

mod common;

use std::path::Path;
use std::process::Command;

use utrace::data::{DataWriter, Metadata, Statistics};
use utrace::event::Event;
use utrace::table::{FunctionKind, FunctionTable, TracedFunction};

/// A recording of `calls` nested calls of three functions on one thread, written with the
/// library: long enough for a call-tree report to take well over the bar's first half second.
fn long_recording(path: &Path, calls: u64) {
    let metadata = Metadata {
        command: vec!["./long".into()],
        pid: 10,
        start_monotonic_ns: 0,
        start_realtime_ns: 0,
        hostname: "h".into(),
        kernel: "k".into(),
        utrace_version: "v".into(),
        probe_costs: None,
    };
    let table = FunctionTable {
        modules: vec!["/bin/long".into()],
        functions: ["outer", "middle", "inner"]
            .map(|name| TracedFunction {
                name: name.into(),
                module: 0,
                offset: 0,
                size: 1,
                kind: FunctionKind::Function,
                probes: Default::default(),
                values: Vec::new(),
                user_stack: false,
                argument_names: Vec::new(),
                source: None,
                detached: None,
            })
            .into(),
        ..Default::default()
    };
    let mut writer = DataWriter::create(path, &metadata, &table).unwrap();
    let mut batch = Vec::with_capacity(60_000);
    for call in 0..calls / 3 {
        let t = call * 100;
        let event = |at: u64, function: u32, exit: bool| {
            let event = if exit {
                Event::exit(t + at, 11, function)
            } else {
                Event::entry(t + at, 11, function)
            };
            event.at_stack(0x7ffe_0000 - 64 * function).in_process(10)
        };
        batch.extend([
            event(0, 0, false),
            event(10, 1, false),
            event(20, 2, false),
            event(30, 2, true),
            event(40, 1, true),
            event(50, 0, true),
        ]);
        if batch.len() >= 60_000 {
            writer.write_events(&batch).unwrap();
            batch.clear();
        }
    }
    writer.write_events(&batch).unwrap();
    writer.finish(&Statistics::default()).unwrap();
}

#[test]
fn long_reports_show_a_bar_on_a_terminal_only() {
    let dir = tempfile::TempDir::new().unwrap();
    let data = dir.path().join("long.data");
    long_recording(&data, 6_000_000);
    let report = format!(
        "{} report --format=replay -i {} -o /dev/null",
        env!("CARGO_BIN_EXE_utrace"),
        data.display()
    );

    // On a terminal: `script` gives utrace a pty and copies what it writes to its stdout.
    let output = Command::new("script")
        .args(["-qfec", &report, "/dev/null"])
        .output()
        .unwrap();
    common::assert_success(&output);
    let terminal = String::from_utf8_lossy(&output.stdout);
    assert!(terminal.contains("\rutrace: reading ["), "{terminal:?}");
    // Nothing but bars (of the first pass, which finds the threads, if it took long enough, and
    // of the report's), each pass's erased once at its end.
    for piece in terminal.split('\r').skip(1) {
        let bar = piece.starts_with("utrace: finding threads [")
            || piece.starts_with("utrace: reading [");
        assert!(
            piece.ends_with("\x1b[K") && (bar || piece == "\x1b[K"),
            "{terminal:?}"
        );
    }
    assert!(
        terminal.starts_with('\r') && terminal.ends_with("\r\x1b[K"),
        "{terminal:?}"
    );
    let passes = ["finding threads", "reading"]
        .into_iter()
        .filter(|label| terminal.contains(&format!("\rutrace: {label} [")))
        .count();
    assert_eq!(terminal.matches("\r\x1b[K").count(), passes, "{terminal:?}");

    // Not on a terminal: nothing at all.
    let output = Command::new("sh").args(["-c", &report]).output().unwrap();
    common::assert_success(&output);
    assert!(output.stderr.is_empty(), "{:?}", output.stderr);
}

/// The recorder's progress line stays off a terminal the traced program writes to, where the
/// program's lines would land in the middle of it; with the program's output elsewhere, it is
/// drawn.
#[test]
fn the_record_progress_line_never_garbles_the_programs_output() {
    if !common::bpf_available("the_record_progress_line_never_garbles_the_programs_output") {
        return;
    }
    let busy = common::compile("busy.c", "busy", &[]);
    let dir = tempfile::TempDir::new().unwrap();
    let record = |redirect: &str| {
        let command = format!(
            "{} record -o {} -- sh -c 'exec {} 2 {redirect}'",
            env!("CARGO_BIN_EXE_utrace"),
            dir.path().join("busy.data").display(),
            busy.display()
        );
        let output = Command::new("script")
            .args(["-qfec", &command, "/dev/null"])
            .output()
            .unwrap();
        common::assert_success(&output);
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    // busy prints a line every 100 ms for 2 s, on the terminal.
    let shared = record("");
    assert!(shared.contains("rate "), "{shared:?}");
    assert!(!shared.contains("events/s"), "{shared:?}");
    // The program's output goes to a file: the terminal is the line's.
    let apart = record(&format!("> {} 2>&1", dir.path().join("out").display()));
    assert!(apart.contains("events/s"), "{apart:?}");
}
