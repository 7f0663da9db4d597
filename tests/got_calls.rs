//! End to end: calls into libc that take no PLT stub, `call *slot(%rip)` through the GOT
//! (`test/gotcalls.c` built with `-fno-plt`, and a Rust program), probed where they land in libc
//! and counted exactly as `name@got`, under the function that made them.

mod common;

use common::*;

#[test]
fn got_calls_land_and_are_counted_exactly_under_their_callers() {
    if !bpf_available("got_calls_land_and_are_counted_exactly_under_their_callers") {
        return;
    }
    let program = compile("gotcalls.c", "gotcalls", &["-fno-plt"]);
    let recording = record_unchanged(&program, &["40"], &["-d"]);
    let own = own_counts(&recording.output.stdout);
    assert_eq!(own["write@got"], 20, "{own:?}");
    let traced = counts_of(&recording.json());
    assert_counts_match(&own, &traced);
    // No stub: the program calls libc only through its GOT (its PLT holds __cxa_finalize's).
    assert!(!traced.contains_key("write@plt"), "{traced:?}");
    // The entry point's call of __libc_start_main is the C library's start, not a call.
    assert!(!traced.contains_key("__libc_start_main@got"), "{traced:?}");
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    let said = stderr
        .lines()
        .find(|l| l.starts_with("utrace: GOT calls of "));
    let said = said.unwrap_or_else(|| panic!("nothing said of the GOT calls: {stderr}"));
    assert!(
        said.contains("probed in the library function they call"),
        "{said}"
    );
    for (callee, caller, calls) in [("write@got", "say_dot", 20), ("malloc@got", "buffer", 40)] {
        let stacks = recording.report(&["--format=stacks", "-f", callee, "--folded"]);
        let expected = format!("main;{caller};{callee} {calls}");
        assert_eq!(stacks.trim_end(), expected, "{callee}");
    }
    // free is called from two places: each call under its own caller.
    let stacks = recording.report(&["--format=stacks", "-f", "free@got", "--folded"]);
    let stacks: Vec<&str> = stacks.lines().collect();
    assert_eq!(stacks, ["main;free@got 10", "main;release;free@got 30"]);
}

#[test]
fn a_rust_programs_library_calls_are_seen_through_its_got() {
    if !bpf_available("a_rust_programs_library_calls_are_seen_through_its_got") {
        return;
    }
    let program = compile_rust("got_rust.rs", "got_rust");
    let recording = record_unchanged(&program, &["300"], &[]);
    let traced = counts_of(&recording.json());
    // Its 300 writes to /dev/null and the line it prints; the one open of /dev/null.
    assert_eq!(traced.get("write@got"), Some(&301), "{traced:?}");
    assert_eq!(traced.get("open64@got"), Some(&1), "{traced:?}");
}

#[test]
fn got_calls_are_said_untraced_in_one_line_where_the_kernel_has_no_uprobe_sessions() {
    if !bpf_available(
        "got_calls_are_said_untraced_in_one_line_where_the_kernel_has_no_uprobe_sessions",
    ) {
        return;
    }
    let program = compile("gotcalls.c", "gotcalls", &["-fno-plt"]);
    let recording = record_unchanged(&program, &["4"], &[]);
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    let said: Vec<&str> = (stderr.lines())
        .filter(|line| line.contains("through its GOT"))
        .collect();
    let traced = counts_of(&recording.json());
    if kernel_lacks("uprobe sessions") {
        // strtol, malloc, write, free, printf and exit (the start's __libc_start_main is no
        // call of the program's).
        assert_eq!(
            said,
            ["utrace: warning: 6 library functions the program calls through its GOT (-fno-plt, \
              Rust) are not traced there: counting them where they land needs uprobe sessions \
              (Linux 6.13), which this kernel lacks; their PLT calls are"],
            "{stderr}"
        );
        assert!(!traced.contains_key("write@got"), "{traced:?}");
    } else {
        assert!(said.is_empty(), "{stderr}");
        assert_eq!(traced.get("write@got"), Some(&2), "{traced:?}");
    }
}
