//! The event written by the BPF programs (`struct event` in `src/bpf/interface.h`, which the
//! probe layer checks this type against, field by field), read as it is from the ring buffer;
//! `utrace.data` stores it encoded (`src/data/format/events.rs`) and the reader decodes it back.

use std::marker::PhantomData;

use crate::table::FunctionId;

/// One function entry or exit on one thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// CLOCK_MONOTONIC, nanoseconds.
    pub timestamp_ns: u64,
    /// Kernel thread id in the low [`Event::TID_BITS`] bits, the CPU (modulo 1024) above: read
    /// them with [`Event::tid`] and [`Event::cpu`].
    pub tid: u32,
    /// Function id, with [`Event::EXIT`] set on exits.
    pub function: u32,
    /// Low 32 bits of the address of the call's return-address slot: the same on an exit as on
    /// its entry, which pairs them when other exits were never seen. 0 when unknown.
    pub stack: u32,
    /// Process id (tgid) of the thread; 0 when unknown.
    pub pid: u32,
}

// SAFETY: `Event` is `repr(C)`, made only of integers, has no padding (asserted below), and every
// bit pattern is a valid value.
unsafe impl plain::Plain for Event {}

const _: () = assert!(std::mem::size_of::<Event>() == 24);

impl Event {
    /// The bit of `function` that marks an exit (`EVENT_EXIT` in interface.h).
    pub const EXIT: u32 = 1 << 31;
    /// `function` of the ring buffer's note that a dlopen or dlclose returned
    /// (`EVENT_LIBRARIES_CHANGED`):
    /// never a function id, never written to a data file.
    pub const LIBRARIES_CHANGED: u32 = 0x7fff_ffff;
    /// `function` of the note that a process forked a followed one (`EVENT_PROCESS_FORKED`,
    /// `--follow`): `pid` is the child, `stack` the parent. Never written to a data file.
    pub const PROCESS_FORKED: u32 = 0x7fff_fffe;
    /// `function` of the note that process `pid` exec'ed (`EVENT_PROCESS_EXECED`, `--follow`).
    /// Kept in the data file, where it tells the replayer that the process's open calls will
    /// never return.
    pub const PROCESS_EXECED: u32 = 0x7fff_fffd;
    /// `function` of the note that the unwinder landed on the thread (`EVENT_UNWOUND`): the
    /// frames whose return-address slot lies below `stack` (low 32 bits of the landing's stack
    /// pointer) were skipped by an exception or a panic. Kept in the data file, where it tells
    /// the replayer to close them, with unknown time.
    pub const UNWOUND: u32 = 0x7fff_fffc;
    /// `function` of a piece of a call's captured values (`EVENT_VALUES`): up to 8 bytes in
    /// `timestamp_ns` (little-endian), their count in `stack`. A call's pieces come right before
    /// its event on the same thread, which takes them (see [`crate::value`] for their layout).
    pub const VALUES: u32 = 0x7fff_fffb;
    /// Bits of the `tid` field that hold the thread id (`EVENT_TID_BITS`): pid_max is at most
    /// 2^22, which leaves 10 bits for the CPU.
    pub const TID_BITS: u32 = 22;

    pub fn entry(timestamp_ns: u64, tid: u32, function: FunctionId) -> Event {
        Event {
            timestamp_ns,
            tid,
            function,
            ..Event::default()
        }
    }

    pub fn exit(timestamp_ns: u64, tid: u32, function: FunctionId) -> Event {
        Event {
            timestamp_ns,
            tid,
            function: function | Event::EXIT,
            ..Event::default()
        }
    }

    /// The pieces that carry `bytes` (a call's captured values) for `call`'s thread, to go
    /// before it.
    pub fn value_pieces<'a>(call: &Event, bytes: &'a [u8]) -> impl Iterator<Item = Event> + 'a {
        let (tid, pid) = (call.tid, call.pid);
        bytes.chunks(8).map(move |piece| {
            let mut word = [0u8; 8];
            word[..piece.len()].copy_from_slice(piece);
            Event {
                timestamp_ns: u64::from_le_bytes(word),
                tid,
                function: Event::VALUES,
                stack: piece.len() as u32,
                pid,
            }
        })
    }

    /// The bytes a value piece carries (at most 8; none when it says more).
    pub fn piece_bytes(&self) -> ([u8; 8], usize) {
        (
            self.timestamp_ns.to_le_bytes(),
            (self.stack as usize).min(8),
        )
    }

    /// The same event, for a call whose return-address slot is at `stack` (low 32 bits).
    pub fn at_stack(self, stack: u32) -> Event {
        Event { stack, ..self }
    }

    /// The same event, in process `pid`.
    pub fn in_process(self, pid: u32) -> Event {
        Event { pid, ..self }
    }

    /// The same event, marked as having happened on `cpu`.
    pub fn on_cpu(self, cpu: u32) -> Event {
        Event {
            tid: self.tid() | (cpu << Event::TID_BITS),
            ..self
        }
    }

    pub fn tid(&self) -> u32 {
        self.tid & ((1 << Event::TID_BITS) - 1)
    }

    /// The CPU the event happened on, modulo 1024.
    pub fn cpu(&self) -> u32 {
        self.tid >> Event::TID_BITS
    }

    pub fn function_id(&self) -> FunctionId {
        self.function & !Event::EXIT
    }

    pub fn is_exit(&self) -> bool {
        self.function & Event::EXIT != 0
    }
}

/// Blocks of events in time order per thread, lent one at a time (a reader returns a slice of
/// its own buffer, which is why this is not an [`Iterator`]).
pub trait EventSource {
    type Error: std::error::Error + Send + Sync + 'static;

    /// The next block, or `None` at the end.
    fn next_block(&mut self) -> Result<Option<&[Event]>, Self::Error>;
}

/// Blocks already in memory (tests, live mode's batches) as an [`EventSource`].
pub struct IterBlocks<'a, I> {
    blocks: I,
    // Ties `'a` to the source, so a block lent by `next_block` is known to outlive the borrow.
    _events: PhantomData<&'a [Event]>,
}

impl<'a, I: Iterator<Item = &'a [Event]>> IterBlocks<'a, I> {
    pub fn new(blocks: impl IntoIterator<IntoIter = I>) -> IterBlocks<'a, I> {
        IterBlocks {
            blocks: blocks.into_iter(),
            _events: PhantomData,
        }
    }
}

impl<'a, I: Iterator<Item = &'a [Event]>> EventSource for IterBlocks<'a, I> {
    type Error = std::convert::Infallible;

    fn next_block(&mut self) -> Result<Option<&[Event]>, Self::Error> {
        Ok(self.blocks.next())
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

    #[test]
    fn the_cpu_rides_above_the_thread_id() {
        let e = Event::exit(5, 4_194_303, 9).on_cpu(1023);
        assert_eq!((e.tid(), e.cpu(), e.function_id()), (4_194_303, 1023, 9));
        assert_eq!(Event::entry(5, 77, 9).cpu(), 0);
    }

    #[test]
    fn stack_and_process_are_their_own_fields() {
        let e = Event::exit(5, 7, 9)
            .on_cpu(3)
            .at_stack(0xffff_fff8)
            .in_process(6);
        assert_eq!((e.tid(), e.cpu(), e.function_id()), (7, 3, 9));
        assert_eq!((e.stack, e.pid, e.is_exit()), (0xffff_fff8, 6, true));
    }
}
