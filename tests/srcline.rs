//! End to end: `record --srcline` reads where each traced function starts in the source (DWARF
//! line tables), and `report --format=replay --srcline` and json show it, exactly as `addr2line` says
//! for the function's address.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::*;

/// `nm --defined-only`: each code symbol's address, by name.
fn symbol_addresses(program: &Path) -> BTreeMap<String, u64> {
    let output = Command::new("nm")
        .arg("--defined-only")
        .arg(program)
        .output()
        .expect("running nm (install binutils)");
    assert!(output.status.success());
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [address, "T" | "t", name] = fields[..] else {
                return None;
            };
            Some((name.to_owned(), u64::from_str_radix(address, 16).ok()?))
        })
        .collect()
}

/// What `addr2line -e program address` prints, without the discriminator.
fn addr2line(program: &Path, address: u64) -> String {
    let output = Command::new("addr2line")
        .arg("-e")
        .arg(program)
        .arg(format!("{address:#x}"))
        .output()
        .expect("running addr2line (install binutils)");
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let line = text.lines().next().unwrap_or_default();
    line.split(" (discriminator").next().unwrap().to_owned()
}

/// `file:line` as addr2line prints it: a relative path is relative to the compilation
/// directory, where the tests compile (this crate's directory).
fn as_addr2line_prints(source: &str) -> String {
    match source.starts_with('/') {
        true => source.to_owned(),
        false => format!("{}/{source}", std::env::current_dir().unwrap().display()),
    }
}

/// The first lines of the calls in a replay (`add(); /* f.c:9 */`, `fib() { /* f.c:21 */`):
/// each function's name with the comment that ends the line, if any. Closing lines (`}`) are
/// left out.
fn first_lines(replay: &str) -> Vec<(String, Option<String>)> {
    replay
        .lines()
        .filter_map(|line| line.split_once(" | ").map(|(_, call)| call.trim_start()))
        .filter(|call| !call.starts_with('}') && !call.is_empty())
        .map(|call| {
            let name = call.split('(').next().unwrap().to_owned();
            let comment = call
                .strip_suffix(" */")
                .filter(|_| !call.ends_with("/* no exit */") && !call.ends_with("unknown */"))
                .and_then(|rest| rest.rsplit_once("/* "))
                .map(|(_, comment)| comment.to_owned());
            (name, comment)
        })
        .collect()
}

#[test]
fn replay_srcline_shows_where_addr2line_puts_each_function() {
    if !bpf_available("replay_srcline_shows_where_addr2line_puts_each_function") {
        return;
    }
    let program = compile("args.c", "args", &[]);
    let recording = record_unchanged(&program, &[], &["--srcline"]);
    let replay = recording.report(&["--format=replay", "--srcline"]);
    let addresses = symbol_addresses(&program);

    let mut seen = BTreeMap::new();
    for (name, comment) in first_lines(&replay) {
        if name.ends_with("@plt") {
            assert_eq!(comment, None, "a PLT stub has no source line:\n{replay}");
            continue;
        }
        let address = addresses[&name];
        let comment = comment.unwrap_or_else(|| panic!("{name} has no source line:\n{replay}"));
        assert_eq!(
            as_addr2line_prints(&comment),
            addr2line(&program, address),
            "{name} at {address:#x}"
        );
        seen.insert(name, comment);
    }
    // Every function of the program that ran shows up, each at its own line.
    for name in ["main", "add", "many", "greet", "narrow", "fib"] {
        assert!(
            seen.contains_key(name),
            "{name} is not in the replay:\n{replay}"
        );
    }
    assert!(seen
        .values()
        .all(|source| source.starts_with("test/args.c:")));
    assert!(seen["add"] != seen["fib"]);

    // json gives the same, as "srcline", for every function but the PLT stubs.
    let json = recording.json();
    for function in json["functions"].as_array().unwrap() {
        let name = function["name"].as_str().unwrap();
        let source = function["srcline"].as_str();
        match name.ends_with("@plt") {
            true => assert_eq!(source, None, "{name}"),
            false => assert_eq!(source, Some(seen[name].as_str()), "{name}"),
        }
    }

    // Chrome gives each call's entry its function's line, under --srcline only.
    let chrome: serde_json::Value =
        serde_json::from_str(&recording.report(&["--format=chrome", "--srcline"])).unwrap();
    let entries: Vec<&serde_json::Value> = chrome["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["ph"] == "B")
        .collect();
    assert!(entries.len() > seen.len());
    for event in entries {
        let name = event["name"].as_str().unwrap();
        let srcline = event["args"]["srcline"].as_str();
        assert_eq!(srcline, seen.get(name).map(String::as_str), "{event}");
    }
    let chrome = recording.report(&["--format=chrome"]);
    assert!(!chrome.contains("srcline"), "{chrome}");

    // Without --srcline the replay has no source lines.
    let plain = recording.report(&["--format=replay"]);
    assert!(!plain.contains("args.c"), "{plain}");
}

#[test]
fn without_record_srcline_no_lines_are_read() {
    if !bpf_available("without_record_srcline_no_lines_are_read") {
        return;
    }
    let program = compile("args.c", "args", &[]);
    let recording = record_unchanged(&program, &[], &[]);
    let replay = recording.report(&["--format=replay", "--srcline"]);
    assert!(
        replay.contains("add()") && !replay.contains("/* test/"),
        "{replay}"
    );
    let json = recording.json();
    let functions = json["functions"].as_array().unwrap();
    assert!(
        functions.iter().all(|f| f.get("srcline").is_none()),
        "{json}"
    );
}

#[test]
fn srcline_is_refused_with_other_formats() {
    let output = utrace()
        .args(["report", "--format=summary", "--srcline", "-i", "none.data"])
        .output()
        .unwrap();
    assert_clear_failure(&output, &["--srcline", "--format=replay"]);
}
