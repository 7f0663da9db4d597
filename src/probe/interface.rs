//! Where Rust meets the BPF side's one definition of what it shares with the recorder
//! (`src/bpf/interface.h`): the skeleton libbpf-cargo generates (build.rs), with Rust types for
//! the event, the special function ids, the cookie bits and the settings.
//!
//! [`Event`] stays in `crate::event`, which the data layer uses without BPF and which imports
//! nothing of the project; here the compiler checks it against the generated `event`, field by
//! field, and its constants against the generated ones. The cookie bits are used only here, so
//! they are read from the generated types directly.

use std::mem::{align_of, offset_of, size_of};

use crate::event::Event;
use crate::value;
use skel::types;

#[allow(clippy::all, unused_imports)]
pub(super) mod skel {
    include!(concat!(env!("OUT_DIR"), "/utrace.skel.rs"));
}

// The same size and alignment, and every field at the same offset...
const _: () = {
    assert!(size_of::<Event>() == size_of::<types::event>());
    assert!(align_of::<Event>() == align_of::<types::event>());
    assert!(offset_of!(Event, timestamp_ns) == offset_of!(types::event, timestamp_ns));
    assert!(offset_of!(Event, tid) == offset_of!(types::event, tid));
    assert!(offset_of!(Event, function) == offset_of!(types::event, function));
    assert!(offset_of!(Event, stack) == offset_of!(types::event, stack));
    assert!(offset_of!(Event, pid) == offset_of!(types::event, pid));
};

// ...with the same names and types, and no other field on either side: both patterns are
// exhaustive, and the fields move without conversion.
const _: fn(types::event) -> Event = |event| {
    let types::event {
        timestamp_ns,
        tid,
        function,
        stack,
        pid,
    } = event;
    Event {
        timestamp_ns,
        tid,
        function,
        stack,
        pid,
    }
};

const _: () = {
    assert!(Event::TID_BITS == types::event_bits::EVENT_TID_BITS.0);
    assert!(Event::EXIT == 1 << types::event_bits::EVENT_EXIT_BIT.0);
    assert!(Event::LIBRARIES_CHANGED == types::special_function::EVENT_LIBRARIES_CHANGED.0);
    assert!(Event::PROCESS_FORKED == types::special_function::EVENT_PROCESS_FORKED.0);
    assert!(Event::PROCESS_EXECED == types::special_function::EVENT_PROCESS_EXECED.0);
    assert!(Event::UNWOUND == types::special_function::EVENT_UNWOUND.0);
    assert!(Event::VALUES == types::special_function::EVENT_VALUES.0);
    assert!(value::VALUES_MAX == types::value_bits::VALUES_MAX.0 as usize);
    assert!(value::ARGUMENT_MAX as u32 == types::value_bits::VALUE_SOURCE_MASK.0);
    assert!(value::STRING_ITEM as u32 == 1 << types::value_bits::VALUE_STRING_BIT.0);
    assert!(value::STACK_ITEM as u32 == 1 << types::value_bits::VALUE_STACK_BIT.0);
    assert!(value::STRING_SIZE_MAX as u32 == types::value_bits::VALUE_STRING_MAX.0);
};

/// Set in an entry probe's cookie when the entry instruction is also one of the function's exit
/// sites: two probes on one instruction would run in an order the kernel does not promise.
pub(super) const COOKIE_ALSO_EXIT: u64 = 1 << types::cookie_bits::COOKIE_ALSO_EXIT_BIT.0;
/// Set in an exit site's cookie when the site is the instruction after a call of a PLT stub: the
/// return address is popped there, so its slot is just below the stack pointer.
pub(super) const COOKIE_AFTER_RETURN: u64 = 1 << types::cookie_bits::COOKIE_AFTER_RETURN_BIT.0;

/// Set in an exit site's cookie when the site is a tail jump of a function that captures its
/// return value: the callee has yet to compute it.
pub(super) const COOKIE_NO_RETURN_VALUE: u64 =
    1 << types::cookie_bits::COOKIE_NO_RETURN_VALUE_BIT.0;

/// Set in the entry probe's cookie of a function whose return a separate return probe sees: the
/// legacy return probe finds its cookie where the entry left it (src/bpf/compat.bpf.h).
pub(super) const COOKIE_RETURN_PROBED: u64 = 1 << types::cookie_bits::COOKIE_RETURN_PROBED_BIT.0;

/// Set in the cookies of a Go program's function that is not Go code (cgo's C code, a PLT stub):
/// its calls pair by thread, as r14 holds no goroutine's `g` there.
pub(super) const COOKIE_NOT_GO: u64 = 1 << types::cookie_bits::COOKIE_NOT_GO_BIT.0;

/// Set in the cookies of the links of a function's generation 1 (see generations.rs).
pub(super) const COOKIE_GENERATION: u64 = 1 << types::cookie_bits::COOKIE_GENERATION_BIT.0;

/// The cookie of a library call probed where it lands: the call's function id, and where its
/// route is (a stub's or GOT slot's address, below 4 GiB: see [`crate::plan::Route`]) in the
/// high bits.
pub(super) fn landing_cookie(function: u32, route: u32) -> u64 {
    u64::from(function) | (u64::from(route) << types::cookie_bits::COOKIE_ROUTE_SHIFT.0)
}
