//! End to end: record the test programs under real BPF and check that utrace counted exactly the
//! calls each program counted of itself, and that tracing changed nothing the program does.

mod common;

use common::*;

#[test]
fn sample_sort_counts_are_exact() {
    if !bpf_available("sample_sort_counts_are_exact") {
        return;
    }
    let sort = compile("sort.c", "sort", &[]);
    let recording = record_unchanged(&sort, &["5000"], &[]);
    assert_counts_match(
        &own_counts(&recording.output.stdout),
        &recording.traced_counts(),
    );
    // `main` is nearly all of the trace, corrected times or raw: `Total %` divides by the
    // outermost calls' time as the report counts it, not by the raw span of the trace.
    for flags in [&[][..], &["--raw-times"][..]] {
        let summary = recording.report(flags);
        let main = summary
            .lines()
            .find(|line| line.ends_with(" main"))
            .unwrap_or_else(|| panic!("no main row in {summary}"));
        let percent: f64 = main
            .split_whitespace()
            .nth(2)
            .unwrap()
            .trim_end_matches('%')
            .parse()
            .unwrap();
        assert!((95.0..=100.0).contains(&percent), "{flags:?}: {main}");
    }
}

#[test]
fn recursion_pointers_plt_and_threads_are_counted_exactly() {
    if !bpf_available("recursion_pointers_plt_and_threads_are_counted_exactly") {
        return;
    }
    let calls = compile("calls.c", "calls", &[]);
    let recording = record_unchanged(&calls, &[], &[]);
    let own = own_counts(&recording.output.stdout);
    // The calls made on the four worker threads are part of the counts.
    assert_eq!(own.get("worker_step"), Some(&10_000));
    assert_counts_match(&own, &recording.traced_counts());
}

#[test]
fn non_pie_and_cet_builds_are_counted_exactly() {
    if !bpf_available("non_pie_and_cet_builds_are_counted_exactly") {
        return;
    }
    for (name, flags) in [
        ("calls-nopie", &["-no-pie"][..]),
        ("calls-cet", &["-fcf-protection=full", "-Wl,-z,ibtplt"][..]),
    ] {
        let calls = compile("calls.c", name, flags);
        let recording = record_unchanged(&calls, &[], &[]);
        assert_counts_match(
            &own_counts(&recording.output.stdout),
            &recording.traced_counts(),
        );
    }
}

#[test]
fn cpp_methods_templates_and_virtual_calls_are_counted_exactly() {
    if !bpf_available("cpp_methods_templates_and_virtual_calls_are_counted_exactly") {
        return;
    }
    let shapes = compile("shapes.cpp", "shapes", &[]);
    let recording = record_unchanged(&shapes, &[], &[]);
    assert_counts_match(
        &own_counts(&recording.output.stdout),
        &recording.traced_counts(),
    );
}

/// Function templates chosen by `enable_if` in their return type (the program's own, and
/// libstdc++'s `std::__relocate_a_1` and `std::__fill_a1` run as functions of the program when
/// it is built with `-fno-inline`) read as c++filt prints them, in a recording that traces
/// libstdc++ too: no name stays mangled.
#[test]
fn cpp_names_with_expressions_read_as_cplusplus_filt_prints_them() {
    if !bpf_available("cpp_names_with_expressions_read_as_cplusplus_filt_prints_them") {
        return;
    }
    let sfinae = compile("sfinae.cpp", "sfinae", &["-fno-inline"]);
    let recording = record_unchanged(&sfinae, &["1000"], &["--nest-lib", "libstdc++*"]);
    let traced = recording.traced_counts();
    assert_counts_match(&own_counts(&recording.output.stdout), &traced);
    let mangled: Vec<&String> = traced
        .keys()
        .filter(|name| name.starts_with("_Z"))
        .collect();
    assert!(mangled.is_empty(), "names left mangled: {mangled:?}");
    // Their calls are libstdc++'s business (one `std::fill`; a relocation per growth of the
    // vector); their names are c++filt's, up to the clone suffix GCC may add.
    for name in [
        "std::enable_if<std::__is_bitwise_relocatable<long, void>::value, long*>::type \
         std::__relocate_a_1<long, long>(long*, long*, long*, std::allocator<long>&)",
        "__gnu_cxx::__enable_if<std::__is_scalar<int>::__value, void>::__type \
         std::__fill_a1<int*, int>(int*, int*, int const&)",
    ] {
        assert!(
            traced
                .iter()
                .any(|(traced, &calls)| traced.starts_with(name) && calls > 0),
            "{name} not called in the recording: {:?}",
            traced.keys().collect::<Vec<_>>()
        );
    }
}

#[test]
fn exit_codes_and_signals_pass_through() {
    if !bpf_available("exit_codes_and_signals_pass_through") {
        return;
    }
    let exitcode = compile("exitcode.c", "exitcode", &[]);
    for (args, expected) in [(&["3"][..], 3), (&["kill"][..], 128 + libc::SIGTERM)] {
        let recording = record_unchanged(&exitcode, args, &[]);
        assert_eq!(recording.output.status.code(), Some(expected));
        assert!(
            String::from_utf8_lossy(&recording.output.stderr).contains("exitcode: stderr"),
            "the program's stderr must reach the terminal"
        );
        assert_counts_match(
            &own_counts(&recording.output.stdout),
            &recording.traced_counts(),
        );
    }
    let calls = compile("calls.c", "calls", &[]);
    assert_eq!(
        record_unchanged(&calls, &["7"], &[]).output.status.code(),
        Some(7)
    );
}

#[test]
fn the_json_report_describes_the_run() {
    if !bpf_available("the_json_report_describes_the_run") {
        return;
    }
    let sort = compile("sort.c", "sort", &[]);
    let recording = record_unchanged(&sort, &["1000"], &[]);
    let json = recording.json();
    assert_eq!(json["command"], format!("{} 1000", sort.display()));
    assert!(json["pid"].as_u64().unwrap() > 0);
    assert_eq!(json["lost_events"], 0);
    assert!(json["duration_ns"].as_u64().unwrap() > 0);
    let functions = json["functions"].as_array().unwrap();
    // Every call is an entry and an exit: `_start` is not probed (it is jumped to, not called)
    // and main returns, so the file holds exactly two events per call, and those of the time
    // preempted.
    let calls: u64 = functions.iter().map(|f| f["calls"].as_u64().unwrap()).sum();
    let preempted = preemption_events(&recording.data());
    assert_eq!(json["events"].as_u64().unwrap(), 2 * calls + preempted);
    assert!(functions.iter().all(|f| f["name"] != "_start"));
    let main = functions.iter().find(|f| f["name"] == "main").unwrap();
    assert_eq!(main["module"], "sort");
    assert_eq!(main["calls"], 1);
    // main contains everything else the program does, so nothing has a larger total.
    let largest = functions
        .iter()
        .map(|f| f["total_ns"].as_u64().unwrap())
        .max();
    assert_eq!(main["total_ns"].as_u64(), largest);
    for f in functions {
        let (total, own, calls) = (
            f["total_ns"].as_u64().unwrap(),
            f["self_ns"].as_u64().unwrap(),
            f["calls"].as_u64().unwrap(),
        );
        assert!(own <= total, "{}: self time above total", f["name"]);
        assert_eq!(f["avg_ns"].as_u64().unwrap(), total / calls);
        assert!(f["min_ns"].as_u64() <= f["max_ns"].as_u64());
    }
}

#[test]
fn every_report_format_tells_the_same_story() {
    if !bpf_available("every_report_format_tells_the_same_story") {
        return;
    }
    let calls = compile("calls.c", "calls", &[]);
    let recording = record_unchanged(&calls, &[], &[]);
    let json = recording.json();
    let functions = json["functions"].as_array().unwrap();
    let self_total: u64 = functions
        .iter()
        .map(|f| f["self_ns"].as_u64().unwrap())
        .sum();

    // Folded stacks: self time per distinct stack, so the weights add up to the self times.
    let folded = recording.report(&["--format=flame-graph"]);
    let weights: u64 = folded
        .lines()
        .map(|line| line.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert_eq!(weights, self_total);
    // Nested recursion shows as deeper stacks. (Not one exact depth: a stack whose corrected
    // self time comes to 0 has no line, which happened to `main;fib;fib;fib` on a loaded run.)
    assert!(
        folded.lines().any(|l| l.starts_with("main;fib;fib;fib;")),
        "{folded}"
    );
    // The workers run on their own threads: their stacks start at the thread's first call.
    assert!(
        folded.lines().any(|l| l.starts_with("worker;worker_step ")),
        "{folded}"
    );

    let summary = recording.report(&["--format=summary"]);
    let worker_step = summary
        .lines()
        .find(|l| l.ends_with(" worker_step"))
        .unwrap();
    // Total time (2 words), Total %, Self time (2 words), Calls.
    assert_eq!(
        worker_step.split_whitespace().nth(5),
        Some("10000"),
        "{worker_step}"
    );

    let svg_path = recording.dir.path().join("flame.svg");
    recording.report(&["--format=svg", "-o", svg_path.to_str().unwrap()]);
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("<svg"));
    assert!(svg.contains("worker_step") && svg.contains(&calls.display().to_string()));
}

/// A command started through a symlink is named as the user named it.
#[test]
fn a_program_started_through_a_symlink_is_named_as_given() {
    if !bpf_available("a_program_started_through_a_symlink_is_named_as_given") {
        return;
    }
    let program = compile("exitcode.c", "exitcode", &[]);
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("my-tool");
    std::os::unix::fs::symlink(&program, &link).unwrap();
    let recording = record(&link, &["0"], &[]);
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert!(stderr.contains(" functions of my-tool (pid "), "{stderr}");
}

/// `--max-size` ends the recording cleanly once the file reaches it (the command runs on to its
/// end, and utrace with it), with a line that says so; a complete file, not one cut short.
#[test]
fn max_size_ends_the_recording_cleanly() {
    if !bpf_available("max_size_ends_the_recording_cleanly") {
        return;
    }
    let program = compile("loop.c", "loop", &[]);
    let recording = record(&program, &["2"], &["--max-size", "512K"]);
    assert_success(&recording.output);
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert!(
        stderr.contains("utrace.data reached --max-size 512 KiB: recording stopped there"),
        "{stderr}"
    );
    // The program ran its two seconds, untraced after the stop.
    assert!(String::from_utf8_lossy(&recording.output.stdout).contains("loop: done"));
    let size = std::fs::metadata(recording.data()).unwrap().len();
    // It stops when the file will reach the limit once what is queued is written, an estimate
    // (queued events take a little less room than reckoned); the events on their way when it
    // was reached are still written: at most a poll's worth.
    assert!(
        ((512 << 10) - (32 << 10)..(512 << 10) + (128 << 10)).contains(&size),
        "{size} bytes"
    );
    let (json, said) = report_json_and_stderr(&recording.data());
    assert!(said.is_empty(), "{said}");
    assert!(calls_of(&json, "tick") > 0);
    assert!(json["duration_ns"].as_u64().unwrap() < 2_000_000_000);
}

/// A file that passes the size the user set no limit for gets one warning that names
/// `--max-size`.
#[test]
fn a_growing_file_gets_one_warning() {
    if !bpf_available("a_growing_file_gets_one_warning") {
        return;
    }
    let program = compile("loop.c", "loop", &[]);
    let recording = record_with_env(&program, &["1"], &[], &[("UTRACE_SIZE_WARNING", "100000")]);
    assert_success(&recording.output);
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    // (Other warnings may come too: a calibration on a machine busy with other tests says so.)
    let warning = "utrace: warning: ";
    let lines: Vec<&str> = (stderr.lines())
        .filter(|l| l.starts_with(warning) && l.contains(" has passed "))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].ends_with("utrace.data has passed 97.7 KiB: --max-size caps a recording (it then stops cleanly), and Ctrl-C stops it"),
        "{stderr}"
    );
}
