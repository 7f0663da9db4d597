//! The events payload: each event as the change from the one before it, a tag byte and a few
//! varints, about 3 bytes where the event takes 24 in memory.
//!
//! ```text
//! payload: count: varint | count × event
//! event:   tag: u8 | thread? | timestamp: zigzag varint | function? | stack?
//! tag:     bit 0       exit
//!          bit 1       the function id differs from the thread's previous one: a zigzag varint
//!                      of the difference (mod 2^32) follows
//!          bit 2       the stack differs from the thread's previous one: a zigzag varint of the
//!                      difference (mod 2^32) follows
//!          bits 3-4    the thread: 0 = that of the previous event; 1 = a thread seen before in
//!                      this chunk, its index (from 0, in order of first appearance) follows as a
//!                      varint; 2 = a thread new to the chunk, its `tid` field (CPU included) and
//!                      pid follow as varints
//!          bit 5       a piece of a call's captured values ([`Event::VALUES`]): in place of the
//!                      timestamp, function and stack, its byte count (1-8) as a u8 and the
//!                      bytes follow; the exit bit is 0, and the thread's timestamp, function
//!                      and stack are left as they are
//!          bit 6       (version 7) the exit of the thread's innermost open call: its function
//!                      and stack are that call's, and bits 1-2 are 0
//!          bit 7       0
//! ```
//!
//! A varint is LEB128: 7 bits a byte, low bits first, the top bit set on every byte but the last.
//! A zigzag varint maps differences 0, -1, 1, -2, ... to 0, 1, 2, 3, ... first. The timestamp is
//! the difference from the previous event of the chunk (mod 2^64; from 0 for the first). A
//! "thread" is a (`tid` field, pid) pair: a thread that moves to another CPU starts a new one.
//! Its previous function id and stack are 0 when it is new.
//!
//! Each thread's open calls are kept as writer and reader go, the same way on both sides: an
//! entry opens a call (up to [`MAX_OPEN_CALLS`] deep); an exit closes the innermost open call of
//! its function and stack, and every call opened after it (their exits were not seen: longjmp,
//! the kernel's uretprobe nesting limit, lost events), or nothing when there is none. So most
//! exits take a tag and a timestamp only, where returning to the caller's function and stack
//! took two more varints. Nothing carries over from one chunk to the next, so each chunk reads on
//! its own.

use crate::event::Event;
use crate::fast_hash::FastHashMap;

use super::EVENTS_PER_CHUNK;

const EXIT: u8 = 1 << 0;
const NEW_FUNCTION: u8 = 1 << 1;
const NEW_STACK: u8 = 1 << 2;
const THREAD_SHIFT: u32 = 3;
const THREAD_MASK: u8 = 0b11 << THREAD_SHIFT;
const THREAD_SAME: u8 = 0 << THREAD_SHIFT;
const THREAD_SEEN: u8 = 1 << THREAD_SHIFT;
const THREAD_NEW: u8 = 2 << THREAD_SHIFT;
const VALUES: u8 = 1 << 5;
const RETURN: u8 = 1 << 6;
const RESERVED: u8 = !(EXIT | NEW_FUNCTION | NEW_STACK | THREAD_MASK | VALUES | RETURN);
/// How deep a thread's open calls are followed; deeper entries are not, and their exits are
/// written whole.
const MAX_OPEN_CALLS: usize = 1024;
/// The fewest bytes an event takes: its tag and a one-byte timestamp.
const MIN_EVENT_LEN: usize = 2;
/// The most: its tag, a new thread (two 5-byte varints), a 10-byte timestamp, a function id and
/// a stack of 5 bytes each.
const MAX_EVENT_LEN: usize = 1 + 5 + 5 + 10 + 5 + 5;
/// The longest payload a chunk of [`EVENTS_PER_CHUNK`] events can have: readers refuse longer
/// ones before reading them.
pub const MAX_EVENTS_LEN: usize = 3 + EVENTS_PER_CHUNK * MAX_EVENT_LEN;

/// What a thread's next event is encoded against.
#[derive(Clone, Copy, Debug, Default)]
struct Thread {
    tid: u32,
    pid: u32,
    function: u32,
    stack: u32,
}

/// The (function, stack) of each call a thread has open in the chunk, innermost last.
#[derive(Default)]
struct OpenCalls {
    /// Per thread index; kept between chunks to reuse the vectors.
    threads: Vec<Vec<(u32, u32)>>,
    /// How many of `threads` are in use in this chunk.
    used: usize,
}

impl OpenCalls {
    fn clear(&mut self) {
        self.used = 0;
    }

    /// Makes room for a thread new to the chunk, with no open call.
    fn add_thread(&mut self) {
        if self.used == self.threads.len() {
            self.threads.push(Vec::new());
        }
        self.threads[self.used].clear();
        self.used += 1;
    }

    /// Whether the innermost open call of `thread` is (`function`, `stack`).
    fn is_innermost(&self, thread: usize, function: u32, stack: u32) -> bool {
        self.threads[thread].last() == Some(&(function, stack))
    }

    /// Follows an event of `thread` (see the module's documentation).
    #[inline]
    fn follow(&mut self, thread: usize, exit: bool, function: u32, stack: u32) {
        let calls = &mut self.threads[thread];
        if !exit {
            if calls.len() < MAX_OPEN_CALLS {
                calls.push((function, stack));
            }
        } else if let Some(at) = calls.iter().rposition(|&call| call == (function, stack)) {
            calls.truncate(at);
        }
    }
}

/// Encodes events chunk by chunk, keeping its tables between chunks to allocate nothing once they
/// have grown.
#[derive(Default)]
pub struct EventEncoder {
    index: FastHashMap<(u32, u32), u32>,
    threads: Vec<Thread>,
    open: OpenCalls,
    /// Value pieces encoded so far, in every chunk.
    pieces: u64,
}

impl EventEncoder {
    /// How many of the events encoded so far were value pieces.
    pub fn pieces_encoded(&self) -> u64 {
        self.pieces
    }

    /// Writes the payload of one chunk of `events` (at most [`EVENTS_PER_CHUNK`]) into `out`.
    pub fn encode(&mut self, events: &[Event], out: &mut Vec<u8>) {
        debug_assert!(events.len() <= EVENTS_PER_CHUNK);
        self.index.clear();
        self.threads.clear();
        self.open.clear();
        out.clear();
        put_varint(out, events.len() as u64);
        let mut timestamp = 0u64;
        let mut current = usize::MAX;
        for event in events {
            let mut tag = if event.is_exit() { EXIT } else { 0 };
            let key = (event.tid, event.pid);
            let tag_at = out.len();
            out.push(0);
            if self
                .threads
                .get(current)
                .is_some_and(|t| (t.tid, t.pid) == key)
            {
                tag |= THREAD_SAME;
            } else if let Some(&seen) = self.index.get(&key) {
                tag |= THREAD_SEEN;
                current = seen as usize;
                put_varint(out, u64::from(seen));
            } else {
                tag |= THREAD_NEW;
                current = self.threads.len();
                self.index.insert(key, current as u32);
                self.threads.push(Thread {
                    tid: event.tid,
                    pid: event.pid,
                    ..Thread::default()
                });
                self.open.add_thread();
                put_varint(out, u64::from(event.tid));
                put_varint(out, u64::from(event.pid));
            }
            if event.function == Event::VALUES {
                self.pieces += 1;
                let (bytes, len) = event.piece_bytes();
                out.push(len as u8);
                out.extend_from_slice(&bytes[..len]);
                out[tag_at] = tag | VALUES;
                continue;
            }
            put_varint(out, zigzag64(event.timestamp_ns.wrapping_sub(timestamp)));
            timestamp = event.timestamp_ns;
            let thread = &mut self.threads[current];
            let function = event.function_id();
            let exit = event.is_exit();
            if exit && self.open.is_innermost(current, function, event.stack) {
                tag |= RETURN;
                thread.function = function;
                thread.stack = event.stack;
            } else {
                if function != thread.function {
                    tag |= NEW_FUNCTION;
                    put_varint(out, zigzag32(function.wrapping_sub(thread.function)));
                    thread.function = function;
                }
                if event.stack != thread.stack {
                    tag |= NEW_STACK;
                    put_varint(out, zigzag32(event.stack.wrapping_sub(thread.stack)));
                    thread.stack = event.stack;
                }
            }
            self.open.follow(current, exit, function, event.stack);
            out[tag_at] = tag;
        }
        debug_assert!(out.len() <= MAX_EVENTS_LEN);
    }
}

/// Decodes events payloads into a buffer it reuses: no allocation once the buffer has grown to
/// the largest chunk.
#[derive(Default)]
pub struct EventDecoder {
    threads: Vec<Thread>,
    open: OpenCalls,
}

impl EventDecoder {
    /// Decodes `payload` into `events[..count]`, growing `events` when it is shorter, and
    /// returns `count`. A payload that does not decode gives the reason, whatever its bytes.
    pub fn decode(
        &mut self,
        payload: &[u8],
        events: &mut Vec<Event>,
    ) -> Result<usize, &'static str> {
        self.threads.clear();
        self.open.clear();
        let mut input = Input {
            bytes: payload,
            at: 0,
        };
        let count = input.varint()?;
        if count > EVENTS_PER_CHUNK as u64 {
            return Err("more events than a chunk may hold");
        }
        let count = count as usize;
        if count.saturating_mul(MIN_EVENT_LEN) > input.remaining() {
            return Err("more events than its bytes can hold");
        }
        if events.len() < count {
            events.resize(count, Event::default());
        }
        let mut timestamp = 0u64;
        // The thread of the previous event, kept out of `threads` until another one comes.
        let mut current = None::<usize>;
        let mut thread = Thread::default();
        for slot in &mut events[..count] {
            let tag = input.byte()?;
            if tag & RESERVED != 0 {
                return Err("an event tag with reserved bits set");
            }
            let kind = tag & THREAD_MASK;
            if kind != THREAD_SAME {
                if let Some(index) = current {
                    self.threads[index] = thread;
                }
                if kind == THREAD_SEEN {
                    let index = usize::try_from(input.varint()?).unwrap_or(usize::MAX);
                    thread = *self
                        .threads
                        .get(index)
                        .ok_or("an event of a thread not defined in the chunk")?;
                    current = Some(index);
                } else if kind == THREAD_NEW {
                    thread = Thread {
                        tid: input.varint32()?,
                        pid: input.varint32()?,
                        ..Thread::default()
                    };
                    current = Some(self.threads.len());
                    self.threads.push(thread);
                    self.open.add_thread();
                } else {
                    return Err("an event tag with an unknown thread kind");
                }
            } else if current.is_none() {
                return Err("an event of a thread not defined in the chunk");
            }
            if tag & VALUES != 0 {
                *slot = decode_piece(tag, &mut input, &thread)?;
                continue;
            }
            timestamp = timestamp.wrapping_add(unzigzag64(input.varint()?));
            // Set: a thread is defined above.
            let index = current.unwrap_or_default();
            if tag & RETURN != 0 {
                if tag & (EXIT | NEW_FUNCTION | NEW_STACK) != EXIT {
                    return Err("a return tag with an entry's or a new function's bits");
                }
                let &(function, stack) = (self.open.threads[index].last())
                    .ok_or("a return on a thread with no open call")?;
                thread.function = function;
                thread.stack = stack;
            }
            if tag & NEW_FUNCTION != 0 {
                let delta = unzigzag32(input.varint32()?);
                thread.function = thread.function.wrapping_add(delta) & !Event::EXIT;
            }
            if tag & NEW_STACK != 0 {
                thread.stack = thread.stack.wrapping_add(unzigzag32(input.varint32()?));
            }
            let exit = if tag & EXIT != 0 { Event::EXIT } else { 0 };
            (self.open).follow(index, exit != 0, thread.function, thread.stack);
            *slot = Event {
                timestamp_ns: timestamp,
                tid: thread.tid,
                function: thread.function | exit,
                stack: thread.stack,
                pid: thread.pid,
            };
        }
        if input.remaining() != 0 {
            return Err("bytes after the last event");
        }
        Ok(count)
    }
}

/// The rest of a value piece of `thread` whose `tag` has been read.
fn decode_piece(tag: u8, input: &mut Input, thread: &Thread) -> Result<Event, &'static str> {
    if tag & (EXIT | NEW_FUNCTION | NEW_STACK) != 0 {
        return Err("a value piece with an event's bits set");
    }
    let len = usize::from(input.byte()?);
    if !(1..=8).contains(&len) {
        return Err("a value piece of more than 8 bytes");
    }
    let mut word = [0u8; 8];
    for byte in &mut word[..len] {
        *byte = input.byte()?;
    }
    Ok(Event {
        timestamp_ns: u64::from_le_bytes(word),
        tid: thread.tid,
        function: Event::VALUES,
        stack: len as u32,
        pid: thread.pid,
    })
}

/// The payload being decoded and where in it.
struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Input<'_> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    #[inline]
    fn byte(&mut self) -> Result<u8, &'static str> {
        let byte = *self.bytes.get(self.at).ok_or("the events end early")?;
        self.at += 1;
        Ok(byte)
    }

    #[inline]
    fn varint(&mut self) -> Result<u64, &'static str> {
        // Most varints here take one or two bytes.
        match self.bytes[self.at..] {
            [first, ..] if first < 0x80 => {
                self.at += 1;
                return Ok(u64::from(first));
            }
            [first, second, ..] if second < 0x80 => {
                self.at += 2;
                return Ok(u64::from(first & 0x7f) | u64::from(second) << 7);
            }
            _ => {}
        }
        self.long_varint()
    }

    #[cold]
    fn long_varint(&mut self) -> Result<u64, &'static str> {
        let first = self.byte()?;
        let mut value = u64::from(first & 0x7f);
        let mut shift = 7;
        loop {
            let byte = self.byte()?;
            // The tenth byte holds bit 63 alone.
            if shift == 63 && byte > 1 {
                return Err("a varint longer than 64 bits");
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
            shift += 7;
        }
    }

    #[inline]
    fn varint32(&mut self) -> Result<u32, &'static str> {
        u32::try_from(self.varint()?).map_err(|_| "a varint longer than 32 bits")
    }
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn zigzag64(delta: u64) -> u64 {
    let delta = delta as i64;
    ((delta << 1) ^ (delta >> 63)) as u64
}

fn unzigzag64(value: u64) -> u64 {
    (value >> 1) ^ (value & 1).wrapping_neg()
}

fn zigzag32(delta: u32) -> u64 {
    let delta = delta as i32;
    u64::from(((delta << 1) ^ (delta >> 31)) as u32)
}

fn unzigzag32(value: u32) -> u32 {
    (value >> 1) ^ (value & 1).wrapping_neg()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(events: &[Event]) -> Vec<u8> {
        let mut payload = Vec::new();
        EventEncoder::default().encode(events, &mut payload);
        let mut decoded = Vec::new();
        let count = EventDecoder::default()
            .decode(&payload, &mut decoded)
            .unwrap();
        assert_eq!(&decoded[..count], events);
        payload
    }

    #[test]
    fn zigzag_maps_small_differences_to_small_numbers() {
        assert_eq!(
            [0, -1i64 as u64, 1, -2i64 as u64].map(zigzag64),
            [0, 1, 2, 3]
        );
        assert_eq!([0, u32::MAX, 1, u32::MAX - 1].map(zigzag32), [0, 1, 2, 3]);
        for value in [0, 1, 2, 3, u64::MAX, u64::MAX - 1, 1 << 63] {
            assert_eq!(unzigzag64(zigzag64(value)), value);
        }
        for value in [0, 1, 2, 3, u32::MAX, u32::MAX - 1, 1 << 31] {
            assert_eq!(unzigzag32(zigzag32(value) as u32), value);
        }
    }

    #[test]
    fn every_field_round_trips_at_its_extremes() {
        let thread_7 =
            |event: Event, cpu, stack, pid| event.on_cpu(cpu).at_stack(stack).in_process(pid);
        let events = [
            Event::entry(u64::MAX, u32::MAX, 0x7fff_fffe)
                .at_stack(u32::MAX)
                .in_process(u32::MAX),
            Event::exit(0, 0, 0),
            Event::exit(1 << 63, 4_194_303, 0x7fff_fffe).on_cpu(1023),
            thread_7(Event::entry(5, 7, 9), 3, 0x8000_0000, 6),
            thread_7(Event::exit(4, 7, 9), 3, 0x7fff_fff8, 6),
            // The same tid in another process, and on another CPU: other threads.
            thread_7(Event::exit(4, 7, 9), 3, 0x7fff_fff8, 8),
            thread_7(Event::exit(4, 7, 9), 4, 0x7fff_fff8, 6),
            Event::entry(4, 7, 1).on_cpu(3).in_process(6),
        ];
        round_trip(&events);
    }

    #[test]
    fn a_call_takes_six_bytes() {
        // A leaf called in a loop every 900 ns: a tag and a two-byte timestamp per event, after
        // the two-byte count and the first event (tag, two-byte tid and pid, six-byte timestamp,
        // function, five-byte stack).
        let events: Vec<Event> = (0..1000u64)
            .flat_map(|i| {
                let t = 1_000_000_000_000 + i * 900;
                [
                    Event::entry(t, 4321, 17)
                        .at_stack(0x1234_5678)
                        .in_process(4321),
                    Event::exit(t + 400, 4321, 17)
                        .at_stack(0x1234_5678)
                        .in_process(4321),
                ]
            })
            .collect();
        let payload = round_trip(&events);
        assert_eq!(payload.len(), 2 + 17 + (2000 - 1) * 3);
    }

    #[test]
    fn returns_to_a_caller_take_a_tag_and_a_timestamp() {
        // a → b → c, each exit 100 ns after the event before: every exit returns from the
        // innermost open call. Then a's exit again, with nothing open: written whole.
        let at = |event: Event, stack: u32| event.at_stack(stack).in_process(9);
        let events = [
            at(Event::entry(1_000, 9, 1), 0x1000),
            at(Event::entry(1_100, 9, 2), 0x0fe0),
            at(Event::entry(1_200, 9, 3), 0x0fc0),
            at(Event::exit(1_300, 9, 3), 0x0fc0),
            at(Event::exit(1_400, 9, 2), 0x0fe0),
            at(Event::exit(1_500, 9, 1), 0x1000),
            at(Event::exit(1_600, 9, 1), 0x1000),
        ];
        let payload = round_trip(&events);
        // The count; a's entry: tag, tid, pid, a two-byte timestamp, function, two-byte stack;
        // b's and c's: tag, timestamp, function, stack; each exit: tag and timestamp (the last
        // one has nothing new either: the return before left the thread at a's function and
        // stack).
        let entries = 1 + 8 + 2 * 5;
        assert_eq!(payload.len(), entries + 4 * 3, "{payload:?}");
        let tags: Vec<u8> = (0..4).map(|exit| payload[entries + 3 * exit]).collect();
        assert_eq!(tags, [RETURN | EXIT, RETURN | EXIT, RETURN | EXIT, EXIT]);
    }

    #[test]
    fn value_pieces_round_trip_and_leave_their_thread_as_it_was() {
        let entry = Event::entry(1_000, 7, 3).at_stack(0x100).in_process(7);
        let exit = Event::exit(1_500, 7, 3).at_stack(0x100).in_process(7);
        let other = Event::entry(1_200, 8, 3).at_stack(0x100).in_process(7);
        let arguments: Vec<u8> = (1..=11).collect();
        let mut events: Vec<Event> = Event::value_pieces(&entry, &arguments).collect();
        events.push(entry);
        events.extend(Event::value_pieces(&other, &[0xff]));
        events.push(other);
        events.extend(Event::value_pieces(&exit, &[5, 0, 0, 0, 0, 0, 0, 0]));
        events.push(exit);
        let payload = round_trip(&events);
        // Without the pieces, the exit (same function and stack as the entry) takes 3 bytes: the
        // pieces cost their bytes, their count and their tag.
        let bare = round_trip(&[entry, other, exit]);
        assert_eq!(
            payload.len(),
            bare.len() + (2 + 8) + (2 + 3) + (2 + 1) + (2 + 8)
        );
        assert_eq!(events[0].piece_bytes(), ([1, 2, 3, 4, 5, 6, 7, 8], 8));
        assert_eq!(events[1].piece_bytes().1, 3);
    }

    #[test]
    fn threads_seen_before_are_named_by_index() {
        let events: Vec<Event> = (0..300u32)
            .map(|i| Event::entry(u64::from(i), 100 + i % 3, i % 7).at_stack(64 * (i % 5)))
            .collect();
        round_trip(&events);
    }

    #[test]
    fn the_longest_payload() {
        // Every event a new thread, with the largest differences each field can have.
        let events: Vec<Event> = (0..EVENTS_PER_CHUNK as u32)
            .map(|i| Event {
                timestamp_ns: if i % 2 == 0 { 1 << 63 } else { 0 },
                tid: u32::MAX - i,
                function: 0x7fff_ffff,
                stack: 0x8000_0000,
                pid: u32::MAX,
            })
            .collect();
        assert_eq!(round_trip(&events).len(), MAX_EVENTS_LEN);
    }

    #[test]
    fn a_chunk_without_events() {
        assert_eq!(round_trip(&[]), [0]);
    }

    #[test]
    fn decoding_reuses_the_buffer_and_keeps_its_length() {
        let mut decoder = EventDecoder::default();
        let mut payload = Vec::new();
        let mut encoder = EventEncoder::default();
        let mut events = Vec::new();
        encoder.encode(&[Event::entry(1, 2, 3); 10], &mut payload);
        assert_eq!(decoder.decode(&payload, &mut events), Ok(10));
        let buffer = events.as_ptr();
        encoder.encode(&[Event::exit(1, 2, 3); 4], &mut payload);
        assert_eq!(decoder.decode(&payload, &mut events), Ok(4));
        assert_eq!((events.as_ptr(), events.len()), (buffer, 10));
        assert_eq!(events[..4], [Event::exit(1, 2, 3); 4]);
    }

    #[test]
    fn bad_payloads_give_reasons() {
        let mut long = vec![1, 0x10, 1, 1];
        long.extend([0xff; 9]);
        long.push(2);
        let cases: [(&[u8], &str); 16] = [
            (&[], "the events end early"),
            // 65,537 events.
            (&[0x81, 0x80, 0x04], "more events than a chunk may hold"),
            (&[2, 0x10, 0], "more events than its bytes can hold"),
            (&[1, 0x80, 0], "an event tag with reserved bits set"),
            (
                &[1, 0x51, 1, 2, 0],
                "a return on a thread with no open call",
            ),
            (
                &[1, 0x50, 1, 2, 0],
                "a return tag with an entry's or a new function's bits",
            ),
            (&[1, 0x30, 1, 1, 9], "a value piece of more than 8 bytes"),
            (
                &[1, 0x31, 1, 1, 1, 0],
                "a value piece with an event's bits set",
            ),
            (&[1, 0x18, 0], "an event tag with an unknown thread kind"),
            (
                &[1, 0x00, 0],
                "an event of a thread not defined in the chunk",
            ),
            (
                &[1, 0x08, 0],
                "an event of a thread not defined in the chunk",
            ),
            (&[1, 0x10, 1, 2, 0, 9], "bytes after the last event"),
            (
                &[1, 0x10, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0],
                "a varint longer than 32 bits",
            ),
            (&long, "a varint longer than 64 bits"),
            (&[1, 0x10, 1, 1, 0x80], "the events end early"),
            (&[1, 0x10, 1, 1, 0x80, 0x80], "the events end early"),
        ];
        for (payload, reason) in cases {
            let decoded = EventDecoder::default().decode(payload, &mut Vec::new());
            assert_eq!(decoded, Err(reason), "{payload:?}");
        }
    }
}
