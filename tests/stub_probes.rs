//! End to end: PLT stubs whose callee is traced are not probed, and the counts stay exact.
//! `libcount.so` calls its own exported `lib_inner` through its PLT (`lib_inner@plt`), and
//! `uselib` calls `lib_outer` through its own: under `--nest-lib libcount*`, both callees are
//! traced, and their entry probes see every one of those calls.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::*;

/// `uselib`, linked with `libcount.so` (found through an `$ORIGIN` runpath).
fn uselib() -> PathBuf {
    let library = compile("libcount.c", "libcount.so", &["-shared", "-fPIC"]);
    compile_against("uselib.c", "uselib", &[], &library)
}

/// The program's own counts, but for `lib_outer@plt`: a stub not probed under `--nest-lib`.
fn counts_without_the_stub(stdout: &[u8]) -> BTreeMap<String, u64> {
    let mut own = own_counts(stdout);
    assert_eq!(own.remove("lib_outer@plt"), Some(5));
    own
}

#[test]
fn stubs_into_traced_functions_are_counted_once_on_the_callee() {
    if !bpf_available("stubs_into_traced_functions_are_counted_once_on_the_callee") {
        return;
    }
    let uselib = uselib();
    let recording = record(&uselib, &[], &["-d", "--nest-lib", "libcount*"]);
    assert_success(&recording.output);
    let own = counts_without_the_stub(&recording.output.stdout);
    assert_eq!(own["lib_outer"], 5);
    assert_eq!(own["lib_inner"], 50);
    let traced = recording.traced_counts();
    assert_counts_match(&own, &traced);
    assert_eq!(traced.get("main"), Some(&1), "{traced:?}");
    // The calls through the stubs are lib_outer's 5 and lib_inner's 50, once each.
    assert_eq!(traced.get("lib_outer@plt"), None, "{traced:?}");
    assert_eq!(traced.get("lib_inner@plt"), None, "{traced:?}");
    // printf's stubs call into libc, which is not traced.
    assert!(traced.get("printf@plt") >= Some(&3), "{traced:?}");
    let summary = recording.report(&["--format=summary"]);
    assert!(!summary.contains("lib_inner@plt"), "{summary}");
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert!(
        stderr.contains("libcount.so: 1 not probed (the traced function they call sees"),
        "{stderr}"
    );
}

#[test]
fn a_stub_stays_where_it_is_the_only_view_of_the_call_or_is_asked_for() {
    if !bpf_available("a_stub_stays_where_it_is_the_only_view_of_the_call_or_is_asked_for") {
        return;
    }
    let uselib = uselib();
    // lib_inner filtered out: its stub is what sees the calls.
    let filtered = record(
        &uselib,
        &[],
        &["--nest-lib", "libcount*", "--no-function", "lib_inner"],
    );
    assert_success(&filtered.output);
    let traced = filtered.traced_counts();
    assert_eq!(traced.get("lib_inner@plt"), Some(&50), "{traced:?}");
    assert_eq!(traced.get("lib_inner"), None, "{traced:?}");
    assert_eq!(traced.get("lib_outer"), Some(&5), "{traced:?}");
    assert_eq!(traced.get("lib_outer@plt"), None, "{traced:?}");

    // Named by a -f glob with an @: the stubs are probed beside their callees.
    let named = record(&uselib, &[], &["--nest-lib", "libcount*", "-f", "lib_*"]);
    assert_success(&named.output);
    assert_eq!(named.traced_counts().get("lib_inner@plt"), None);
    let asked = record(
        &uselib,
        &[],
        &["--nest-lib", "libcount*", "-f", "lib_*,*@plt"],
    );
    assert_success(&asked.output);
    let own = own_counts(&asked.output.stdout);
    let traced = asked.traced_counts();
    assert_eq!(traced.get("lib_inner@plt"), Some(&50), "{traced:?}");
    assert_eq!(traced.get("lib_inner"), Some(&50), "{traced:?}");
    assert_eq!(traced.get("lib_outer@plt"), Some(&5), "{traced:?}");
    assert_eq!(traced.get("lib_outer"), Some(&5), "{traced:?}");
    assert_counts_match(&own, &traced);
}
