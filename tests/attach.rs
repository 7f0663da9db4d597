//! End to end: the processes and libraries a user points utrace at: `-p PID`, `--nest-lib`,
//! `-u USER`, `--no-randomize-addr`.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

#[test]
fn a_running_process_is_traced_and_keeps_running_after_detach() {
    if !bpf_available("a_running_process_is_traced_and_keeps_running_after_detach") {
        return;
    }
    let mut server = Running::start(&compile("server.c", "server", &[]));
    let pid = server.pid().to_string();

    let recording = tempfile::tempdir().unwrap();
    let data = recording.path().join("utrace.data");
    let output = utrace()
        .args(["record", "-p", &pid, "--duration", "1s", "-o"])
        .arg(&data)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "record -p failed: {stderr}");
    assert!(stderr.contains(&format!("(pid {pid})")), "{stderr}");

    // Detached: the process still runs and answers.
    send_signal(server.pid(), libc::SIGUSR1);
    server.wait_for_line("alive ");
    let own = own_counts(server.stop().join("\n").as_bytes());

    let json = report_json(&data);
    let traced = counts_of(&json);
    for name in ["tick", "work"] {
        // Each runs on its own thread, about every 200 us: a second of tracing sees many calls
        // (thousands here, tens under emulation: tools/vm-test.sh), and never more than the
        // program made in all.
        let count = traced.get(name).copied().unwrap_or(0);
        assert!(count > 10, "{name}: only {count} calls traced");
        assert!(
            count <= own[name],
            "{name}: traced {count} > made {}",
            own[name]
        );
    }
    assert!(json["command"].as_str().unwrap().ends_with("server"));
    assert_eq!(json["pid"].as_u64().unwrap().to_string(), pid);
}

/// `-p` names the process as `ps` does: as it was started (a symlink's name, not its target's),
/// and its command line as it rewrote it (redis: `redis-server 127.0.0.1:6379`), without the
/// quotes of a single argument in `info`, the flame graph's title and the call graph's.
#[test]
fn a_running_process_is_named_as_ps_names_it() {
    if !bpf_available("a_running_process_is_named_as_ps_names_it") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("my-server");
    std::os::unix::fs::symlink(compile("server.c", "server", &[]), &link).unwrap();
    let server = Running::start_with_args(&link, &["title"]);
    let data = dir.path().join("utrace.data");
    let output = utrace()
        .args([
            "record",
            "-p",
            &server.pid().to_string(),
            "--duration",
            "0.3",
            "-o",
        ])
        .arg(&data)
        .output()
        .unwrap();
    server.stop();
    assert_success(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            " functions of my-server (pid {})",
            server_pid(&data)
        )),
        "{stderr}"
    );
    let title = "my-server 127.0.0.1:16399";
    let info = utrace().arg("info").arg("-i").arg(&data).output().unwrap();
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains(&format!("command:     {title}\n")), "{info}");
    for format in ["svg", "dot"] {
        let report = report_output(&data, &[&format!("--format={format}")]);
        let text = String::from_utf8_lossy(&report.stdout);
        assert!(text.contains(title), "{format}: {text}");
        assert!(!text.contains(&format!("'{title}'")), "{format}: {text}");
    }
}

/// The pid a recording says it traced.
fn server_pid(data: &std::path::Path) -> u64 {
    report_json(data)["pid"].as_u64().unwrap()
}

#[test]
fn ctrl_c_stops_an_attached_recording_cleanly() {
    if !bpf_available("ctrl_c_stops_an_attached_recording_cleanly") {
        return;
    }
    let server = Running::start(&compile("server.c", "server", &[]));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("utrace.data");
    let mut recorder = utrace()
        .args(["record", "-p", &server.pid().to_string(), "-o"])
        .arg(&data)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    unsafe { libc::kill(recorder.id() as i32, libc::SIGINT) };
    let status = recorder.wait().unwrap();
    assert!(
        status.success(),
        "utrace should end cleanly on Ctrl-C: {status:?}"
    );
    server.stop();
    let report = utrace()
        .arg("report")
        .arg("-i")
        .arg(&data)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&report.stderr);
    assert!(
        report.status.success() && !stderr.contains("cut short"),
        "{stderr}"
    );
    assert!(counts_of(&report_json(&data))["tick"] > 0);
}

#[test]
fn a_dead_pid_is_refused() {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id().to_string();
    child.wait().unwrap();
    let output = utrace().args(["record", "-p", &pid]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains(&format!("no process with pid {pid}")),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"));
}

#[test]
fn nested_library_functions_are_counted_exactly() {
    if !bpf_available("nested_library_functions_are_counted_exactly") {
        return;
    }
    let library = compile("libcount.c", "libcount.so", &["-shared", "-fPIC"]);
    let uselib = compile_against("uselib.c", "uselib", &[], &library);
    let recording = record(&uselib, &[], &["--nest-lib", "libcount*"]);
    assert!(recording.output.status.success());
    let mut own = own_counts(&recording.output.stdout);
    // lib_outer, traced, sees the calls through the program's stub, which is not probed.
    assert_eq!(own.remove("lib_outer@plt"), Some(5));
    assert_eq!(own["lib_inner"], 50);
    let json = recording.json();
    assert_counts_match(&own, &counts_of(&json));
    assert_eq!(
        module_of(&json, "lib_inner").as_deref(),
        Some("libcount.so")
    );
    assert_eq!(module_of(&json, "main").as_deref(), Some("uselib"));

    // Without --nest-lib, only the program's own functions and its PLT calls.
    let plain = record(&uselib, &[], &[]);
    let traced = plain.traced_counts();
    assert_eq!(traced.get("lib_outer@plt"), Some(&5));
    assert_eq!(traced.get("lib_inner"), None);
}

#[test]
fn the_system_libc_shows_its_exported_functions() {
    if !bpf_available("the_system_libc_shows_its_exported_functions") {
        return;
    }
    let sort = compile("sort.c", "sort", &[]);
    let recording = record(&sort, &["100"], &["--nest-lib", "libc.so*"]);
    assert!(recording.output.status.success());
    let json = recording.json();
    let libc_function = |name: &str| {
        json["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name && f["module"] == "libc.so.6")
            .map(|f| f["calls"].as_u64().unwrap())
    };
    // sort.c calls qsort once; the loader's start code calls __libc_start_main once.
    assert_eq!(libc_function("qsort"), Some(1));
    assert_eq!(libc_function("__libc_start_main"), Some(1));
    assert!(libc_function("malloc").is_some_and(|calls| calls >= 2));
    // Nothing of utrace's own libc use before exec shows up.
    assert_eq!(libc_function("execv"), None);
}

#[test]
fn an_unmatched_library_pattern_is_a_warning() {
    if !bpf_available("an_unmatched_library_pattern_is_a_warning") {
        return;
    }
    let sort = compile("sort.c", "sort", &[]);
    let recording = record(&sort, &["10"], &["--nest-lib", "libnothing*"]);
    assert!(recording.output.status.success());
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert!(
        stderr.contains("--nest-lib libnothing* matches none"),
        "{stderr}"
    );
}

#[test]
fn the_command_runs_as_the_user_given() {
    if !bpf_available("the_command_runs_as_the_user_given") {
        return;
    }
    let ids = compile("ids.c", "ids", &[]);
    let recording = record(&ids, &[], &["-u", "nobody"]);
    assert!(recording.output.status.success());
    let stdout = String::from_utf8_lossy(&recording.output.stdout);
    let id = |flag: &str| {
        let out = Command::new("id").args([flag, "nobody"]).output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let groups = id("-G").replace(' ', ",");
    let expected = format!("uid {} gid {} groups {groups}", id("-u"), id("-g"));
    assert_eq!(stdout.lines().next(), Some(expected.as_str()), "{stdout}");
    assert_eq!(recording.traced_counts().get("main"), Some(&1));
}

#[test]
fn address_randomization_can_be_turned_off() {
    if !bpf_available("address_randomization_can_be_turned_off") {
        return;
    }
    let ids = compile("ids.c", "ids", &[]);
    let main_address = || {
        let recording = record(&ids, &[], &["--no-randomize-addr"]);
        assert!(recording.output.status.success());
        let stdout = String::from_utf8(recording.output.stdout).unwrap();
        stdout
            .lines()
            .find(|l| l.starts_with("main at "))
            .unwrap()
            .to_string()
    };
    assert_eq!(main_address(), main_address());
}

#[test]
fn a_process_whose_binary_was_deleted_is_still_traced() {
    if !bpf_available("a_process_whose_binary_was_deleted_is_still_traced") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("server");
    std::fs::copy(compile("server.c", "server", &[]), &copy).unwrap();
    let server = Running::start(&copy);
    std::fs::remove_file(&copy).unwrap();

    let data = dir.path().join("utrace.data");
    let output = utrace()
        .args([
            "record",
            "-p",
            &server.pid().to_string(),
            "--duration",
            "500ms",
            "-o",
        ])
        .arg(&data)
        .output()
        .unwrap();
    assert_success(&output);
    server.stop();
    let json = report_json(&data);
    assert!(calls_of(&json, "tick") > 10, "{json}");
    // Reports name the file as the process mapped it.
    assert_eq!(module_of(&json, "tick").as_deref(), Some("server"));
}

/// A library the program links through a symlinked directory (as `/lib` is on merged-/usr
/// systems) shows in `/proc/PID/maps` under its real path: the look at the maps after a dlopen
/// must know it for the file already traced, or its calls are counted twice from then on.
#[test]
fn a_library_seen_under_two_paths_is_traced_once() {
    if !bpf_available("a_library_seen_under_two_paths_is_traced_once") {
        return;
    }
    let library = compile("libcount.c", "libcount.so", &["-shared", "-fPIC"]);
    let library_dir = library.parent().unwrap();
    let linked_dir = build_dir().join("linked-dir");
    if !linked_dir.exists() {
        std::os::unix::fs::symlink(library_dir, &linked_dir).unwrap();
    }
    let program = compile(
        "dlopen.c",
        "dlopen-linked",
        &[
            "-ldl",
            "-Wl,--no-as-needed",
            &format!("-L{}", library_dir.display()),
            "-lcount",
            &format!("-Wl,-rpath,{}", linked_dir.display()),
        ],
    );
    let library = library.to_str().unwrap();
    let recording = record(&program, &[library], &["--nest-lib", "libcount*"]);
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert!(recording.output.status.success(), "{stderr}");
    let own = own_counts(&recording.output.stdout);
    assert_eq!(own["lib_outer"], 5);
    let json = recording.json();
    assert_counts_match(&own, &counts_of(&json));
    let info = recording.info();
    // The program, the library, and `[kernel]` of the time preempted.
    assert!(info.contains("planned in 3 modules"), "{info}");
}

#[test]
fn a_library_loaded_with_dlopen_is_counted_exactly() {
    if !bpf_available("a_library_loaded_with_dlopen_is_counted_exactly") {
        return;
    }
    let library = compile("libcount.c", "libcount.so", &["-shared", "-fPIC"]);
    let program = compile("dlopen.c", "dlopen", &["-ldl"]);
    let library = library.to_str().unwrap();
    let recording = record(&program, &[library], &["--nest-lib", "libcount*"]);
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert!(recording.output.status.success(), "{stderr}");
    assert_eq!(
        recording.output.stdout,
        run_untraced(&program, &[library]).stdout
    );
    let own = own_counts(&recording.output.stdout);
    assert_eq!(own["lib_inner"], 50);
    let json = recording.json();
    assert_counts_match(&own, &counts_of(&json));
    assert_eq!(
        module_of(&json, "lib_outer").as_deref(),
        Some("libcount.so")
    );
}

/// A library opened, closed and opened again at another address is traced at each open, and so
/// is the library of another `--nest-lib` glob that took its place in between (issue 27: its
/// place once named the first library, and the second was taken for it and never probed). Each
/// open is probed and each close releases the probes, in the program's order.
#[test]
fn a_library_opened_again_after_dlclose_is_counted_at_each_open() {
    if !bpf_available("a_library_opened_again_after_dlclose_is_counted_at_each_open") {
        return;
    }
    let reopen = Reopen::build();
    let flags = [&["-d"][..], &Reopen::NEST_LIBS].concat();
    let recording = record_unchanged(&reopen.program, &reopen.libraries(), &flags);
    let own = own_counts(&recording.output.stdout);
    assert_eq!(own, Reopen::counts(8, 10));
    assert_counts_match(&own, &recording.traced_counts());

    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    let probes_of_libraries: Vec<&str> = stderr
        .lines()
        .filter(|line| line.ends_with("after dlopen") || line.ends_with("after dlclose"))
        .collect();
    let counted = reopen.counted.display();
    let spacer = reopen.spacer.display();
    assert_eq!(
        probes_of_libraries,
        [
            format!("utrace: probed {counted} after dlopen"),
            format!("utrace: releasing the probes of {counted} after dlclose"),
            format!("utrace: probed {spacer} after dlopen"),
            format!("utrace: probed {counted} after dlopen"),
            format!("utrace: releasing the probes of {spacer} after dlclose"),
            format!("utrace: probed {spacer} after dlopen"),
            format!("utrace: releasing the probes of {spacer} after dlclose"),
            format!("utrace: releasing the probes of {counted} after dlclose"),
        ]
    );
}
