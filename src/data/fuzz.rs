//! Property tests of the reader over hostile input (`report/fuzz.rs` puts the same input through
//! the reports): arbitrary bytes, mutations
//! of a valid recording, and well-formed files full of arbitrary events. None may panic, and a
//! damaged file may lose events but never invent one. Cases are fixed per run (see
//! [`CASES`]) so the suite stays well under a minute in release builds.

use std::io::Cursor;
use std::path::Path;

use proptest::prelude::*;

use super::format::{self, ChunkHeader, ChunkKind, EventDecoder, EventEncoder};
use super::{DataReader, Metadata, Statistics};
use crate::event::Event;
use crate::fuzz_cases::config;
use crate::table::{FunctionKind, FunctionTable, TracedFunction};

const PATH: &str = "fuzz.data";

/// A whole recording in memory, built chunk by chunk with the format module.
pub(crate) fn recording(functions: usize, blocks: &[Vec<Event>], statistics: bool) -> Vec<u8> {
    let metadata = Metadata {
        command: vec!["./prog".into(), "a b".into()],
        pid: 77,
        start_monotonic_ns: 5,
        start_realtime_ns: 6,
        hostname: "h".into(),
        kernel: "k".into(),
        utrace_version: "v".into(),
        probe_costs: None,
    };
    let table = FunctionTable {
        modules: vec!["/bin/prog".into()],
        functions: (0..functions)
            .map(|i| TracedFunction {
                name: format!("f{i}"),
                module: 0,
                offset: 16 * i as u64,
                size: 16,
                kind: FunctionKind::Function,
                probes: Default::default(),
                values: Vec::new(),
                user_stack: false,
                argument_names: Vec::new(),
                source: None,
                detached: None,
            })
            .collect(),
        ..Default::default()
    };
    let mut bytes = format::file_header().to_vec();
    let mut chunk = |kind, payload: &[u8], events: usize| {
        let header = match kind {
            ChunkKind::Events => ChunkHeader::for_events(payload, events),
            _ => ChunkHeader::for_payload(kind, payload),
        };
        bytes.extend(header.encode());
        bytes.extend_from_slice(payload);
    };
    chunk(ChunkKind::Metadata, &format::encode(&metadata).unwrap(), 0);
    chunk(
        ChunkKind::FunctionTable,
        &format::encode(&table).unwrap(),
        0,
    );
    let mut encoder = EventEncoder::default();
    let mut payload = Vec::new();
    let events: usize = blocks.iter().map(Vec::len).sum();
    for block in blocks {
        encoder.encode(block, &mut payload);
        chunk(ChunkKind::Events, &payload, block.len());
    }
    if statistics {
        let statistics = Statistics {
            events: events as u64,
            lost_events: 0,
            duration_ns: 1,
            lost_by_thread: Vec::new(),
        };
        chunk(
            ChunkKind::Statistics,
            &format::encode(&statistics).unwrap(),
            0,
        );
    }
    bytes
}

/// A small valid recording: nested calls on two threads in three blocks.
pub(crate) fn valid_recording() -> (Vec<u8>, Vec<Event>) {
    let blocks: Vec<Vec<Event>> = (0..3u64)
        .map(|block| {
            (0..8u64)
                .flat_map(|i| {
                    let t = block * 1000 + i * 10;
                    let tid = 100 + (i % 2) as u32;
                    let function = (i % 3) as u32;
                    [
                        Event::entry(t, tid, function),
                        Event::exit(t + 5, tid, function),
                    ]
                })
                .collect()
        })
        .collect();
    let events = blocks.concat();
    (recording(3, &blocks, true), events)
}

/// Reads everything `bytes` holds; the events up to the end or the first error.
fn read_events(bytes: &[u8]) -> Vec<Event> {
    let Ok(mut reader) = DataReader::from_reader(Path::new(PATH), Cursor::new(bytes)) else {
        return Vec::new();
    };
    let mut events = Vec::new();
    while let Ok(Some(block)) = reader.next_events() {
        events.extend_from_slice(block);
    }
    // Fused after the end or an error.
    assert!(matches!(reader.next_events(), Ok(None)));
    events
}

/// A change to a valid file: bytes overwritten, a cut, bytes inserted or removed.
#[derive(Clone, Debug)]
pub(crate) enum Mutation {
    Overwrite(Vec<(usize, u8)>),
    Cut(usize),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
}

pub(crate) fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => prop::collection::vec((any::<usize>(), any::<u8>()), 1..8).prop_map(Mutation::Overwrite),
        1 => any::<usize>().prop_map(Mutation::Cut),
        1 => (any::<usize>(), prop::collection::vec(any::<u8>(), 1..32))
            .prop_map(|(at, bytes)| Mutation::Insert(at, bytes)),
        1 => (any::<usize>(), 1..64usize).prop_map(|(at, n)| Mutation::Remove(at, n)),
    ]
}

pub(crate) fn mutate(bytes: &[u8], mutation: &Mutation) -> Vec<u8> {
    let mut bytes = bytes.to_vec();
    let len = bytes.len();
    match mutation {
        Mutation::Overwrite(changes) => {
            for &(at, value) in changes {
                bytes[at % len] = value;
            }
        }
        Mutation::Cut(at) => bytes.truncate(at % len),
        Mutation::Insert(at, inserted) => {
            let at = at % len;
            bytes.splice(at..at, inserted.iter().copied());
        }
        Mutation::Remove(at, n) => {
            let at = at % len;
            bytes.drain(at..(at + n).min(len));
        }
    }
    bytes
}

pub(crate) fn event() -> impl Strategy<Value = Event> {
    // Few threads and functions, so calls nest and pair up; some ids beyond the table.
    (0..1_000u64, 1..4u32, 0..6u32, any::<bool>()).prop_map(|(t, tid, function, entry)| {
        if entry {
            Event::entry(t, tid, function)
        } else {
            Event::exit(t, tid, function)
        }
    })
}

/// Any event at all: every field over its whole range, or near the values before it, as in a
/// real trace.
fn any_event() -> impl Strategy<Value = Event> {
    let near = |values: Vec<u32>| prop::sample::select(values);
    (
        prop_oneof![any::<u64>(), 1_000_000u64..1_001_000],
        prop_oneof![any::<u32>(), near(vec![7, 7 | 3 << Event::TID_BITS, 8])],
        prop_oneof![any::<u32>(), near(vec![0, 1, 2, 0x7fff_fffe | Event::EXIT])],
        prop_oneof![
            any::<u32>(),
            near(vec![0, 0x7ffe_fff8, 0x7ffe_ffc8, 0x8000_0008])
        ],
        prop_oneof![any::<u32>(), near(vec![0, 7, 9])],
    )
        .prop_map(|(timestamp_ns, tid, function, stack, pid)| Event {
            timestamp_ns,
            tid,
            function,
            stack,
            pid,
        })
}

proptest! {
    #![proptest_config(config())]

    /// Every field of every event comes back as it was.
    #[test]
    fn events_round_trip_exactly(events in prop::collection::vec(any_event(), 0..200)) {
        let mut payload = Vec::new();
        EventEncoder::default().encode(&events, &mut payload);
        let mut decoded = Vec::new();
        let count = EventDecoder::default().decode(&payload, &mut decoded);
        prop_assert_eq!(count, Ok(events.len()));
        prop_assert_eq!(&decoded[..events.len()], &events[..]);
    }

    /// The checksum keeps damaged payloads from the decoder; this is what it does if one gets
    /// through: a reason, or events, and never more than a chunk's worth of them.
    #[test]
    fn arbitrary_payloads_never_panic(
        payload in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..512),
            prop::collection::vec(any_event(), 1..50).prop_map(|events| {
                let mut payload = Vec::new();
                EventEncoder::default().encode(&events, &mut payload);
                payload
            }),
        ],
        mutation in mutation(),
    ) {
        let payload = if payload.is_empty() { payload } else { mutate(&payload, &mutation) };
        let mut events = Vec::new();
        if let Ok(count) = EventDecoder::default().decode(&payload, &mut events) {
            prop_assert!(count <= payload.len() / 2);
        }
        prop_assert!(events.len() <= payload.len() / 2);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        prop_assert!(read_events(&bytes).is_empty() || bytes.starts_with(&format::MAGIC));
    }

    #[test]
    fn arbitrary_bytes_after_a_valid_header_never_panic(
        tail in prop::collection::vec(any::<u8>(), 0..2048),
    ) {
        let mut bytes = format::file_header().to_vec();
        bytes.extend(tail);
        read_events(&bytes);
    }

    /// A damaged file loses events, but every event it gives was recorded.
    #[test]
    fn mutated_recordings_never_panic_nor_invent_events(mutation in mutation()) {
        let (bytes, recorded) = valid_recording();
        let damaged = mutate(&bytes, &mutation);
        for event in read_events(&damaged) {
            prop_assert!(recorded.contains(&event), "invented {event:?}");
        }
    }

    /// Well-formed files of arbitrary events (exits without entries, unknown functions, time
    /// going backwards, a missing end) go through every report.
    #[test]
    fn arbitrary_events_go_through_every_report(
        blocks in prop::collection::vec(prop::collection::vec(event(), 0..64), 0..4),
        functions in 0..5usize,
        statistics in any::<bool>(),
    ) {
        let bytes = recording(functions, &blocks, statistics);
        prop_assert_eq!(read_events(&bytes), blocks.concat());
    }
}

#[test]
fn from_reader_reads_what_open_reads() {
    let (bytes, events) = valid_recording();
    assert_eq!(read_events(&bytes), events);
    let dir = tempfile::TempDir::new().unwrap();
    let path = dir.path().join("valid.data");
    std::fs::write(&path, &bytes).unwrap();
    let mut reader = DataReader::open(&path).unwrap();
    let mut read = Vec::new();
    while let Some(block) = reader.next_events().unwrap() {
        read.extend_from_slice(block);
    }
    assert_eq!(read, events);
    assert!(!reader.cut_short());
}
