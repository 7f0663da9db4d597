//! Golden reports: recorded event streams (`tests/data/golden/NAME.data`, made by
//! `tools/record-goldens.sh`) beside the exact output of every report format on them, compared
//! line by line. `UTRACE_BLESS=1 cargo test --release --test golden` writes the outputs instead:
//! look at what changed before committing them.
//!
//! Each stream also has `NAME.counts`: the calls the traced program counted of itself while it
//! was recorded, which the JSON report must give exactly, so the expected outputs are held to
//! the program and not only to what utrace printed once.
//!
//! No BPF and no root: the streams are files. Nothing in a report depends on the machine or the
//! time it runs at (times and dates come from the file), so nothing is masked.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;

/// One report on a stream: the name of the file of its expected output, `NAME.<suffix>`, and
/// the utrace arguments (before `-i FILE`).
struct Report {
    suffix: &'static str,
    args: &'static [&'static str],
}

const fn report(suffix: &'static str, args: &'static [&'static str]) -> Report {
    Report { suffix, args }
}

/// Every format, with its defaults, on every stream.
const FORMATS: &[Report] = &[
    report("summary.txt", &["report", "--format=summary"]),
    report("json", &["report", "--format=json"]),
    report("replay.txt", &["report", "--format=replay"]),
    report("folded", &["report", "--format=flame-graph"]),
    report("chrome.json", &["report", "--format=chrome"]),
    report("info.txt", &["info"]),
];

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden")
}

fn blessing() -> bool {
    std::env::var("UTRACE_BLESS").is_ok_and(|v| v == "1")
}

/// Runs each report on the stream `name` and compares its output with the expected one (or,
/// when blessing, writes it); fails with every report that differs.
fn check_reports(name: &str, variants: &[Report]) {
    let data = golden_dir().join(format!("{name}.data"));
    let differences: Vec<String> = FORMATS
        .iter()
        .chain(variants)
        .filter_map(|report| {
            let expected = golden_dir().join(format!("{name}.{}", report.suffix));
            let actual = run_report(report.args, &data);
            if blessing() {
                std::fs::write(&expected, &actual).unwrap();
                return None;
            }
            let wanted = std::fs::read_to_string(&expected).unwrap_or_else(|e| {
                panic!("{}: {e} (UTRACE_BLESS=1 writes it)", expected.display())
            });
            first_difference(&wanted, &actual).map(|difference| {
                format!(
                    "utrace {} -i {}: {difference} ({})",
                    report.args.join(" "),
                    data.display(),
                    expected.display()
                )
            })
        })
        .collect();
    assert!(
        differences.is_empty(),
        "{} report(s) differ from the expected output (UTRACE_BLESS=1 rewrites it):\n{}",
        differences.len(),
        differences.join("\n")
    );
}

/// The output of `utrace ARGS -i data`, which must succeed and say nothing on stderr.
fn run_report(args: &[&str], data: &Path) -> String {
    let output = utrace().args(args).arg("-i").arg(data).output().unwrap();
    assert_success(&output);
    assert!(
        output.stderr.is_empty(),
        "utrace {args:?} said: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("a report is UTF-8")
}

/// The first line where `actual` differs from `expected`, with its number, if any.
fn first_difference(expected: &str, actual: &str) -> Option<String> {
    let mut expected_lines = expected.lines();
    let mut actual_lines = actual.lines();
    for number in 1.. {
        match (expected_lines.next(), actual_lines.next()) {
            (None, None) => break,
            (Some(e), Some(a)) if e == a => continue,
            (e, a) => {
                let show =
                    |line: Option<&str>| line.map_or("(the end)".into(), |l| format!("{l:?}"));
                return Some(format!(
                    "line {number}: expected {}, got {}",
                    show(e),
                    show(a)
                ));
            }
        }
    }
    // The same lines; a missing or extra newline at the very end is a difference too.
    (expected.ends_with('\n') != actual.ends_with('\n'))
        .then(|| "the same lines, but not the same newline at the end".to_string())
}

/// The counts of `NAME.counts` by process role: `parent` for the `parent calls …` lines, `child`
/// for `child calls …` and for the plain `calls …` lines of a stream with a parent (the program
/// its child execs printed them), `""` in a stream of one process.
fn recorded_counts(name: &str) -> BTreeMap<&'static str, BTreeMap<String, u64>> {
    let text = std::fs::read(golden_dir().join(format!("{name}.counts"))).unwrap();
    let plain = own_counts(&text);
    let parent = role_counts(&text, "parent");
    if parent.is_empty() {
        return BTreeMap::from([("", plain)]);
    }
    let mut child = role_counts(&text, "child");
    child.extend(plain);
    BTreeMap::from([("parent", parent), ("child", child)])
}

/// Asserts that the JSON report of the stream `name` counts every call its program counted, in
/// the process that made it.
fn check_counts(name: &str) {
    let json = report_json(&golden_dir().join(format!("{name}.data")));
    let expected = recorded_counts(name);
    if expected.len() == 1 {
        assert_counts_match(&expected[""], &counts_of(&json));
        return;
    }
    let target = json["pid"].as_u64().unwrap();
    let processes = counts_by_pid(&json);
    assert_eq!(processes.len(), 2, "expected two processes: {processes:?}");
    for (pid, counts) in &processes {
        let role = if *pid == target { "parent" } else { "child" };
        assert_counts_match(&expected[role], counts);
    }
}

#[test]
fn sort_reports() {
    check_reports(
        "sort",
        &[
            report(
                "raw-times.txt",
                &["report", "--format=summary", "--raw-times"],
            ),
            report(
                "replay-merge.txt",
                &[
                    "report",
                    "--format=replay",
                    "--function=merge*",
                    "--no-function=merge",
                ],
            ),
            report(
                "calls.folded",
                &["report", "--format=flame-graph", "--weight=calls"],
            ),
        ],
    );
}

#[test]
fn sort_counts() {
    check_counts("sort");
}

#[test]
fn calls_reports() {
    check_reports(
        "calls",
        &[
            report(
                "per-thread.txt",
                &["report", "--format=summary", "--per-thread"],
            ),
            report(
                "replay-depth.txt",
                &["report", "--format=replay", "--max-depth=3"],
            ),
            report(
                "self.txt",
                &["report", "--format=summary", "--avg-self", "--sort=calls"],
            ),
        ],
    );
}

#[test]
fn calls_counts() {
    check_counts("calls");
}

#[test]
fn exceptions_reports() {
    check_reports(
        "exceptions",
        &[report(
            "replay-catch.txt",
            &[
                "report",
                "--format=replay",
                "--function=catch_*,with_guard*,thrower*",
            ],
        )],
    );
}

#[test]
fn exceptions_counts() {
    check_counts("exceptions");
}

#[test]
fn follow_reports() {
    check_reports(
        "follow",
        &[
            report(
                "per-thread.txt",
                &["report", "--format=summary", "--per-thread"],
            ),
            report(
                "replay-work.txt",
                &[
                    "report",
                    "--format=replay",
                    "--function=*_work,main,run_child,exec*",
                ],
            ),
        ],
    );
}

#[test]
fn follow_counts() {
    check_counts("follow");
}

/// The comparison itself: the first differing line, by number, and lines missing at the end.
#[test]
fn first_difference_names_the_line() {
    assert_eq!(first_difference("a\nb\n", "a\nb\n"), None);
    assert_eq!(
        first_difference("a\nb\nc\n", "a\nx\nc\n").unwrap(),
        r#"line 2: expected "b", got "x""#
    );
    assert_eq!(
        first_difference("a\nb\n", "a\n").unwrap(),
        r#"line 2: expected "b", got (the end)"#
    );
    assert!(first_difference("a\n", "a").is_some());
}
