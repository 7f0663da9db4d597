//! Where Rust meets the BPF side's C definitions: the skeleton libbpf-cargo generates from
//! `src/bpf/utrace.bpf.c` (build.rs), and the cookie bits the probes carry.

#[allow(clippy::all, unused_imports)]
pub(super) mod skel {
    include!(concat!(env!("OUT_DIR"), "/utrace.skel.rs"));
}

/// Set in an entry probe's cookie when the entry instruction is also one of the function's exit
/// sites (`COOKIE_ALSO_EXIT` in utrace.bpf.c): two probes on one instruction would run in an
/// order the kernel does not promise.
pub(super) const COOKIE_ALSO_EXIT: u64 = 1 << 32;
/// Set in an exit site's cookie when the site is the instruction after a call of a PLT stub
/// (`COOKIE_AFTER_RETURN` in utrace.bpf.c): the return address is popped there, so its slot is
/// just below the stack pointer.
pub(super) const COOKIE_AFTER_RETURN: u64 = 1 << 33;

/// The cookie of a PLT call probed where it lands: the stub's function id, and the stub's virtual
/// address in the executable in the high 32 bits.
pub(super) fn landing_cookie(function: u32, stub: u64) -> u64 {
    u64::from(function) | (stub << 32)
}
