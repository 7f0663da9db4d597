//! End to end: `report --diff` on two recordings of `test/paths.c` run with different scales,
//! and against a recording of another program.

mod common;

use common::*;

/// The diff's JSON row of `name`.
fn row<'a>(json: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    json["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {json:#}"))
}

#[test]
fn diff_gives_each_functions_change_between_two_runs() {
    if !bpf_available("diff_gives_each_functions_change_between_two_runs") {
        return;
    }
    let paths = compile("paths.c", "paths", &[]);
    let base = record_unchanged(&paths, &["1"], &[]);
    let new = record_unchanged(&paths, &["3"], &[]);
    let base_data = base.data();
    let base_file = base_data.to_str().unwrap();

    let json: serde_json::Value =
        serde_json::from_str(&new.report(&["--diff", base_file, "--format=json"])).unwrap();
    assert_eq!(json["different_programs"], false);
    for (name, base_calls, new_calls) in [
        ("main", 1, 1),
        ("a", 10, 30),
        ("b", 20, 60),
        ("c", 20, 60),
        ("target", 35, 105),
    ] {
        let row = row(&json, name);
        assert_eq!(row["base"]["calls"], base_calls, "{name}");
        assert_eq!(row["new"]["calls"], new_calls, "{name}");
        assert_eq!(row["change"]["calls"], new_calls - base_calls, "{name}");
        let change = |figure: &str| {
            row["new"][figure].as_i64().unwrap() - row["base"][figure].as_i64().unwrap()
        };
        assert_eq!(
            row["change"]["total_ns"].as_i64().unwrap(),
            change("total_ns"),
            "{name}"
        );
        assert_eq!(
            row["change"]["self_ns"].as_i64().unwrap(),
            change("self_ns"),
            "{name}"
        );
    }
    // Sorted by the largest change of total time.
    let changes: Vec<i64> = json["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["change"]["total_ns"].as_i64().unwrap().abs())
        .collect();
    assert!(changes.windows(2).all(|w| w[0] >= w[1]), "{changes:?}");

    let text = new.report(&["--diff", base_file, "-f", "a,target"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    for (name, counts) in [("a", ["10", "30", "+20"]), ("target", ["35", "105", "+70"])] {
        let line = lines
            .iter()
            .find(|l| l.ends_with(&format!("  {name}")))
            .unwrap();
        let columns: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(columns[..3], counts, "{line}");
    }
}

#[test]
fn diff_against_another_program_warns_and_marks_what_one_side_lacks() {
    if !bpf_available("diff_against_another_program_warns_and_marks_what_one_side_lacks") {
        return;
    }
    let paths = compile("paths.c", "paths", &[]);
    let sort = compile("sort.c", "sort", &[]);
    let base = record_unchanged(&sort, &["100"], &[]);
    let new = record_unchanged(&paths, &["1"], &[]);
    let output = report_output(&new.data(), &["--diff", base.data().to_str().unwrap()]);
    assert_success(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("another program"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one warning: {stderr}");
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.lines().any(|l| l.ends_with("  target [new]")),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.ends_with("  merge_sort [gone]")),
        "{text}"
    );
    // main is in both, matched by name.
    assert!(text.lines().any(|l| l.ends_with("  main")), "{text}");
}

#[test]
fn diff_errors_are_one_line() {
    let output = report_output(
        std::path::Path::new("/nonexistent/utrace.data"),
        &["--diff", "/nonexistent/other.data"],
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let output = report_output(
        std::path::Path::new("/nonexistent/utrace.data"),
        &["--diff", "x.data", "--format=replay"],
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("--diff compares summaries"));
}
