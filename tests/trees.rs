//! End to end: call trees in the hard cases, compared whole with the durations masked: calls
//! after a caught exception belong to the function that caught it.

mod common;

use common::*;

/// The replay tree of a recording without its duration column, and the note that follows it.
fn tree(recording: &Recording, args: &[&str]) -> String {
    let mut report_args = vec!["--format=replay"];
    report_args.extend(args);
    recording
        .report(&report_args)
        .lines()
        .skip(1)
        .map(|line| line.split_once("| ").map_or(line, |(_, call)| call))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The disassembly of `symbol` in `program`.
fn objdump(program: &std::path::Path, symbol: &str) -> String {
    let output = std::process::Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(format!("--disassemble={symbol}"))
        .arg(program)
        .output()
        .unwrap();
    assert_success(&output);
    String::from_utf8(output.stdout).unwrap()
}

const NOTE_UNKNOWN: &str = "calls with unknown time (returns skipped by longjmp, exceptions, \
     the kernel's 64 nested return probes or lost events): counted, not timed";

/// One round of `catch_loop` under `--exit-probes=ret`: the frames an exception skipped end where
/// it was caught, with unknown time, and the catch's calls and what follows are main's.
const CATCH_LOOP_ROUND: &str = "  thrower(int) {
    __cxa_allocate_exception@plt();
    std::runtime_error::runtime_error(char const*)@plt;
    __cxa_throw@plt(); /* time unknown */
  } /* thrower(int): time unknown */
  __cxa_begin_catch@plt();
  __cxa_end_catch@plt();
  work(int);
";

/// The same round under uretprobes, where utrace stops the thread for the shadow stack at the
/// unwinder's entry (inside `__cxa_throw`) to give the return addresses back. The stop is a call
/// of its own where it happened, utrace's time, not the program's. (It would stop again at the
/// catch's first traced call to put the catching frame's trampoline back, but main has none: its
/// exits are probed on its instructions.)
const CATCH_LOOP_ROUND_REPAIRED: &str = "  thrower(int) {
    __cxa_allocate_exception@plt();
    std::runtime_error::runtime_error(char const*)@plt;
    __cxa_throw@plt() {
      [utrace: stack repair]();
    } /* __cxa_throw@plt: time unknown */
  } /* thrower(int): time unknown */
  __cxa_begin_catch@plt();
  __cxa_end_catch@plt();
  work(int);
";

/// Records `catch_loop 2` with `extra` flags and checks its tree, of two rounds as `round`;
/// `after` is what follows main (glibc's `__cxa_finalize` at exit, whose return a `ret` probe
/// does not see).
fn assert_catch_loop_tree(name: &str, extra: &[&str], round: &str, after: &str) {
    let program = compile("catch_loop.cpp", name, &[]);
    let recording = record_unchanged(&program, &["2"], extra);
    assert_counts_match(
        &own_counts(&recording.output.stdout),
        &recording.traced_counts(),
    );
    let printf = "  printf@plt();\n".repeat(4);
    assert_eq!(
        tree(&recording, &[]),
        format!(
            "main() {{\n  strtol@plt();\n{round}{round}{printf}}} /* main */\n\
             {after} 4 {NOTE_UNKNOWN}"
        )
    );
    // The flame graph's weight under the thrower is its own calls', no more. Weighed by calls
    // (__cxa_throw's, of unknown time, among them): by time, work's corrected self time (a few
    // hundred ns) can come out as 0, and its line with it.
    let folded = recording.report(&["--format=flame-graph", "--weight", "calls"]);
    let under_thrower: Vec<&str> = folded
        .lines()
        .filter_map(|line| line.strip_prefix("main;thrower(int);"))
        .filter_map(|line| line.rsplit_once(' ').map(|(stack, _)| stack))
        .filter(|stack| !stack.ends_with("[utrace: stack repair]"))
        .collect();
    assert_eq!(
        under_thrower,
        [
            "__cxa_allocate_exception@plt",
            "__cxa_throw@plt",
            "std::runtime_error::runtime_error(char const*)@plt"
        ],
        "{folded}"
    );
    assert!(folded.contains("\nmain;work(int) "), "{folded}");
}

#[test]
fn calls_after_a_catch_are_the_catching_functions_with_uretprobes() {
    if !bpf_available("calls_after_a_catch_are_the_catching_functions_with_uretprobes") {
        return;
    }
    // Its own copy: uretprobes act on every process that runs the file.
    assert_catch_loop_tree(
        "catch_loop-uretprobe",
        &[],
        CATCH_LOOP_ROUND_REPAIRED,
        "__cxa_finalize@plt();\n\n# note:",
    );
}

/// Under `--exit-probes=ret` the catch code lives in `main.cold` (`call __cxa_end_catch@plt`,
/// then `jmp` back into main): the instruction after that call is its exit too, or every round
/// would nest one level deeper.
#[test]
fn calls_after_a_catch_are_the_catching_functions_with_ret_probes() {
    if !bpf_available("calls_after_a_catch_are_the_catching_functions_with_ret_probes") {
        return;
    }
    let program = compile("catch_loop.cpp", "catch_loop", &[]);
    let main_cold = objdump(&program, "main.cold");
    assert!(
        main_cold.contains("call") && main_cold.contains("__cxa_end_catch@plt"),
        "{main_cold}"
    );
    assert_catch_loop_tree(
        "catch_loop",
        &["--exit-probes=ret"],
        CATCH_LOOP_ROUND,
        "__cxa_finalize@plt(); /* no exit */\n\n# note: 1 unfinished call (no exit seen: timed \
         up to the end of the trace or to an outer return);",
    );
}

/// A function that ends in a `jmp` to itself: with uretprobes the kernel chains the callee's
/// return probe to the caller's, and both exits come at the callee's `ret`, innermost first.
/// Each call is nested in the one that tail-called it, timed, with no unmatched exit (the
/// longjmp re-entry that the same slot could also mean is tests/pairing.rs's).
#[test]
fn a_self_tail_call_is_nested_and_timed() {
    if !bpf_available("a_self_tail_call_is_nested_and_timed") {
        return;
    }
    let program = compile("self_tail.c", "self_tail", &["-foptimize-sibling-calls"]);
    let split = objdump(&program, "split");
    let start = split
        .lines()
        .find_map(|line| line.strip_suffix(" <split>:"))
        .expect("split's address");
    let start = start.trim_start_matches('0');
    assert!(
        split.contains(&format!("jmp    {start} <split>")),
        "no self tail call:\n{split}"
    );
    let recording = record_unchanged(&program, &["2"], &["--exit-probes=uretprobe"]);
    assert_counts_match(
        &own_counts(&recording.output.stdout),
        &recording.traced_counts(),
    );
    let replay = recording.report(&["--format=replay"]);
    assert_eq!(
        tree(&recording, &[]),
        "\
main() {
  strtol@plt();
  split() {
    leaf();
    split() {
      leaf();
      split() {
        leaf();
      } /* split */
    } /* split */
  } /* split */
  printf@plt();
  printf@plt();
  printf@plt();
  printf@plt();
} /* main */
__cxa_finalize@plt();",
        "{replay}"
    );
    // Every call timed: a duration on each line that closes one.
    assert!(
        replay
            .lines()
            .filter(|line| line.contains("} /* split */"))
            .all(|line| !line.starts_with("           |")),
        "{replay}"
    );
}

/// A stripped program's setjmp is seen only as `_setjmp@plt` and `__sigsetjmp@plt`: its exit is
/// probed after each call of the stub, found from the program's `.eh_frame` as it would be from
/// its symbols, so each setjmp returns before what follows it, which would otherwise nest under
/// the first one. Its second returns, after the longjmps, match no open call (the note).
#[test]
fn setjmp_in_a_stripped_program_returns_before_what_follows() {
    if !bpf_available("setjmp_in_a_stripped_program_returns_before_what_follows") {
        return;
    }
    let program = compile("longjmp.c", "longjmp-stripped", &["-s"]);
    for (exits, finalize, unfinished) in [
        ("--exit-probes=uretprobe", "", ""),
        (
            "--exit-probes=ret",
            " /* no exit */",
            " 1 unfinished call (no exit seen: timed up to the end of the trace or to an outer \
             return);",
        ),
    ] {
        let recording = record_unchanged(&program, &["4"], &[exits]);
        // Only the PLT stubs are known: their counts are exact.
        let mut own = own_counts(&recording.output.stdout);
        own.retain(|name, _| name.ends_with("@plt"));
        assert_counts_match(&own, &recording.traced_counts());
        let printf = "printf@plt();\n".repeat(11);
        assert_eq!(
            tree(&recording, &[]),
            format!(
                "\
strtoul@plt();
_setjmp@plt();
longjmp@plt(); /* time unknown */
__sigsetjmp@plt();
siglongjmp@plt(); /* time unknown */
_setjmp@plt();
longjmp@plt(); /* time unknown */
__sigsetjmp@plt();
{printf}__cxa_finalize@plt();{finalize}

# note: 3 unmatched exits ignored (calls already running when tracing started, or setjmp \
                 returning again);{unfinished} 3 {NOTE_UNKNOWN}"
            ),
            "{exits}"
        );
    }
}

/// `--max-depth` at record time and at report time show the same calls, counted the same, in
/// the same tree; the times differ as the README says (the probes of the hidden calls ran at
/// record time, and a file that does not hold them cannot have their cost taken out).
#[test]
fn record_time_and_report_time_depth_filters_show_the_same_calls() {
    if !bpf_available("record_time_and_report_time_depth_filters_show_the_same_calls") {
        return;
    }
    let program = compile("sort.c", "sort-depth", &[]);
    let full = record_unchanged(&program, &["4"], &[]);
    let filtered = record_unchanged(&program, &["4"], &["--max-depth", "3"]);
    let at_report_time = tree(&full, &["--max-depth", "3"]);
    assert_eq!(tree(&filtered, &[]), at_report_time);
    assert!(
        at_report_time.contains("\n    merge_sort();\n"),
        "{at_report_time}"
    );
    assert!(
        !at_report_time.contains("\n      "),
        "deeper than 3:\n{at_report_time}"
    );
    let counts = |recording: &Recording, args: &[&str]| {
        let mut args = args.to_vec();
        args.push("--format=json");
        counts_of(&serde_json::from_str(&recording.report(&args)).unwrap())
    };
    assert_eq!(counts(&filtered, &[]), counts(&full, &["--max-depth", "3"]));
}

/// Two threads throwing at once, each through 5 to 150 `pass` frames: every catch_through is
/// worker's call, timed (it caught), R per thread, whatever the other thread does meanwhile.
#[test]
fn threads_that_throw_at_once_keep_their_catches_in_their_own_trees() {
    if !bpf_available("threads_that_throw_at_once_keep_their_catches_in_their_own_trees") {
        return;
    }
    let program = compile("thread_exceptions.cpp", "thread_exceptions-trees", &[]);
    for exits in ["--exit-probes=uretprobe", "--exit-probes=ret"] {
        let recording = record_unchanged(&program, &["20"], &[exits]);
        assert_counts_match(
            &own_counts(&recording.output.stdout),
            &recording.traced_counts(),
        );
        let replay = recording.report(&["--format=replay", "--max-depth", "3"]);
        let mut per_thread = std::collections::BTreeMap::<&str, u32>::new();
        for line in replay.lines() {
            let Some((left, call)) = line.split_once(" | ") else {
                continue;
            };
            if call.trim_start().starts_with("catch_through") {
                assert_eq!(call, "    catch_through(int);", "{exits}:\n{replay}");
                assert!(left.trim_start().ends_with(']'), "{exits}:\n{replay}");
                let (duration, tid) = left.rsplit_once('[').unwrap();
                assert!(!duration.trim().is_empty(), "untimed in {exits}:\n{replay}");
                *per_thread.entry(tid).or_default() += 1;
            }
        }
        assert_eq!(
            per_thread.values().copied().collect::<Vec<_>>(),
            [20, 20],
            "{exits}:\n{replay}"
        );
    }
}
