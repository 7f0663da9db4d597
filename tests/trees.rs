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

const NOTE_UNKNOWN_4: &str = "# note: 4 calls with unknown time (returns skipped by longjmp, \
     exceptions, the kernel's 64 nested return probes or lost events): counted, not timed";

/// The frames an exception skipped end where it was caught, with unknown time, and the catch's
/// calls and what follows are main's.
const CATCH_LOOP_TREE: &str = "\
main() {
  strtol@plt();
  thrower(int) {
    __cxa_allocate_exception@plt();
    std::runtime_error::runtime_error(char const*)@plt;
    __cxa_throw@plt(); /* time unknown */
  } /* thrower(int): time unknown */
  __cxa_begin_catch@plt();
  __cxa_end_catch@plt();
  work(int);
  thrower(int) {
    __cxa_allocate_exception@plt();
    std::runtime_error::runtime_error(char const*)@plt;
    __cxa_throw@plt(); /* time unknown */
  } /* thrower(int): time unknown */
  __cxa_begin_catch@plt();
  __cxa_end_catch@plt();
  work(int);
  printf@plt();
  printf@plt();
  printf@plt();
  printf@plt();
} /* main */
__cxa_finalize@plt();
";

fn assert_catch_loop_tree(name: &str, extra: &[&str]) {
    let program = compile("catch_loop.cpp", name, &[]);
    let recording = record_unchanged(&program, &["2"], extra);
    assert_counts_match(
        &own_counts(&recording.output.stdout),
        &recording.traced_counts(),
    );
    assert_eq!(
        tree(&recording, &[]),
        format!("{CATCH_LOOP_TREE}\n{NOTE_UNKNOWN_4}")
    );
}

#[test]
fn calls_after_a_catch_are_the_catching_functions_with_uretprobes() {
    if !bpf_available("calls_after_a_catch_are_the_catching_functions_with_uretprobes") {
        return;
    }
    // Its own copy: uretprobes act on every process that runs the file.
    assert_catch_loop_tree("catch_loop-uretprobe", &[]);
}
