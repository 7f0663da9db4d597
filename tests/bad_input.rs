//! Bad input, in one table: every case fails with a non-zero exit and exactly one line on
//! stderr that names the file or flag and says what to do, never a panic. Then the inputs that
//! are damaged but still hold a recording: those report what they hold, with a warning.

mod common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use tempfile::TempDir;
use utrace::data::format::{self, ChunkHeader, ChunkKind, CHUNK_HEADER_LEN, FILE_HEADER_LEN};
use utrace::data::{DataWriter, Statistics};
use utrace::event::Event;

use common::*;

/// One bad input: utrace's arguments, and what its one line must say.
struct Case {
    name: &'static str,
    args: Vec<OsString>,
    expected: Vec<String>,
}

impl Case {
    fn new(name: &'static str, args: &[&dyn AsRef<std::ffi::OsStr>], expected: &[&str]) -> Case {
        Case {
            name,
            args: args.iter().map(|a| a.as_ref().to_owned()).collect(),
            expected: expected.iter().map(|e| e.to_string()).collect(),
        }
    }
}

/// A small but real recording, written by utrace's own writer, with the byte offsets where its
/// parts end.
struct Recording {
    bytes: Vec<u8>,
    /// End of the function table: a cut before it leaves nothing to report.
    table_end: usize,
    /// End of each events chunk.
    block_ends: Vec<usize>,
    /// Events in the whole recording.
    events: usize,
}

fn small_recording(dir: &Path) -> Recording {
    let path = dir.join("small.data");
    let metadata = written_metadata(&["./prog", "arg"]);
    let table = written_table(&["main", "work", "leaf"]);
    let mut writer = DataWriter::create(&path, &metadata, &table).unwrap();
    let table_end = writer.bytes_written() as usize;
    // main calls work three times, in three blocks; each work calls leaf.
    let mut block_ends = Vec::new();
    let mut events = 0;
    for block in 0..3u64 {
        let t = 10_000 + block * 1_000;
        let mut chunk = Vec::new();
        if block == 0 {
            chunk.push(Event::entry(t, 7, 0));
        }
        chunk.extend([
            Event::entry(t + 100, 7, 1),
            Event::entry(t + 200, 7, 2),
            Event::exit(t + 300, 7, 2),
            Event::exit(t + 400, 7, 1),
        ]);
        if block == 2 {
            chunk.push(Event::exit(t + 500, 7, 0));
        }
        writer.write_events(&chunk).unwrap();
        events += chunk.len();
        block_ends.push(writer.bytes_written() as usize);
    }
    writer
        .finish(&Statistics {
            events: events as u64,
            lost_events: 0,
            duration_ns: 5_000,
            lost_by_thread: Vec::new(),
        })
        .unwrap();
    Recording {
        bytes: std::fs::read(&path).unwrap(),
        table_end,
        block_ends,
        events,
    }
}

/// `bytes` with the chunk header at `offset` claiming `length` payload bytes.
fn with_chunk_length(bytes: &[u8], offset: usize, length: u32) -> Vec<u8> {
    let mut bytes = bytes.to_vec();
    bytes[offset + 4..offset + 8].copy_from_slice(&length.to_le_bytes());
    bytes
}

/// A file whose function table has a valid checksum but claims about 2^64 modules.
fn hostile_table(recording: &Recording) -> Vec<u8> {
    let metadata_end = FILE_HEADER_LEN
        + CHUNK_HEADER_LEN
        + u32::from_le_bytes(
            recording.bytes[FILE_HEADER_LEN + 4..FILE_HEADER_LEN + 8]
                .try_into()
                .unwrap(),
        ) as usize;
    // bincode's varint: 253 announces a u64 length.
    let payload = [253, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
    let mut bytes = recording.bytes[..metadata_end].to_vec();
    bytes.extend(ChunkHeader::for_payload(ChunkKind::FunctionTable, &payload).encode());
    bytes.extend(payload);
    bytes
}

/// `recording` with an events chunk (checksum right) that claims 2^20 events in front of its
/// first: what the decoder must refuse before it allocates for them.
fn hostile_events(recording: &Recording) -> Vec<u8> {
    let payload = [0x80, 0x80, 0x40, 0, 0];
    let mut bytes = recording.bytes[..recording.table_end].to_vec();
    bytes.extend(ChunkHeader::for_payload(ChunkKind::Events, &payload).encode());
    bytes.extend(payload);
    bytes.extend_from_slice(&recording.bytes[recording.table_end..]);
    bytes
}

/// Deterministic bytes (xorshift), so a failure can be replayed.
fn random_bytes(len: usize) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Programs `record` must refuse before anything runs.
fn program_cases(dir: &Path) -> Vec<Case> {
    let data = dir.join("utrace.data");
    let record = |program: &dyn AsRef<std::ffi::OsStr>| -> Vec<OsString> {
        vec![
            "record".into(),
            "-o".into(),
            data.clone().into(),
            "--".into(),
            program.as_ref().to_owned(),
        ]
    };
    let case = |name, args: Vec<OsString>, expected: &[&str]| Case {
        name,
        args,
        expected: expected.iter().map(|e| e.to_string()).collect(),
    };

    let script = write(dir, "script.sh", b"#!/bin/sh\necho hi\n");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let program = std::fs::read(compile("exitcode.c", "exitcode", &[])).unwrap();
    let executable = |name: &str, bytes: &[u8]| {
        let path = write(dir, name, bytes);
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        path
    };
    let mut aarch64 = program.clone();
    aarch64[18..20].copy_from_slice(&183u16.to_le_bytes()); // e_machine = EM_AARCH64
    let aarch64 = executable("aarch64", &aarch64);
    let mut elf32 = program.clone();
    elf32[4] = 1; // EI_CLASS = ELFCLASS32
    let elf32 = executable("elf32", &elf32);
    // Stripped, with no libc: no symbols and no PLT stubs (a stripped program with PLT stubs is
    // traced through them).
    let stripped = compile("bare.c", "bare", &["-nostdlib", "-static", "-s"]);

    vec![
        case(
            "missing binary",
            record(&"/no/such/program"),
            &["/no/such/program", "No such file", "give the path"],
        ),
        case(
            "not in PATH",
            record(&"no-such-program-utrace"),
            &[
                "no-such-program-utrace",
                "not found in PATH",
                "give its path",
            ],
        ),
        case(
            "a directory",
            record(&"/tmp"),
            &["/tmp", "is a directory", "give the path of an executable"],
        ),
        case(
            "a script, not ELF",
            record(&script),
            &["script.sh", "not an ELF file", "give the path"],
        ),
        case(
            "ELF for AArch64",
            record(&aarch64),
            &["aarch64", "AARCH64", "only 64-bit x86_64"],
        ),
        case(
            "32-bit ELF",
            record(&elf32),
            &["elf32", "32-bit", "only 64-bit x86_64"],
        ),
        case(
            "stripped binary with nothing to probe",
            record(&stripped),
            &[
                "bare",
                "no function symbols and no PLT stubs",
                "--debug-dir",
                "build with symbols",
            ],
        ),
        Case::new(
            "unbalanced quotes",
            &[&"record", &"-c", &"prog 'open"],
            &["cannot parse the command", "prog 'open"],
        ),
        Case::new(
            "empty command",
            &[&"record", &"-c", &" "],
            &["the command is empty"],
        ),
        Case::new(
            "no command",
            &[&"record"],
            &["--pid <PID>|COMMAND", "--help"],
        ),
        Case::new(
            "buffer size not a size",
            &[&"record", &"--buffer-size=lots", &"/bin/true"],
            &["--buffer-size", "lots", "like 16M"],
        ),
        Case::new(
            "buffer size zero",
            &[&"record", &"--buffer-size=0", &"/bin/true"],
            &["--buffer-size", "out of range"],
        ),
        Case::new(
            "buffer size too large",
            &[&"record", &"--buffer-size=4G", &"/bin/true"],
            &["--buffer-size", "too large", "at most 2G"],
        ),
        Case::new(
            "unknown flag",
            &[&"record", &"--frobnicate", &"/bin/true"],
            &["--frobnicate", "--help"],
        ),
        Case::new(
            "misspelled flag",
            &[&"record", &"--folow", &"--", &"/bin/true"],
            &[
                "unexpected argument '--folow' found; a similar argument exists: '--follow'",
                "--help",
            ],
        ),
        Case::new(
            "misspelled report flag",
            &[&"report", &"--formt=json"],
            &["'--formt'", "a similar argument exists: '--format'"],
        ),
        Case::new(
            "misspelled subcommand",
            &[&"reprot"],
            &["'reprot'", "a similar subcommand exists: 'report'"],
        ),
        Case::new(
            "bad library glob",
            &[&"record", &"--nest-lib", &"libc[", &"/bin/true"],
            &["--nest-lib", "libc[", "without a closing"],
        ),
        Case::new(
            "duration not a duration",
            &[&"record", &"--duration", &"soon", &"/bin/true"],
            &["--duration", "soon", "like 5 (seconds), 5s"],
        ),
        Case::new(
            "pid not a number",
            &[&"record", &"-p", &"init"],
            &["--pid", "init"],
        ),
        // Events and kernel functions (-E, -k): tests/kernel_events.rs.
        Case::new(
            "unknown event",
            &[
                &"record",
                &"-E",
                &"tracepoint:sched:sched_wakeup",
                &"/bin/true",
            ],
            &[
                "-E 'tracepoint:sched:sched_wakeup'",
                "unknown event",
                "usdt:PROVIDER:NAME",
            ],
        ),
        Case::new(
            "unknown system call",
            &[
                &"record",
                &"-E",
                &"tracepoint:syscalls:sys_enter_nosuch",
                &"/bin/true",
            ],
            &["sys_enter_nosuch", "no x86_64 system call matches"],
        ),
        Case::new(
            "bad event glob",
            &[&"record", &"-E", &"usdt:myapp:tick[", &"/bin/true"],
            &["-E 'usdt:myapp:tick['", "without a closing"],
        ),
        Case::new(
            "USDT probe that does not exist",
            &[&"record", &"-E", &"usdt:myapp:nope", &"/bin/true"],
            &[
                "-E 'usdt:myapp:nope'",
                "no USDT probe of",
                "true matches",
                "--list-usdt",
            ],
        ),
        Case::new(
            // What the kernel lacks for -k: tests/kernel_functions.rs.
            "kernel function depth",
            &[&"record", &"-K", &"0", &"-k", &"vfs_write", &"/bin/true"],
            &["-K 0", "counts from 1"],
        ),
        Case::new(
            "USDT listing of a missing file",
            &[&"info", &"--list-usdt", &"/no/such/program"],
            &["/no/such/program", "No such file"],
        ),
        Case::new(
            "unknown user",
            &[&"record", &"-u", &"no-such-user-utrace", &"/bin/true"],
            &["-u no-such-user-utrace", "no such user"],
        ),
    ]
    .into_iter()
    .chain(value_cases())
    .collect()
}

/// `-A`/`-R` values that do not parse: usage errors.
fn value_cases() -> Vec<Case> {
    let record = |flag: &'static str, value: &'static str| -> Vec<&'static str> {
        vec!["record", flag, value, "/bin/true"]
    };
    let cases: [(&str, Vec<&str>, &[&str]); 8] = [
        (
            "argument without items",
            record("-A", "add"),
            &["-A 'add'", "expected FUNCTION@ITEM"],
        ),
        (
            "argument 0",
            record("-A", "add@arg0"),
            &["-A 'add@arg0'", "from 1 to 63"],
        ),
        (
            "argument beyond what can be read",
            record("-A", "add@arg64"),
            &["-A 'add@arg64'", "from 1 to 63"],
        ),
        (
            "unknown format letter",
            record("-A", "add@arg1/q"),
            &["-A 'add@arg1/q'", "unknown format `q`"],
        ),
        (
            "floating-point argument",
            record("-A", "half@fparg1"),
            &["-A 'half@fparg1'", "vector registers"],
        ),
        (
            "return value as an argument",
            record("-A", "add@retval"),
            &["-A 'add@retval'", "use it with -R/--retval"],
        ),
        (
            "argument as a return value",
            record("-R", "add@arg2"),
            &["-R 'add@arg2'", "use it with -A/--argument"],
        ),
        (
            "string size zero",
            vec![
                "record",
                "-A",
                "f@arg1/s",
                "--string-size",
                "0",
                "/bin/true",
            ],
            &["--string-size 0", "from 1 to 500"],
        ),
    ];
    cases
        .into_iter()
        .map(|(name, args, expected)| Case {
            name,
            args: args.into_iter().map(OsString::from).collect(),
            expected: expected.iter().map(|e| e.to_string()).collect(),
        })
        .collect()
}

/// Data files `report` must refuse, and report flags it must refuse.
fn report_cases(dir: &Path) -> Vec<Case> {
    let recording = small_recording(dir);
    let report = |name: &str, bytes: &[u8]| -> Vec<OsString> {
        vec!["report".into(), "-i".into(), write(dir, name, bytes).into()]
    };
    // Damage after the function table fails only under --strict (see tests/damage.rs).
    let strict = |name: &str, bytes: &[u8]| -> Vec<OsString> {
        let mut args = report(name, bytes);
        args.push("--strict".into());
        args
    };
    let case = |name, args: Vec<OsString>, expected: &[&str]| Case {
        name,
        args,
        expected: expected.iter().map(|e| e.to_string()).collect(),
    };
    let first_chunk = FILE_HEADER_LEN;
    let first_events = recording.table_end;
    let mut version = recording.bytes.clone();
    version[8..12].copy_from_slice(&(utrace::data::format::VERSION + 1).to_le_bytes());
    let mut flipped = recording.bytes.clone();
    flipped[recording.block_ends[0] + CHUNK_HEADER_LEN + 3] ^= 0x40;
    std::fs::create_dir(dir.join("directory.data")).unwrap();

    let mut cases = vec![
        Case::new(
            "missing data file",
            &[&"report", &"-i", &dir.join("missing.data")],
            &["missing.data", "no such file", "utrace record"],
        ),
        Case::new(
            "a directory as data file",
            &[&"report", &"-i", &dir.join("directory.data")],
            &["directory.data", "directory"],
        ),
        case(
            "zero-length data file",
            report("empty.data", b""),
            &["empty.data", "nothing was recorded", "record again"],
        ),
        case(
            "random bytes",
            report("random.data", &random_bytes(4096)),
            &["random.data", "not a utrace.data file", "utrace record"],
        ),
        case(
            "text",
            report("text.data", "not a trace\n".repeat(10).as_bytes()),
            &["text.data", "not a utrace.data file"],
        ),
        case(
            "wrong version",
            report("version.data", &version),
            &[
                "version.data",
                &format!("format version {}", utrace::data::format::VERSION + 1),
                "the utrace that recorded it",
            ],
        ),
        case(
            "first chunk claims 4 GiB",
            report(
                "hostile-metadata.data",
                &with_chunk_length(&recording.bytes, first_chunk, u32::MAX),
            ),
            &[
                "hostile-metadata.data",
                "corrupt chunk at byte 16",
                "more than",
            ],
        ),
        case(
            "events chunk claims 4 GiB, --strict",
            strict(
                "hostile-events.data",
                &with_chunk_length(&recording.bytes, first_events, u32::MAX),
            ),
            &["hostile-events.data", "corrupt chunk", "more than"],
        ),
        case(
            "function table claims 2^63 modules",
            report("hostile-table.data", &hostile_table(&recording)),
            &["hostile-table.data", "function table does not decode"],
        ),
        case(
            "events chunk claims a million events, --strict",
            strict("hostile-count.data", &hostile_events(&recording)),
            &[
                "hostile-count.data",
                "the events do not decode",
                "more events than a chunk may hold",
            ],
        ),
        case(
            "flipped bit in an events chunk, --strict",
            strict("flipped.data", &flipped),
            &["flipped.data", "checksum mismatch"],
        ),
        Case::new(
            "unknown format",
            &[&"report", &"--format=pie-chart"],
            &["--format", "pie-chart", "use one of summary"],
        ),
    ];
    let data = write(dir, "good.data", &recording.bytes);
    for (name, flag, value, expected) in [
        (
            "bad function glob",
            "--function",
            "fib[",
            "without a closing",
        ),
        ("bad excluded glob", "--no-function", "a\\", "at the end"),
        (
            "bad time filter",
            "--time-filter",
            "quick",
            "not a duration",
        ),
        ("zero depth", "--max-depth", "0", "use 1 or more"),
    ] {
        cases.push(Case::new(
            name,
            &[&"report", &"-i", &data, &flag, &value],
            &[flag, expected],
        ));
    }
    cases.push(Case::new(
        "unwritable report output",
        &[
            &"report",
            &"-i",
            &data,
            &"-o",
            &"/nonexistent/dir/report.txt",
        ],
        &["/nonexistent/dir/report.txt", "No such file"],
    ));
    // A cut anywhere before the end of the function table leaves nothing to report.
    for cut in [
        1,
        FILE_HEADER_LEN - 1,
        FILE_HEADER_LEN,
        FILE_HEADER_LEN + 5,
        recording.table_end - 1,
    ] {
        cases.push(case(
            "cut before the function table",
            report(&format!("cut-{cut}.data"), &recording.bytes[..cut]),
            &["ends before its function table", "record again"],
        ));
    }
    cases
}

#[test]
fn bad_value_specs_are_usage_errors_and_run_nothing() {
    let dir = TempDir::new().unwrap();
    let ran = dir.path().join("ran");
    for case in value_cases() {
        let mut args = case.args.clone();
        // The command, were it run, would leave a file.
        args.pop();
        args.extend(["touch".into(), ran.clone().into()]);
        let output = utrace().args(&args).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{}", case.name);
        assert!(!ran.exists(), "{}: the command ran", case.name);
    }
}

#[test]
fn bad_input_fails_with_one_clear_line() {
    let dir = TempDir::new().unwrap();
    let mut cases = program_cases(dir.path());
    cases.extend(report_cases(dir.path()));
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            let output = utrace().args(&case.args).output().unwrap();
            let expected: Vec<&str> = case.expected.iter().map(String::as_str).collect();
            unclear_failure(&output, &expected)
                .map(|problem| format!("{} ({:?}): {problem}", case.name, case.args))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// An output that cannot be written stops utrace before the command has run at all, and without
/// root too: the file is created before any BPF is loaded.
#[test]
fn unwritable_output_fails_before_the_command_runs() {
    let dir = TempDir::new().unwrap();
    let marker = dir.path().join("ran");
    let program = compile("loop.c", "loop", &[]);
    let output = utrace()
        .args(["record", "-o", "/nonexistent/dir/x.data", "--"])
        .arg(&program)
        .arg("0")
        .arg(format!("--marker={}", marker.display()))
        .output()
        .unwrap();
    assert_clear_failure(&output, &["/nonexistent/dir/x.data", "-o FILE"]);
    assert!(
        !marker.exists(),
        "the command ran although nothing could be recorded"
    );
}

#[test]
fn recording_without_bpf_permission_says_what_is_missing() {
    if !bpf_available("recording_without_bpf_permission_says_what_is_missing") {
        return;
    }
    // Run utrace as nobody, with no capabilities: loading BPF must fail with a clear message.
    let dir = TempDir::new().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let copy = dir.path().join("loop");
    std::fs::copy(compile("loop.c", "loop", &[]), &copy).unwrap();
    let marker = dir.path().join("ran");
    let output = utrace_as_nobody()
        .arg("record")
        .arg("-o")
        .arg(dir.path().join("utrace.data"))
        .arg(&copy)
        .arg("0")
        .arg(format!("--marker={}", marker.display()))
        .output()
        .unwrap();
    assert_clear_failure(&output, &["CAP_BPF and CAP_PERFMON missing", "run as root"]);
    assert!(
        !dir.path().join("utrace.data").exists(),
        "nothing is written when nothing can be recorded"
    );
    assert!(
        !marker.exists(),
        "the command ran although nothing could be recorded"
    );
}

/// A file cut anywhere after its function table still reports every whole events chunk before
/// the cut, and says on one line that it was cut short.
#[test]
fn a_cut_after_the_function_table_reports_what_is_left_with_a_warning() {
    let dir = TempDir::new().unwrap();
    let recording = small_recording(dir.path());
    let ends = &recording.block_ends;
    // (cut, whole events chunks before it)
    let cuts = [
        (recording.table_end, 0),
        (recording.table_end + 3, 0),
        (recording.table_end + CHUNK_HEADER_LEN + 20, 0),
        (ends[0], 1),
        (ends[1] - 1, 1),
        (ends[1] + 5, 2),
        (ends[2], 3),
        (recording.bytes.len() - 1, 3),
    ];
    for (cut, chunks) in cuts {
        let path = write(
            dir.path(),
            &format!("cut-{cut}.data"),
            &recording.bytes[..cut],
        );
        let output = report_output(&path, &["--format=json"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "cut at {cut}: {stderr}");
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "cut at {cut}: {stderr}"
        );
        assert!(
            stderr.contains("cut short") && stderr.contains(&format!("cut-{cut}.data")),
            "cut at {cut}: {stderr}"
        );
        let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        // work and leaf are called once per block; main only opens in the first.
        assert_eq!(calls_of(&json, "work"), chunks, "cut at {cut}: {json}");
    }
    // Uncut, it is complete: no warning.
    let path = write(dir.path(), "whole.data", &recording.bytes);
    let output = report_output(&path, &["--format=json"]);
    assert!(output.status.success() && output.stderr.is_empty());
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["events"], recording.events as u64);
}

/// Every way `report` and `info` can fail on their data file names it once: never
/// `nf.data: nf.data: no such file`.
#[test]
fn errors_name_the_data_file_once() {
    let dir = TempDir::new().unwrap();
    let recording = small_recording(dir.path());
    std::fs::create_dir(dir.path().join("folder.data")).unwrap();
    let mut metadata = recording.bytes.clone();
    metadata[FILE_HEADER_LEN + CHUNK_HEADER_LEN + 2] ^= 1;
    let mut table = recording.bytes.clone();
    table[recording.table_end - 2] ^= 1;
    let mut events = recording.bytes.clone();
    events[recording.block_ends[1] - 2] ^= 1;
    let files = [
        ("missing.data", None),
        ("folder.data", None),
        ("text.data", Some(b"not a trace\n".to_vec())),
        (
            "header.data",
            Some(recording.bytes[..FILE_HEADER_LEN - 3].to_vec()),
        ),
        ("metadata.data", Some(metadata)),
        ("table.data", Some(table)),
        ("events.data", Some(events)),
    ];
    let mut problems = Vec::new();
    for (name, bytes) in files {
        let path = match bytes {
            Some(bytes) => write(dir.path(), name, &bytes),
            None => dir.path().join(name),
        };
        for command in ["report", "info"] {
            let output = utrace()
                .args([command, "--strict", "-i"])
                .arg(&path)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            if let Some(problem) = unclear_failure(&output, &[name]) {
                problems.push(format!("{command} {name}: {problem}"));
            } else if stderr.matches(name).count() != 1 {
                problems.push(format!("{command} {name}: named more than once: {stderr}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A report that fails leaves no file behind (nor a temporary one), and an older report of the
/// same name as it was; one that succeeds is there whole.
#[test]
fn a_failed_report_leaves_no_file() {
    let dir = TempDir::new().unwrap();
    let recording = small_recording(dir.path());
    let data = write(dir.path(), "small.data", &recording.bytes);
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let files = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };

    // Nothing to draw: no call is shown.
    let idle = out.join("idle.svg");
    let output = utrace()
        .args(["report", "--format=svg", "-f", "nothing*", "-i"])
        .arg(&data)
        .arg("-o")
        .arg(&idle)
        .output()
        .unwrap();
    assert_clear_failure(&output, &["nothing to draw"]);
    assert_eq!(files(), Vec::<String>::new());

    // A damaged file under --strict, over an older report: that one stays.
    let mut flipped = recording.bytes.clone();
    flipped[recording.block_ends[0] + CHUNK_HEADER_LEN + 3] ^= 0x40;
    let flipped = write(dir.path(), "flipped.data", &flipped);
    let report = out.join("report.txt");
    std::fs::write(&report, "an older report\n").unwrap();
    let output = utrace()
        .args(["report", "--strict", "-i"])
        .arg(&flipped)
        .arg("-o")
        .arg(&report)
        .output()
        .unwrap();
    assert_clear_failure(&output, &["flipped.data", "checksum mismatch"]);
    assert_eq!(files(), ["report.txt"]);
    assert_eq!(
        std::fs::read_to_string(&report).unwrap(),
        "an older report\n"
    );

    // A report that succeeds replaces it.
    let output = utrace()
        .arg("report")
        .arg("-i")
        .arg(&data)
        .arg("-o")
        .arg(&report)
        .output()
        .unwrap();
    assert_success(&output);
    assert_eq!(files(), ["report.txt"]);
    assert!(std::fs::read_to_string(&report).unwrap().contains("work"));
}

/// The layout this file patches is the one the format module documents.
#[test]
fn the_patched_offsets_match_the_format() {
    let dir = TempDir::new().unwrap();
    let recording = small_recording(dir.path());
    let header: [u8; FILE_HEADER_LEN] = recording.bytes[..FILE_HEADER_LEN].try_into().unwrap();
    assert_eq!(format::file_header_version(&header), Some(format::VERSION));
    let chunk: [u8; CHUNK_HEADER_LEN] = recording.bytes
        [recording.table_end..recording.table_end + CHUNK_HEADER_LEN]
        .try_into()
        .unwrap();
    assert_eq!(
        ChunkHeader::decode(&chunk, format::VERSION).unwrap().kind,
        ChunkKind::Events
    );
}

/// A process's files are opened through `/proc/PID/map_files`, but messages name them by their
/// path, once.
#[test]
fn errors_about_a_running_process_name_its_program() {
    if !bpf_available("errors_about_a_running_process_name_its_program") {
        return;
    }
    let stripped = compile(
        "bare.c",
        "bare_spin",
        &["-nostdlib", "-static", "-s", "-DSPIN"],
    );
    let mut running = std::process::Command::new(&stripped).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let dir = TempDir::new().unwrap();
    let output = utrace()
        .args(["record", "-o"])
        .arg(dir.path().join("bare.data"))
        .args(["-p", &running.id().to_string()])
        .output()
        .unwrap();
    running.kill().unwrap();
    running.wait().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    let path = stripped.display().to_string();
    assert_eq!(stderr.matches(&path).count(), 1, "{stderr}");
    assert!(!stderr.contains("/proc/"), "{stderr}");
    assert!(
        stderr.contains("no function symbols and no PLT stubs"),
        "{stderr}"
    );
}
