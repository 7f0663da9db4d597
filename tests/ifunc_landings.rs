//! End to end: PLT calls into libc's ifuncs (`memcmp@plt`) probed in the implementation libc's
//! resolver chose for this CPU (`__memcmp_avx2_movbe`), where the kernel emulates an
//! instruction, instead of on their stub, which it single-steps; counted exactly though libc
//! calls the same implementations itself (`test/ifuncs.c`). Needs libc's debug file
//! (libc6-dbg, which tools/setup.sh installs): without it the stubs keep their probe.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::*;

const ROUNDS: &str = "400";

/// The ifuncs whose PLT calls land in their implementation here. `memcpy` has two versions in
/// libc: the program asks for the default one, `memcpy@@GLIBC_2.14`, the ifunc. Its
/// implementation is `memmove`'s: the two stubs' probes share a site.
const LANDED: [&str; 6] = ["memcmp", "memcpy", "memmove", "strlen", "memset", "strchr"];

fn ifuncs() -> PathBuf {
    compile("ifuncs.c", "ifuncs", &["-fno-builtin"])
}

/// Where `record -d` says the calls through `name@plt` are probed, when in an ifunc's
/// implementation: its name.
fn implementation_of<'a>(stderr: &'a str, name: &str) -> Option<&'a str> {
    let prefix = format!("utrace: {name}@plt: probed in ");
    stderr.lines().find_map(|line| {
        let rest = line.strip_prefix(&prefix)?;
        rest.split_once(' ')
            .map(|(implementation, _)| implementation)
    })
}

/// Records `ifuncs` with `flags` and `-d`; checks that every count the program made is
/// utrace's, and returns what `record -d` said.
fn record_ifuncs(flags: &[&str], variables: &[(&str, &str)]) -> String {
    let program = ifuncs();
    let mut all = vec!["-d"];
    all.extend_from_slice(flags);
    let recording = record_unchanged_with_env(&program, &[ROUNDS], &all, variables);
    let own: BTreeMap<String, u64> = own_counts(&recording.output.stdout);
    assert_eq!(own.len(), 6, "{own:?}");
    for (name, count) in &own {
        let per_round = if name == "memcpy@plt" { 2 } else { 1 };
        assert_eq!(*count, 400 * per_round, "{name}");
    }
    // libc's own stubs may share a name, under --nest-lib: the program's count.
    assert_counts_match(&own, &counts_by_module(&recording.json())["ifuncs"]);
    String::from_utf8_lossy(&recording.output.stderr).into_owned()
}

#[test]
fn plt_calls_into_ifuncs_are_counted_exactly_in_their_implementation() {
    if !bpf_available("plt_calls_into_ifuncs_are_counted_exactly_in_their_implementation") {
        return;
    }
    let stderr = record_ifuncs(&[], &[]);
    // The landing was used, or the counts above prove nothing new: each call was probed in the
    // implementation (__memcmp_avx2_movbe, __strlen_avx2...), not on its stub.
    for name in LANDED {
        let implementation = implementation_of(&stderr, name);
        assert!(
            implementation.is_some_and(|found| found.starts_with(&format!("__{name}_"))),
            "{name}@plt: {implementation:?} (is libc6-dbg installed?): {stderr}"
        );
    }
    assert!(!stderr.contains("keep their stub"), "{stderr}");
}

#[test]
fn plt_calls_into_ifuncs_keep_their_stub_where_landings_are_off() {
    if !bpf_available("plt_calls_into_ifuncs_keep_their_stub_where_landings_are_off") {
        return;
    }
    for flags in [&["--exit-probes=ret"][..], &["--probe-at-entry"]] {
        let stderr = record_ifuncs(flags, &[]);
        for name in LANDED {
            assert_eq!(
                implementation_of(&stderr, name),
                None,
                "{flags:?}: {stderr}"
            );
        }
    }
}

#[test]
fn plt_calls_into_ifuncs_keep_their_stub_under_glibc_tunables() {
    if !bpf_available("plt_calls_into_ifuncs_keep_their_stub_under_glibc_tunables") {
        return;
    }
    // The process's loader may choose otherwise than utrace's (here it does: no AVX2).
    let tunables = [("GLIBC_TUNABLES", "glibc.cpu.hwcaps=-AVX2_Usable,-AVX2")];
    let stderr = record_ifuncs(&[], &tunables);
    for name in LANDED {
        assert_eq!(implementation_of(&stderr, name), None, "{stderr}");
    }
    assert!(
        stderr.contains(
            "PLT calls into ifuncs keep their stub: GLIBC_TUNABLES is set for the traced process"
        ),
        "{stderr}"
    );
}

#[test]
fn plt_calls_into_ifuncs_of_a_traced_libc_keep_their_stub() {
    if !bpf_available("plt_calls_into_ifuncs_of_a_traced_libc_keep_their_stub") {
        return;
    }
    // libc's own probe on the implementation may come before the landing's, at an earlier
    // site, and take the return address the landing's check reads: the counts stay exact
    // because the stubs keep their probes.
    let stderr = record_ifuncs(&["--nest-lib", "libc.so*"], &[]);
    for name in LANDED {
        assert_eq!(implementation_of(&stderr, name), None, "{stderr}");
    }
    assert!(
        stderr.contains("into a traced library, whose own probes may come first"),
        "{stderr}"
    );
}
