//! The event written by the BPF programs (`src/bpf/event.h`), read as it is from the ring buffer
//! and from `utrace.data` event blocks.

use crate::plan::FunctionId;

/// One function entry or exit on one thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// CLOCK_MONOTONIC, nanoseconds.
    pub timestamp_ns: u64,
    /// Kernel thread id.
    pub tid: u32,
    /// Function id, with [`Event::EXIT`] set on exits.
    pub function: u32,
}

// SAFETY: `Event` is `repr(C)`, made only of integers, has no padding (asserted below), and every
// bit pattern is a valid value.
unsafe impl plain::Plain for Event {}

const _: () = assert!(std::mem::size_of::<Event>() == 16);

impl Event {
    /// The bit of `function` that marks an exit (`EVENT_EXIT` in event.h).
    pub const EXIT: u32 = 1 << 31;
    /// Size of one event in bytes, in the ring buffer and on disk.
    pub const SIZE: usize = std::mem::size_of::<Event>();

    pub fn entry(timestamp_ns: u64, tid: u32, function: FunctionId) -> Event {
        Event {
            timestamp_ns,
            tid,
            function,
        }
    }

    pub fn exit(timestamp_ns: u64, tid: u32, function: FunctionId) -> Event {
        Event {
            timestamp_ns,
            tid,
            function: function | Event::EXIT,
        }
    }

    pub fn function_id(&self) -> FunctionId {
        self.function & !Event::EXIT
    }

    pub fn is_exit(&self) -> bool {
        self.function & Event::EXIT != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_bit_is_separate_from_the_id() {
        let e = Event::exit(5, 7, 1234);
        assert!(e.is_exit());
        assert_eq!(e.function_id(), 1234);
        let e = Event::entry(5, 7, 1234);
        assert!(!e.is_exit());
        assert_eq!(e.function_id(), 1234);
    }
}
