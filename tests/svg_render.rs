//! The SVG flame graph of a real trace, opened the way a user opens it: in a browser. Headless
//! Chromium renders it to a PNG (kept in `CARGO_TARGET_TMPDIR/svg-render/` for a person to look
//! at) and dumps the DOM it built, and neither may show an XML or script error.
//!
//! Chromium reports a malformed SVG inside the page it shows (a `parsererror` element) and still
//! exits 0, and reports script errors only as console messages: both are checked, and
//! `the_checks_catch_a_broken_svg` makes sure the checks do see such errors.
//!
//! Without Chromium the tests are skipped with a message, except in CI (`CI` set), where that is
//! a failure: `tools/setup.sh` installs it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{bpf_available, compile, record};

/// Executables tried, in order.
const BROWSERS: &[&str] = &["chromium", "chromium-browser", "google-chrome"];

/// Headless, no sandbox (the tests run as root), nothing fetched from the network, console
/// messages (script errors) on stderr.
const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
];

/// Longest a Chromium run may take before it is killed (it takes about a second).
const TIMEOUT_SECONDS: &str = "120";

/// The Chromium executable, or `None` (with a message) when there is none and `CI` is unset.
fn chromium(test: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = BROWSERS.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: no Chromium ({}) on PATH, and CI needs it: run tools/setup.sh",
            BROWSERS.join(", ")
        );
        eprintln!("{test}: skipped: no Chromium on PATH (tools/setup.sh installs it)");
    }
    found
}

/// Runs Chromium on `svg` with `args` (`--dump-dom`, or `--screenshot=…`) in a fresh profile.
fn run_chromium(chromium: &Path, args: &[String], svg: &Path) -> Output {
    let profile = tempfile::tempdir().unwrap();
    // `timeout` (coreutils) so that a hanging browser fails the test instead of blocking it.
    let output = Command::new("timeout")
        .args(["--kill-after=10", TIMEOUT_SECONDS])
        .arg(chromium)
        .args(FLAGS)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(format!("file://{}", svg.display()))
        .output()
        .expect("running timeout (coreutils) and Chromium");
    assert_ne!(
        output.status.code(),
        Some(124),
        "Chromium took more than {TIMEOUT_SECONDS} s on {}",
        svg.display()
    );
    assert!(
        output.status.success(),
        "Chromium {args:?} failed on {} ({}): {}",
        svg.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The DOM Chromium built from `svg`, and what it said on stderr.
fn dump_dom(chromium: &Path, svg: &Path) -> (String, String) {
    let output = run_chromium(chromium, &["--dump-dom".to_string()], svg);
    (
        String::from_utf8(output.stdout).expect("the DOM is UTF-8"),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// What went wrong in rendering, from the DOM and stderr: XML parse errors (which Chromium puts
/// into the page) and script errors (console messages).
fn render_errors(dom: &str, stderr: &str) -> Vec<String> {
    let mut errors = Vec::new();
    for marker in [
        "<parsererror",
        "This page contains the following errors",
        "error on line",
    ] {
        if dom.contains(marker) {
            errors.push(format!("the page shows a parse error ({marker:?})"));
        }
    }
    if !dom.trim_start().starts_with("<!DOCTYPE svg") && !dom.trim_start().starts_with("<svg") {
        errors.push("the document is not an SVG".to_string());
    }
    for line in stderr.lines() {
        let parse_error = ["error on line", "XML Parsing Error", "parsererror"]
            .iter()
            .any(|marker| line.contains(marker));
        let script_error = line.contains(":CONSOLE") && line.contains("Uncaught");
        if parse_error || script_error {
            errors.push(format!("stderr: {line}"));
        }
    }
    errors
}

/// The text of the `<text id="title">` element.
fn title_of(dom: &str) -> Option<&str> {
    let element = &dom[dom.find("<text id=\"title\"")?..];
    let text = &element[element.find('>')? + 1..];
    Some(&text[..text.find('<')?])
}

/// Checks that `png` is a PNG of `width` × `height` that shows frames: not one colour, and
/// with a share of the flame graph's reds, oranges and yellows (little blue in them, where the
/// background and the white margin have plenty).
fn assert_shows_a_flame_graph(png: &Path, width: u32, height: u32) {
    let bytes = std::fs::read(png).unwrap();
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is not a PNG",
        png.display()
    );
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("a PNG header");
    let mut pixels = vec![
        0;
        reader
            .output_buffer_size()
            .expect("a PNG that fits in memory")
    ];
    let frame = reader.next_frame(&mut pixels).expect("decoding the PNG");
    assert_eq!((frame.width, frame.height), (width, height));
    let channels = frame.color_type.samples();
    assert!(
        channels >= 3,
        "a colour screenshot, not {:?}",
        frame.color_type
    );
    let rgb: Vec<[u8; 3]> = pixels[..frame.buffer_size()]
        .chunks_exact(channels)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    let colours: std::collections::BTreeSet<[u8; 3]> = rgb.iter().copied().collect();
    assert!(
        colours.len() > 10,
        "{} has {} colours: blank?",
        png.display(),
        colours.len()
    );
    let flame = rgb.iter().filter(|[r, _, b]| *r >= 180 && *b <= 80).count();
    assert!(
        flame * 100 > rgb.len(),
        "{}: only {flame} of {} pixels are flame-coloured",
        png.display(),
        rgb.len()
    );
}

#[test]
fn svg_of_a_real_trace_renders_in_chromium() {
    let test = "svg_of_a_real_trace_renders_in_chromium";
    if !bpf_available(test) {
        return;
    }
    let Some(chromium) = chromium(test) else {
        return;
    };
    let calls = compile("calls.c", "calls", &[]);
    let recording = record(&calls, &[], &[]);
    assert!(
        recording.output.status.success(),
        "utrace record failed: {}",
        String::from_utf8_lossy(&recording.output.stderr)
    );

    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("svg-render");
    std::fs::create_dir_all(&out).unwrap();
    let svg = out.join("flame.svg");
    let png = out.join("flame.png");
    let _ = std::fs::remove_file(&png);
    recording.report(&["--format=svg", "-o", svg.to_str().unwrap()]);

    let (dom, stderr) = dump_dom(&chromium, &svg);
    let errors = render_errors(&dom, &stderr);
    assert!(
        errors.is_empty(),
        "{}:\n{}",
        svg.display(),
        errors.join("\n")
    );
    // The frames, by the names the trace gave them, and the recorded command as the title.
    for name in ["main", "fib", "worker", "worker_step", "pthread_join@plt"] {
        assert!(
            dom.contains(&format!(">{name}<")) || dom.contains(&format!(">{name} (")),
            "no frame {name} in the rendered DOM of {}",
            svg.display()
        );
    }
    assert_eq!(
        title_of(&dom),
        Some(calls.to_str().unwrap()),
        "the title of {}",
        svg.display()
    );

    let shot = run_chromium(
        &chromium,
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1200,800".to_string(),
        ],
        &svg,
    );
    let errors = render_errors(&dom, &String::from_utf8_lossy(&shot.stderr));
    assert!(
        errors.is_empty(),
        "{}:\n{}",
        svg.display(),
        errors.join("\n")
    );
    assert!(png.is_file(), "Chromium wrote no {}", png.display());
    assert_shows_a_flame_graph(&png, 1200, 800);
    println!("screenshot: {}", png.display());
}

/// The error checks above are only worth something if they see errors: a malformed SVG and an
/// SVG whose script fails must both be caught.
#[test]
fn the_checks_catch_a_broken_svg() {
    let Some(chromium) = chromium("the_checks_catch_a_broken_svg") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();

    let malformed = dir.path().join("malformed.svg");
    std::fs::write(
        &malformed,
        r#"<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"><rect></svg>"#,
    )
    .unwrap();
    let (dom, stderr) = dump_dom(&chromium, &malformed);
    let errors = render_errors(&dom, &stderr);
    assert!(
        errors.iter().any(|e| e.contains("parse error")),
        "a malformed SVG passed: {errors:?}\n{dom}"
    );

    let failing_script = dir.path().join("script.svg");
    std::fs::write(
        &failing_script,
        r#"<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" onload="no_such_function()"><rect width="10" height="10"/></svg>"#,
    )
    .unwrap();
    let (dom, stderr) = dump_dom(&chromium, &failing_script);
    let errors = render_errors(&dom, &stderr);
    assert!(
        errors.iter().any(|e| e.contains("Uncaught")),
        "an SVG whose script fails passed: {errors:?}\n{stderr}"
    );
}
