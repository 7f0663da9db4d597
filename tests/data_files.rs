//! Data files that are damaged, joined or empty, end to end: a damaged chunk costs its own events
//! and nothing else, with one warning that says where and how many; `--strict` fails instead; two
//! files joined are read up to the second, with a warning; a report with no call says why.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tempfile::TempDir;
use utrace::data::format::CHUNK_HEADER_LEN;
use utrace::data::{DataReader, DataWriter, Statistics};
use utrace::event::Event;

use common::*;

/// Calls of `work` in each events chunk of [`chunked_recording`].
const WORK_PER_CHUNK: u64 = 1000;
const CHUNKS: usize = 5;

/// A recording written by utrace's writer, in [`CHUNKS`] events chunks: `main` opens in the first
/// and closes in the last; chunk k holds one call of `chunk{k}` and [`WORK_PER_CHUNK`] calls of
/// `work`. Returns the file and where each events chunk starts and ends.
fn chunked_recording(dir: &Path) -> (PathBuf, Vec<(usize, usize)>) {
    written_recording(dir, CHUNKS)
}

/// [`chunked_recording`] of `chunks` chunks (none: a recording without events).
fn written_recording(dir: &Path, count: usize) -> (PathBuf, Vec<(usize, usize)>) {
    let path = dir.join("chunks.data");
    let markers: Vec<String> = (0..count).map(|k| format!("chunk{k}")).collect();
    let mut names = vec!["main", "work"];
    names.extend(markers.iter().map(String::as_str));
    let table = written_table(&names);
    let metadata = written_metadata(&["./prog"]);
    let mut writer = DataWriter::create(&path, &metadata, &table).unwrap();
    let mut chunks = Vec::new();
    let mut t = 10_000;
    let mut tick = || {
        t += 10;
        t
    };
    for k in 0..count {
        let mut events = Vec::new();
        if k == 0 {
            events.push(Event::entry(tick(), 7, 0));
        }
        let marker = 2 + k as u32;
        events.push(Event::entry(tick(), 7, marker));
        events.push(Event::exit(tick(), 7, marker));
        for _ in 0..WORK_PER_CHUNK {
            events.push(Event::entry(tick(), 7, 1));
            events.push(Event::exit(tick(), 7, 1));
        }
        if k == count - 1 {
            events.push(Event::exit(tick(), 7, 0));
        }
        let start = writer.bytes_written() as usize;
        writer.write_events(&events).unwrap();
        chunks.push((start, writer.bytes_written() as usize));
    }
    let events = writer.events_written();
    writer
        .finish(&Statistics {
            events,
            lost_events: 0,
            duration_ns: 1_000_000,
            lost_by_thread: Vec::new(),
        })
        .unwrap();
    (path, chunks)
}

/// `path`'s bytes with one byte flipped at `at`, written beside it as `name`.
fn flipped(path: &Path, at: usize, name: &str) -> PathBuf {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0x10;
    let damaged = path.with_file_name(name);
    std::fs::write(&damaged, bytes).unwrap();
    damaged
}

/// The JSON report of `data` and its warnings, asserting it succeeded.
fn json_and_warnings(data: &Path) -> (serde_json::Value, Vec<String>) {
    let (json, stderr) = report_json_and_stderr(data);
    (json, stderr.lines().map(str::to_owned).collect())
}

#[test]
fn a_flipped_byte_loses_only_its_chunk() {
    let dir = TempDir::new().unwrap();
    let (path, chunks) = chunked_recording(dir.path());
    let (start, end) = chunks[2];
    let damaged = flipped(&path, (start + CHUNK_HEADER_LEN + end) / 2, "flipped.data");

    let (json, warnings) = json_and_warnings(&damaged);
    let events_per_chunk = 2 + 2 * WORK_PER_CHUNK;
    assert_eq!(
        warnings,
        [format!(
            "utrace: warning: {}: damaged events chunk at byte {start} skipped (checksum \
             mismatch; read on at byte {end}): {events_per_chunk} events lost",
            damaged.display()
        )]
    );
    let counts = counts_of(&json);
    let expected: BTreeMap<String, u64> = [
        ("main", 1),
        ("work", WORK_PER_CHUNK * (CHUNKS as u64 - 1)),
        ("chunk0", 1),
        ("chunk1", 1),
        ("chunk3", 1),
        ("chunk4", 1),
    ]
    .into_iter()
    .map(|(name, calls)| (name.to_string(), calls))
    .collect();
    assert_eq!(counts, expected);
    // The totals leave the lost events out, and say a chunk was damaged.
    let recorded = 2 + CHUNKS as u64 * events_per_chunk;
    assert_eq!(json["events"], recorded - events_per_chunk);
    assert_eq!(json["damaged_chunks"], 1);

    // The summary too, and every other format, with the same one warning.
    for format in ["summary", "replay", "flame-graph", "chrome", "svg"] {
        let output = report_output(&damaged, &[&format!("--format={format}")]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{format}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{format}: {stderr}");
        assert!(stderr.contains("events lost"), "{format}: {stderr}");
    }

    // --strict fails, on one line that names the file and the damage.
    let output = report_output(&damaged, &["--strict"]);
    assert_clear_failure(
        &output,
        &[
            "flipped.data",
            &format!("corrupt chunk at byte {start} (checksum mismatch)"),
        ],
    );
    assert!(output.stdout.is_empty());
}

#[test]
fn a_damaged_chunk_header_is_skipped_by_scanning() {
    let dir = TempDir::new().unwrap();
    let (path, chunks) = chunked_recording(dir.path());
    // The length of the fourth events chunk: where it ends is lost with it.
    let (start, end) = chunks[3];
    let damaged = flipped(&path, start + 5, "header.data");
    let (json, warnings) = json_and_warnings(&damaged);
    assert_eq!(
        warnings,
        [format!(
            "utrace: warning: {}: damaged chunk at byte {start} skipped (its header is damaged; \
             read on at byte {end}): an unknown number of events lost",
            damaged.display()
        )]
    );
    assert_eq!(
        calls_of(&json, "work"),
        WORK_PER_CHUNK * (CHUNKS as u64 - 1)
    );
    assert_eq!(calls_of(&json, "chunk3"), 0);
    assert_eq!(calls_of(&json, "chunk4"), 1);
    assert_eq!(calls_of(&json, "main"), 1);
}

#[test]
fn info_says_what_was_damaged() {
    let dir = TempDir::new().unwrap();
    let (path, chunks) = chunked_recording(dir.path());
    let (start, end) = chunks[1];
    let damaged = flipped(&path, end - 1, "info.data");
    let output = utrace()
        .arg("info")
        .arg("-i")
        .arg(&damaged)
        .output()
        .unwrap();
    assert_success(&output);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stdout.contains("\ndamaged:     1 chunk skipped, 2002 events lost\n"),
        "{stdout}"
    );
    assert!(stdout.contains("\ncomplete:    yes\n"), "{stdout}");
    assert!(
        stderr.contains(&format!("damaged events chunk at byte {start} skipped")),
        "{stderr}"
    );
    let strict = utrace()
        .args(["info", "--strict", "-i"])
        .arg(&damaged)
        .output()
        .unwrap();
    assert_clear_failure(&strict, &["info.data", "checksum mismatch"]);
}

#[test]
fn joined_files_warn_and_report_the_first() {
    let dir = TempDir::new().unwrap();
    let (path, _) = chunked_recording(dir.path());
    let single = std::fs::read(&path).unwrap();
    let joined = dir.path().join("joined.data");
    std::fs::write(&joined, [&single[..], &single[..]].concat()).unwrap();

    let (json, warnings) = json_and_warnings(&joined);
    let second = single.len();
    assert_eq!(
        warnings,
        [format!(
            "utrace: warning: {path}: a second recording starts at byte {second} (two files \
             joined?): only the first is read; `tail -c +{} {path}` gives the second",
            second + 1,
            path = joined.display()
        )]
    );
    assert_eq!(json, report_json(&path));

    let output = report_output(&joined, &["--strict"]);
    assert_clear_failure(
        &output,
        &[
            "joined.data",
            &format!("a second recording starts at byte {second}"),
        ],
    );
    let info = utrace()
        .arg("info")
        .arg("-i")
        .arg(&joined)
        .output()
        .unwrap();
    assert_success(&info);
    assert!(String::from_utf8_lossy(&info.stdout).contains(&format!(
        "\njoined:      a second recording starts at byte {second} (not read)\n"
    )));
}

/// A real recording of many chunks with one byte flipped in the middle: every call whose entry
/// was in another chunk is reported, exactly.
#[test]
fn a_recording_with_a_flipped_byte_reports_every_other_chunk() {
    if !bpf_available("a_recording_with_a_flipped_byte_reports_every_other_chunk") {
        return;
    }
    let sort = compile("sort.c", "sort", &[]);
    let recording = record_unchanged(&sort, &["20000"], &[]);
    let data = recording.data();
    let whole = report_json(&data);

    // The events chunks: where each one ends, and its events.
    let mut reader = DataReader::open(&data).unwrap();
    let names: Vec<String> = reader
        .functions()
        .functions
        .iter()
        .map(|f| f.name.clone())
        .collect();
    let mut blocks = Vec::new();
    let mut start = reader.bytes_read();
    while let Some(block) = reader.next_events().unwrap() {
        let events = block.to_vec();
        blocks.push((start, reader.bytes_read(), events));
        start = reader.bytes_read();
    }
    assert!(blocks.len() >= 3, "only {} events chunks", blocks.len());
    let (start, end, lost) = &blocks[blocks.len() / 2];
    let at = ((start + CHUNK_HEADER_LEN as u64 + end) / 2) as usize;
    let damaged = flipped(&data, at, "flipped.data");

    let (json, warnings) = json_and_warnings(&damaged);
    assert_eq!(
        warnings,
        [format!(
            "utrace: warning: {}: damaged events chunk at byte {start} skipped (checksum \
             mismatch; read on at byte {end}): {} events lost",
            damaged.display(),
            lost.len()
        )]
    );
    // The calls that entered in the lost chunk are missing; every other one is there.
    let mut expected = counts_of(&whole);
    for event in lost.iter().filter(|event| !event.is_exit()) {
        let name = &names[event.function_id() as usize];
        // The time preempted is no call.
        if name == utrace::table::PREEMPTION_FUNCTION {
            continue;
        }
        *expected.get_mut(name).unwrap() -= 1;
    }
    expected.retain(|_, calls| *calls > 0);
    assert_eq!(counts_of(&json), expected);
    assert_eq!(
        json["events"].as_u64().unwrap(),
        whole["events"].as_u64().unwrap() - lost.len() as u64
    );

    let output = report_output(&damaged, &["--strict", "--format=json"]);
    assert_clear_failure(&output, &["flipped.data", "checksum mismatch"]);
}

/// `utrace report` of `data` with `args`, which must succeed: its standard output, and its
/// standard error's lines.
fn report_and_warnings(data: &Path, args: &[&str]) -> (String, Vec<String>) {
    let output = report_output(data, args);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{args:?}: {stderr}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    (stdout, stderr.lines().map(str::to_owned).collect())
}

/// A report that shows no call says why, in one warning, instead of printing a bare header; the
/// exit code stays 0.
#[test]
fn a_report_without_calls_says_why() {
    let dir = TempDir::new().unwrap();
    let (empty, _) = written_recording(dir.path(), 0);
    let (stdout, warnings) = report_and_warnings(&empty, &[]);
    assert_eq!(stdout, "");
    assert_eq!(
        warnings,
        [format!(
            "utrace: warning: no calls were recorded: {} holds no events: its traced functions \
             (main, work) never ran: the program exited before its first traced call, or the \
             record-time filter kept only functions it did not call",
            empty.display()
        )]
    );
    // The call tree has no header either; JSON stays JSON.
    let (stdout, warnings) = report_and_warnings(&empty, &["--format=replay"]);
    assert_eq!((stdout.as_str(), warnings.len()), ("", 1));
    let (stdout, warnings) = report_and_warnings(&empty, &["--format=json"]);
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (json["functions"].clone(), warnings.len()),
        (serde_json::json!([]), 1)
    );

    // A filter at report time that matches nothing.
    let (path, _) = chunked_recording(dir.path());
    let (stdout, warnings) = report_and_warnings(&path, &["-f", "nothing*,nor*"]);
    assert_eq!(stdout, "");
    assert_eq!(
        warnings,
        [format!(
            "utrace: warning: no calls were recorded: the report's -f 'nothing*,nor*' matches \
             none of the {} functions traced in {}",
            2 + CHUNKS,
            path.display()
        )]
    );
    let (stdout, warnings) = report_and_warnings(&path, &["--tid-filter", "8"]);
    assert_eq!(stdout, "");
    assert!(warnings[0].contains("the report's filters (--tid-filter 8) hide every call"));
}

/// A real program that exits before its first traced call.
#[test]
fn a_recording_of_no_call_says_why() {
    if !bpf_available("a_recording_of_no_call_says_why") {
        return;
    }
    let program = compile("loop.c", "loop", &[]);
    // For 0 seconds, loop calls tick no time at all.
    let recording = record(&program, &["0"], &["-f", "tick"]);
    assert_success(&recording.output);
    let (stdout, warnings) = report_and_warnings(&recording.data(), &[]);
    assert_eq!(stdout, "");
    assert_eq!(
        warnings,
        [format!(
            "utrace: warning: no calls were recorded: {} holds no events: its one traced \
             function, tick, never ran: the program exited before its first traced call, or the \
             record-time filter kept only functions it did not call",
            recording.data().display()
        )]
    );
}
