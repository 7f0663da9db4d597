//! Writer and reader together: round trips, files cut at every byte, and damaged or hostile files.

use std::path::{Path, PathBuf};

use tempfile::TempDir;

use super::format::{
    self, ChunkHeader, ChunkKind, EventEncoder, CHUNK_HEADER_LEN, FILE_HEADER_LEN,
};
use super::*;
use crate::event::Event;
use crate::table::{FunctionKind, FunctionTable, TracedFunction};

fn metadata() -> Metadata {
    Metadata {
        command: vec!["./sort".into(), "-n".into(), "big file.txt".into()],
        pid: 4242,
        start_monotonic_ns: 1_000_000_000,
        start_realtime_ns: 1_700_000_000_000_000_000,
        hostname: "bench".into(),
        kernel: "6.8.0-utrace".into(),
        utrace_version: "0.1.0".into(),
        probe_costs: None,
    }
}

fn table(count: usize) -> FunctionTable {
    FunctionTable {
        modules: vec!["/usr/bin/sort".into(), "/lib/libc.so.6".into()],
        functions: (0..count)
            .map(|i| TracedFunction {
                name: format!("function_{i}"),
                module: (i % 2) as u32,
                offset: 0x1000 + 16 * i as u64,
                size: 16,
                kind: if i % 3 == 0 {
                    FunctionKind::Plt
                } else {
                    FunctionKind::Function
                },
                probes: Default::default(),
                values: Vec::new(),
                user_stack: false,
                argument_names: Vec::new(),
                source: None,
                detached: None,
            })
            .collect(),
        ..Default::default()
    }
}

/// `count` events, different for each `seed`, alternating entries and exits.
fn events(seed: u64, count: usize) -> Vec<Event> {
    (0..count)
        .map(|i| {
            let t = seed * 1_000_000 + i as u64 * 37;
            let tid = 100 + (seed as u32 % 4);
            let function = (i as u32 / 2) % 5;
            if i % 2 == 0 {
                Event::entry(t, tid, function)
            } else {
                Event::exit(t, tid, function)
            }
        })
        .collect()
}

/// A deterministic xorshift generator for damaged and random files.
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// What a reader got out of a file.
#[derive(Debug)]
struct Recording {
    metadata: Metadata,
    functions: FunctionTable,
    blocks: Vec<Vec<Event>>,
    statistics: Option<Statistics>,
    cut_short: bool,
    damaged: Vec<DamagedChunk>,
    second_recording: Option<u64>,
}

fn read_all(path: &Path) -> Result<Recording, DataError> {
    let mut reader = DataReader::open(path)?;
    let mut blocks = Vec::new();
    while let Some(block) = reader.next_events()? {
        blocks.push(block.to_vec());
    }
    // Fused after the end.
    assert!(reader.next_events()?.is_none());
    Ok(Recording {
        metadata: reader.metadata().clone(),
        functions: reader.functions().clone(),
        blocks,
        statistics: reader.statistics().cloned(),
        cut_short: reader.cut_short(),
        damaged: reader.damaged_chunks().to_vec(),
        second_recording: reader.second_recording(),
    })
}

/// Like [`read_all`] failing on damage (`--strict`), but gives the events read before an error
/// too.
fn read_until_error(path: &Path) -> (Vec<Event>, Result<(), DataError>) {
    let mut reader = match DataReader::open(path) {
        Ok(reader) => reader.on_damage(OnDamage::Fail),
        Err(error) => return (Vec::new(), Err(error)),
    };
    let mut events = Vec::new();
    loop {
        match reader.next_events() {
            Ok(Some(block)) => events.extend_from_slice(block),
            Ok(None) => return (events, Ok(())),
            Err(error) => {
                assert!(reader.next_events().unwrap().is_none());
                return (events, Err(error));
            }
        }
    }
}

/// A small recording: metadata, a table of 3 functions, blocks of 3, 5 and 2 events, statistics.
/// Returns the file's bytes, its events, and the file length after each whole chunk that ends a
/// step (table, each block, statistics).
struct Small {
    bytes: Vec<u8>,
    blocks: Vec<Vec<Event>>,
    table_end: usize,
    block_ends: Vec<usize>,
}

fn small_recording(dir: &TempDir) -> Small {
    let path = dir.path().join("small.data");
    let blocks = vec![events(1, 3), events(2, 5), events(3, 2)];
    let mut writer = DataWriter::create(&path, &metadata(), &table(3)).unwrap();
    let table_end = writer.bytes_written() as usize;
    let mut block_ends = Vec::new();
    for block in &blocks {
        writer.write_events(block).unwrap();
        block_ends.push(writer.bytes_written() as usize);
    }
    writer
        .finish(&Statistics {
            events: 10,
            lost_events: 1,
            duration_ns: 99,
            lost_by_thread: vec![(7, 1)],
        })
        .unwrap();
    Small {
        bytes: std::fs::read(&path).unwrap(),
        blocks,
        table_end,
        block_ends,
    }
}

fn write_file(dir: &TempDir, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// The payload of an events chunk of `events`.
fn encoded(events: &[Event]) -> Vec<u8> {
    let mut payload = Vec::new();
    EventEncoder::default().encode(events, &mut payload);
    payload
}

/// A chunk as the format lays it out, for files the writer would not make.
fn chunk(kind: ChunkKind, payload: &[u8]) -> Vec<u8> {
    let mut bytes = ChunkHeader::for_payload(kind, payload).encode().to_vec();
    bytes.extend_from_slice(payload);
    bytes
}

#[test]
fn round_trip() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("utrace.data");
    let written = [
        events(1, 1),
        events(2, 1000),
        events(3, 70_000),
        events(4, 2),
    ];
    let statistics = Statistics {
        events: 71_003,
        lost_events: 17,
        duration_ns: 123_456_789,
        lost_by_thread: vec![(1, 5), (4_194_303, 12)],
    };
    let mut writer = DataWriter::create(&path, &metadata(), &table(1000)).unwrap();
    assert_eq!(writer.events_written(), 0);
    let table_end = writer.bytes_written();
    for block in &written {
        writer.write_events(block).unwrap();
    }
    writer.write_events(&[]).unwrap();
    assert_eq!(writer.events_written(), 71_003);
    // A 16-byte header per chunk of up to 65,536 events, and each event encoded in 2 or 3 bytes.
    let chunks = [
        &written[0][..],
        &written[1],
        &written[2][..65_536],
        &written[2][65_536..],
        &written[3],
    ];
    assert_eq!(
        writer.bytes_written() - table_end,
        chunks
            .map(|events| (CHUNK_HEADER_LEN + encoded(events).len()) as u64)
            .iter()
            .sum::<u64>()
    );
    assert!(writer.bytes_written() - table_end < 71_003 * 3);
    writer.finish(&statistics).unwrap();

    let read = read_all(&path).unwrap();
    assert_eq!(read.metadata, metadata());
    assert_eq!(read.functions, table(1000));
    assert_eq!(read.statistics, Some(statistics));
    assert!(!read.cut_short);
    // The 70,000-event block is split at 65,536 events; no empty blocks.
    let sizes: Vec<usize> = read.blocks.iter().map(Vec::len).collect();
    assert_eq!(
        sizes,
        [1, 1000, format::EVENTS_PER_CHUNK, 70_000 - 65_536, 2]
    );
    assert_eq!(read.blocks.concat(), written.concat());
}

#[test]
fn probe_cost_spreads_follow_the_metadata_and_files_without_them_still_read() {
    use crate::probe_cost::{ProbeCost, ProbeCosts};
    use crate::table::{Execution, ExitKind, ProbeClass};
    let cost = |inside_ns, inside_spread_ns| ProbeCost {
        inside_ns,
        full_ns: 3 * inside_ns,
        inside_spread_ns,
    };
    let stepped = ProbeClass::new(Execution::SingleStepped, ExitKind::Uretprobe);
    let measured = Metadata {
        probe_costs: Some(ProbeCosts {
            classes: vec![
                (ProbeClass::default(), cost(1_200, Some(90))),
                (stepped, cost(5_000, Some(700))),
                (ProbeClass::KPROBE_MULTI, cost(9_000, Some(900))),
            ],
        }),
        ..metadata()
    };
    let payload = format::encode_metadata(&measured).unwrap();
    assert_eq!(format::decode_metadata(&payload).unwrap(), measured);

    // As written before spreads were measured: the metadata alone.
    let before = format::encode(&measured).unwrap();
    assert!(payload.starts_with(&before) && payload.len() > before.len());
    let read = format::decode_metadata(&before).unwrap();
    let costs = read.probe_costs.unwrap();
    assert_eq!(costs.of(stepped), cost(5_000, None));
    assert_eq!(costs.of(stepped).resolution_ns(), 5_000);

    // No probe costs (`--raw-times` at record time): nothing follows that matters.
    let raw = format::encode_metadata(&metadata()).unwrap();
    assert_eq!(format::decode_metadata(&raw).unwrap(), metadata());
}

#[test]
fn writer_counts_bytes_as_they_land_in_the_file() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("utrace.data");
    let mut writer = DataWriter::create(&path, &metadata(), &table(10)).unwrap();
    let on_disk = || std::fs::metadata(&path).unwrap().len();
    // Flushed to the OS at each step, without waiting for finish or drop.
    assert_eq!(writer.bytes_written(), on_disk());
    let before = writer.bytes_written();
    writer.write_events(&events(1, 100)).unwrap();
    assert_eq!(writer.bytes_written(), on_disk());
    assert_eq!(
        writer.bytes_written() - before,
        (CHUNK_HEADER_LEN + encoded(&events(1, 100)).len()) as u64
    );
    // Readable as it stands, as after a kill -9: all events, cut short.
    let read = read_all(&path).unwrap();
    assert_eq!(read.blocks, [events(1, 100)]);
    assert!(read.cut_short);
    assert_eq!(read.statistics, None);
    writer.finish(&Statistics::default()).unwrap();
    assert!(!read_all(&path).unwrap().cut_short);
}

#[test]
fn dropped_writer_leaves_a_cut_short_file() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("utrace.data");
    let mut writer = DataWriter::create(&path, &metadata(), &table(2)).unwrap();
    writer.write_events(&events(1, 10)).unwrap();
    drop(writer);
    let read = read_all(&path).unwrap();
    assert_eq!(read.blocks, [events(1, 10)]);
    assert!(read.cut_short);
    assert_eq!(read.statistics, None);
}

#[test]
fn no_events_at_all() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("utrace.data");
    let writer = DataWriter::create(&path, &metadata(), &FunctionTable::default()).unwrap();
    writer.finish(&Statistics::default()).unwrap();
    let read = read_all(&path).unwrap();
    assert!(read.blocks.is_empty());
    assert_eq!(read.functions, FunctionTable::default());
    assert_eq!(read.statistics, Some(Statistics::default()));
    assert!(!read.cut_short);
}

#[test]
fn cut_at_every_byte() {
    let dir = TempDir::new().unwrap();
    let small = small_recording(&dir);
    let path = dir.path().join("cut.data");
    for len in 0..=small.bytes.len() {
        std::fs::write(&path, &small.bytes[..len]).unwrap();
        match read_all(&path) {
            Err(DataError::Empty { .. }) => assert_eq!(len, 0),
            Err(DataError::NoFunctionTable { .. }) => {
                assert!(len > 0 && len < small.table_end, "cut at {len}")
            }
            Err(error) => panic!("cut at {len}: {error}"),
            Ok(read) => {
                assert!(len >= small.table_end, "cut at {len}");
                assert_eq!(read.metadata, metadata());
                assert_eq!(read.functions, table(3));
                // Exactly the blocks whose chunks are whole, nothing else.
                let whole = small.block_ends.iter().filter(|&&end| end <= len).count();
                assert_eq!(read.blocks, small.blocks[..whole], "cut at {len}");
                let complete = len == small.bytes.len();
                assert_eq!(read.cut_short, !complete, "cut at {len}");
                assert_eq!(read.statistics.is_some(), complete, "cut at {len}");
            }
        }
    }
}

#[test]
fn empty_file() {
    let dir = TempDir::new().unwrap();
    let path = write_file(&dir, "empty.data", b"");
    let error = DataReader::open(&path).err().unwrap();
    assert!(matches!(error, DataError::Empty { .. }));
    assert_eq!(
        error.to_string(),
        format!(
            "{}: empty file: nothing was recorded; record again",
            path.display()
        )
    );
}

#[test]
fn missing_file() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("absent.data");
    let error = DataReader::open(&path).err().unwrap();
    assert!(matches!(error, DataError::Missing { .. }));
    assert!(error
        .to_string()
        .starts_with(&format!("{}: ", path.display())));
}

#[test]
fn wrong_magic() {
    let dir = TempDir::new().unwrap();
    let mut bytes = small_recording(&dir).bytes;
    bytes[0] = b'X';
    let path = write_file(&dir, "magic.data", &bytes);
    let error = DataReader::open(&path).err().unwrap();
    assert_eq!(
        error.to_string(),
        format!(
            "{}: not a utrace.data file: give a file written by `utrace record`",
            path.display()
        )
    );
    // A short file that is not the start of a header either.
    let path = write_file(&dir, "short.data", b"ELF");
    assert!(matches!(
        DataReader::open(&path),
        Err(DataError::NotUtrace { .. })
    ));
}

#[test]
fn wrong_version() {
    let dir = TempDir::new().unwrap();
    let mut bytes = small_recording(&dir).bytes;
    bytes[8..12].copy_from_slice(&(format::VERSION + 1).to_le_bytes());
    let path = write_file(&dir, "version.data", &bytes);
    let error = DataReader::open(&path).err().unwrap();
    assert_eq!(
        error.to_string(),
        format!(
            "{}: format version {}, this utrace reads versions 4 to {}: report it with the \
             utrace that recorded it",
            path.display(),
            format::VERSION + 1,
            format::VERSION
        )
    );
}

#[test]
fn random_bytes() {
    let dir = TempDir::new().unwrap();
    for seed in 1..=8u64 {
        let mut rng = Xorshift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let len = 1 + rng.below(4096);
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let path = write_file(&dir, "random.data", &bytes);
        assert!(
            matches!(DataReader::open(&path), Err(DataError::NotUtrace { .. })),
            "seed {seed}"
        );
    }
}

#[test]
fn random_bytes_after_a_valid_header() {
    let dir = TempDir::new().unwrap();
    for seed in 1..=32u64 {
        let mut rng = Xorshift(seed.wrapping_mul(0x2545_f491_4f6c_dd1d));
        let mut bytes = format::file_header().to_vec();
        let len = rng.below(4096);
        bytes.extend((0..len).map(|_| rng.next() as u8));
        let path = write_file(&dir, "random.data", &bytes);
        // Any error will do; a panic or an opened file would not.
        assert!(DataReader::open(&path).is_err(), "seed {seed}");
    }
}

#[test]
fn damaged_bytes_never_panic_nor_invent_events() {
    let dir = TempDir::new().unwrap();
    let small = small_recording(&dir);
    let written = small.blocks.concat();
    for seed in 1..=300u64 {
        let mut rng = Xorshift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut bytes = small.bytes.clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(bytes.len());
            bytes[at] ^= 1 << rng.below(8);
        }
        let path = write_file(&dir, "damaged.data", &bytes);
        let skipping = read_all(&path).map_or(Vec::new(), |read| read.blocks.concat());
        let (failing, _) = read_until_error(&path);
        // The checksums see to it that only written events come out. (A flipped bit in a length
        // or kind field can lose events, never make some up.)
        for events in [skipping, failing] {
            assert!(events.len() <= written.len(), "seed {seed}");
            for event in &events {
                assert!(written.contains(event), "seed {seed}: {event:?}");
            }
        }
    }
}

/// One flipped bit anywhere after the function table loses exactly the chunk it lands in: the
/// events of every other chunk come out, and the damage is noted once, with the events lost
/// when the flip spared the header that says how many.
#[test]
fn one_flipped_bit_loses_only_its_chunk() {
    let dir = TempDir::new().unwrap();
    let small = small_recording(&dir);
    let mut starts = vec![small.table_end];
    starts.extend_from_slice(&small.block_ends);
    for at in small.table_end..small.bytes.len() {
        for bit in 0..8 {
            let mut bytes = small.bytes.clone();
            bytes[at] ^= 1 << bit;
            let path = write_file(&dir, "flipped.data", &bytes);
            let read = read_all(&path).unwrap();
            let case = format!("bit {bit} of byte {at}");
            assert_eq!(read.damaged.len(), 1, "{case}: {:?}", read.damaged);
            let damaged = &read.damaged[0];
            let chunk = starts.iter().rposition(|&start| start <= at).unwrap();
            assert_eq!(damaged.offset, starts[chunk] as u64, "{case}");
            let in_header = at < starts[chunk] + CHUNK_HEADER_LEN;
            assert!(!read.cut_short, "{case}: {read:?}");
            if chunk == small.blocks.len() {
                // The statistics: every event, no totals.
                assert_eq!(read.blocks, small.blocks, "{case}");
                assert_eq!(read.statistics, None, "{case}");
                assert_eq!(damaged.resumed_at, None, "{case}");
                continue;
            }
            let mut expected = small.blocks.clone();
            let lost = expected.remove(chunk);
            assert_eq!(read.blocks, expected, "{case}");
            assert_eq!(damaged.resumed_at, Some(starts[chunk + 1] as u64), "{case}");
            let count = (!in_header).then_some(lost.len() as u64);
            assert_eq!(damaged.events, count, "{case}");
            assert!(read.statistics.is_some(), "{case}");
        }
    }
}

#[test]
fn damage_warnings_say_where_and_what_was_lost() {
    let chunk = |kind, events, resumed_at| DamagedChunk {
        offset: 100,
        resumed_at,
        kind,
        events,
        reason: "checksum mismatch".into(),
    };
    assert_eq!(
        chunk(Some(ChunkKind::Events), Some(5), Some(200)).to_string(),
        "damaged events chunk at byte 100 skipped (checksum mismatch; read on at byte 200): \
         5 events lost"
    );
    assert_eq!(
        chunk(None, None, None).to_string(),
        "damaged chunk at byte 100 skipped (checksum mismatch; nothing whole after it): an \
         unknown number of events lost"
    );
    assert_eq!(
        chunk(Some(ChunkKind::Statistics), Some(0), None).to_string(),
        "damaged statistics chunk at byte 100 skipped (checksum mismatch; nothing whole after \
         it): the recording's totals are lost"
    );
}

#[test]
fn absurd_chunk_length() {
    let dir = TempDir::new().unwrap();
    let small = small_recording(&dir);

    // On the metadata chunk: open fails.
    let mut bytes = small.bytes.clone();
    bytes[FILE_HEADER_LEN + 4..FILE_HEADER_LEN + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    let path = write_file(&dir, "absurd.data", &bytes);
    let error = DataReader::open(&path).err().unwrap();
    assert!(
        matches!(error, DataError::Corrupt { offset: 16, .. }),
        "{error}"
    );
    assert!(error
        .to_string()
        .starts_with(&format!("{}: corrupt chunk at byte 16 (", path.display())));

    // On the second events chunk, beyond what any chunk or any events chunk may hold: the first
    // block reads, then the error.
    let at = small.block_ends[0];
    for length in [
        format::MAX_CHUNK_LEN + 16,
        format::MAX_EVENTS_LEN as u32 + 1,
    ] {
        let mut bytes = small.bytes.clone();
        bytes[at + 4..at + 8].copy_from_slice(&length.to_le_bytes());
        let path = write_file(&dir, "absurd.data", &bytes);
        let (events, result) = read_until_error(&path);
        assert_eq!(events, small.blocks[0]);
        let error = result.err().unwrap();
        assert!(
            matches!(error, DataError::Corrupt { offset, .. } if offset == at as u64),
            "{error}"
        );
        assert!(error.to_string().contains("more than the"), "{error}");
        // Skipping damage, the chunk after it is found by scanning.
        let read = read_all(&path).unwrap();
        assert_eq!(
            read.blocks,
            [small.blocks[0].clone(), small.blocks[2].clone()]
        );
        assert_eq!(read.damaged.len(), 1);
        assert_eq!(read.damaged[0].resumed_at, Some(small.block_ends[1] as u64));
        assert!(read.damaged[0].reason.contains("more than the"));
        assert_eq!(read.damaged[0].events, None);
    }
}

#[test]
fn events_that_do_not_decode() {
    // Whole chunks with good checksums whose payloads are not events: the blocks before them
    // read, then one error that says why.
    let dir = TempDir::new().unwrap();
    let small = small_recording(&dir);
    let at = small.block_ends[0];
    let too_many = [0x81, 0x80, 0x04, 0, 0];
    let reserved_tag = [1, 0x80, 0];
    for (payload, reason) in [
        (&too_many[..], "more events than a chunk may hold"),
        (&reserved_tag[..], "an event tag with reserved bits set"),
    ] {
        let mut bytes = small.bytes[..at].to_vec();
        bytes.extend_from_slice(&chunk(ChunkKind::Events, payload));
        bytes.extend_from_slice(&small.bytes[at..]);
        let path = write_file(&dir, "undecodable.data", &bytes);
        let (events, result) = read_until_error(&path);
        assert_eq!(events, small.blocks[0]);
        assert_eq!(
            result.err().unwrap().to_string(),
            format!(
                "{}: corrupt chunk at byte {at} (the events do not decode: {reason})",
                path.display()
            )
        );
        // Skipping damage: every block but the bad one, which is noted.
        let read = read_all(&path).unwrap();
        assert_eq!(read.blocks, small.blocks);
        assert_eq!(read.damaged.len(), 1);
        assert_eq!(read.damaged[0].offset, at as u64);
        assert_eq!(
            read.damaged[0].reason,
            format!("the events do not decode: {reason}")
        );
    }

    // A payload that decodes to more events than its header says.
    let mut bytes = small.bytes[..at].to_vec();
    let payload = encoded(&events(9, 4));
    bytes.extend(ChunkHeader::for_events(&payload, 3).encode());
    bytes.extend_from_slice(&payload);
    bytes.extend_from_slice(&small.bytes[at..]);
    let path = write_file(&dir, "miscounted.data", &bytes);
    let read = read_all(&path).unwrap();
    assert_eq!(read.blocks, small.blocks);
    assert_eq!(read.damaged[0].reason, "4 events where its header says 3");
}

#[test]
fn flipped_payload_byte() {
    let dir = TempDir::new().unwrap();
    let small = small_recording(&dir);

    // In the second events block.
    let at = small.block_ends[0];
    let mut bytes = small.bytes.clone();
    bytes[at + CHUNK_HEADER_LEN + 5] ^= 0x40;
    let path = write_file(&dir, "flipped.data", &bytes);
    let (events, result) = read_until_error(&path);
    assert_eq!(events, small.blocks[0]);
    let error = result.err().unwrap();
    assert_eq!(
        error.to_string(),
        format!(
            "{}: corrupt chunk at byte {at} (checksum mismatch)",
            path.display()
        )
    );
    // Skipping damage: the blocks around it, and what was lost.
    let mut reader = DataReader::open(&path).unwrap();
    let mut read = Vec::new();
    while let Some(block) = reader.next_events().unwrap() {
        read.push(block.to_vec());
    }
    assert_eq!(read, [small.blocks[0].clone(), small.blocks[2].clone()]);
    assert_eq!(
        reader.damaged_chunks(),
        [DamagedChunk {
            offset: at as u64,
            resumed_at: Some(small.block_ends[1] as u64),
            kind: Some(ChunkKind::Events),
            events: Some(5),
            reason: "checksum mismatch".into(),
        }]
    );
    assert_eq!(reader.events_lost_to_damage(), Some(5));
    assert!(reader.statistics().is_some() && !reader.cut_short());

    // In the metadata.
    let mut bytes = small.bytes.clone();
    bytes[FILE_HEADER_LEN + CHUNK_HEADER_LEN + 3] ^= 1;
    let path = write_file(&dir, "flipped.data", &bytes);
    assert!(matches!(
        DataReader::open(&path),
        Err(DataError::Checksum { offset: 16, .. })
    ));

    // In the statistics: the events are all there, then the error.
    let mut bytes = small.bytes.clone();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let path = write_file(&dir, "flipped.data", &bytes);
    let (events, result) = read_until_error(&path);
    assert_eq!(events, small.blocks.concat());
    assert!(matches!(result, Err(DataError::Checksum { .. })));
    // Skipping damage: the recording ended, its totals are lost.
    let read = read_all(&path).unwrap();
    assert_eq!(read.blocks, small.blocks);
    assert_eq!(read.statistics, None);
    assert!(!read.cut_short);
    assert_eq!(read.damaged[0].kind, Some(ChunkKind::Statistics));
}

#[test]
fn joined_files_are_read_up_to_the_second_recording() {
    let dir = TempDir::new().unwrap();
    let small = small_recording(&dir);
    let joined = [&small.bytes[..], &small.bytes[..]].concat();
    let path = write_file(&dir, "joined.data", &joined);
    let read = read_all(&path).unwrap();
    assert_eq!(read.blocks, small.blocks);
    assert!(read.statistics.is_some() && !read.cut_short);
    assert!(read.damaged.is_empty());
    assert_eq!(read.second_recording, Some(small.bytes.len() as u64));
    let (events, result) = read_until_error(&path);
    assert_eq!(events, small.blocks.concat());
    assert_eq!(
        result.err().unwrap().to_string(),
        format!(
            "{}: a second recording starts at byte {} (two files joined?)",
            path.display(),
            small.bytes.len()
        )
    );

    // The first one cut short, after its first block.
    let first = &small.bytes[..small.block_ends[0] + 7];
    let joined = [first, &small.bytes[..]].concat();
    let path = write_file(&dir, "joined.data", &joined);
    let read = read_all(&path).unwrap();
    assert_eq!(read.blocks, small.blocks[..1]);
    assert!(read.cut_short);
    assert_eq!(read.second_recording, Some(first.len() as u64));
    // The second file's header damaged too: its metadata chunk still ends the first.
    let first = &small.bytes[..small.block_ends[0]];
    let mut joined = [first, &small.bytes[..]].concat();
    joined[first.len()] ^= 1;
    let path = write_file(&dir, "joined.data", &joined);
    let read = read_all(&path).unwrap();
    assert_eq!(read.blocks, small.blocks[..1]);
    assert_eq!(
        read.second_recording,
        Some((first.len() + FILE_HEADER_LEN) as u64)
    );
}

#[test]
fn version_4_files_are_read_and_their_damage_skipped() {
    let dir = TempDir::new().unwrap();
    let small = small_recording(&dir);
    // Version 4: the same, with 0 where the chunk headers now have their tally.
    let mut bytes = small.bytes.clone();
    bytes[8..12].copy_from_slice(&4u32.to_le_bytes());
    let mut at = FILE_HEADER_LEN;
    while at < bytes.len() {
        let length = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        bytes[at + 12..at + 16].fill(0);
        at += CHUNK_HEADER_LEN + length;
    }
    let path = write_file(&dir, "v4.data", &bytes);
    let read = read_all(&path).unwrap();
    assert_eq!(read.blocks, small.blocks);
    assert!(read.damaged.is_empty() && !read.cut_short);

    // A damaged payload: a whole chunk where its header says it ends vouches for its length.
    let second = small.block_ends[0];
    let mut damaged = bytes.clone();
    damaged[second + CHUNK_HEADER_LEN + 2] ^= 4;
    let path = write_file(&dir, "v4.data", &damaged);
    let read = read_all(&path).unwrap();
    assert_eq!(
        read.blocks,
        [small.blocks[0].clone(), small.blocks[2].clone()]
    );
    assert_eq!(read.damaged[0].kind, Some(ChunkKind::Events));
    assert_eq!(read.damaged[0].events, None);
    // A damaged length: found by scanning.
    let mut damaged = bytes.clone();
    damaged[second + 4] ^= 8;
    let path = write_file(&dir, "v4.data", &damaged);
    let read = read_all(&path).unwrap();
    assert_eq!(
        read.blocks,
        [small.blocks[0].clone(), small.blocks[2].clone()]
    );
    assert_eq!(read.damaged[0].resumed_at, Some(small.block_ends[1] as u64));
    assert_eq!(read.damaged[0].kind, None);
}

#[test]
fn unknown_chunks_are_skipped() {
    let dir = TempDir::new().unwrap();
    let small = small_recording(&dir);
    let unknown = chunk(ChunkKind::Unknown(99), b"from a later utrace");
    let empty_unknown = chunk(ChunkKind::Unknown(0), b"");
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&small.bytes[..FILE_HEADER_LEN]);
    bytes.extend_from_slice(&unknown);
    bytes.extend_from_slice(&small.bytes[FILE_HEADER_LEN..small.table_end]);
    bytes.extend_from_slice(&empty_unknown);
    bytes.extend_from_slice(&small.bytes[small.table_end..small.block_ends[0]]);
    bytes.extend_from_slice(&unknown);
    bytes.extend_from_slice(&small.bytes[small.block_ends[0]..]);
    let path = write_file(&dir, "unknown.data", &bytes);
    let read = read_all(&path).unwrap();
    assert_eq!(read.blocks, small.blocks);
    assert!(read.statistics.is_some());
    assert!(!read.cut_short);

    // An unknown chunk cut short at the end.
    let mut bytes = small.bytes[..small.block_ends[0]].to_vec();
    bytes.extend_from_slice(&unknown[..unknown.len() - 3]);
    let path = write_file(&dir, "unknown.data", &bytes);
    let read = read_all(&path).unwrap();
    assert_eq!(read.blocks, small.blocks[..1]);
    assert!(read.cut_short);
}

#[test]
fn chunks_out_of_order() {
    let dir = TempDir::new().unwrap();
    let small = small_recording(&dir);
    let metadata_payload = format::encode(&metadata()).unwrap();
    let events_chunk = &small.bytes[small.table_end..small.block_ends[0]];

    // Events before the function table.
    let mut bytes = small.bytes[..FILE_HEADER_LEN].to_vec();
    bytes.extend_from_slice(&chunk(ChunkKind::Metadata, &metadata_payload));
    bytes.extend_from_slice(events_chunk);
    let path = write_file(&dir, "order.data", &bytes);
    assert!(matches!(
        DataReader::open(&path),
        Err(DataError::Corrupt { .. })
    ));

    // A second metadata chunk among the events: another recording, whose file header is
    // damaged. What follows is not this recording's.
    let mut bytes = small.bytes[..small.block_ends[0]].to_vec();
    bytes.extend_from_slice(&chunk(ChunkKind::Metadata, &metadata_payload));
    bytes.extend_from_slice(&small.bytes[small.block_ends[0]..]);
    let path = write_file(&dir, "order.data", &bytes);
    let (events, result) = read_until_error(&path);
    assert_eq!(events, small.blocks[0]);
    assert!(matches!(result, Err(DataError::Corrupt { .. })));
    let read = read_all(&path).unwrap();
    assert_eq!(read.blocks, small.blocks[..1]);
    assert_eq!(read.second_recording, Some(small.block_ends[0] as u64));
}

#[test]
fn undecodable_table() {
    let dir = TempDir::new().unwrap();
    let small = small_recording(&dir);
    let metadata_end =
        FILE_HEADER_LEN + CHUNK_HEADER_LEN + format::encode_metadata(&metadata()).unwrap().len();
    let mut bytes = small.bytes[..metadata_end].to_vec();
    // A valid chunk whose payload claims a billion functions.
    let mut payload = vec![2u8, 0, 0]; // two empty module names... then the count:
    payload.push(252);
    payload.extend_from_slice(&1_000_000_000u32.to_le_bytes());
    bytes.extend_from_slice(&chunk(ChunkKind::FunctionTable, &payload));
    let path = write_file(&dir, "table.data", &bytes);
    let error = DataReader::open(&path).err().unwrap();
    assert!(matches!(error, DataError::Corrupt { .. }), "{error}");
}

#[test]
fn ends_right_after_the_table() {
    // A file that ends right after its table: no events, cut short, no error.
    let dir = TempDir::new().unwrap();
    let small = small_recording(&dir);
    let path = write_file(&dir, "table_only.data", &small.bytes[..small.table_end]);
    let read = read_all(&path).unwrap();
    assert!(read.blocks.is_empty());
    assert!(read.cut_short);
}

#[test]
fn event_buffer_is_reused() {
    // Largest block first: every later block lands in the same allocation.
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("utrace.data");
    let mut writer = DataWriter::create(&path, &metadata(), &table(5)).unwrap();
    writer.write_events(&events(1, 5000)).unwrap();
    for seed in 2..10 {
        writer
            .write_events(&events(seed, 100 * seed as usize))
            .unwrap();
    }
    writer.finish(&Statistics::default()).unwrap();

    let mut reader = DataReader::open(&path).unwrap();
    let first = reader.next_events().unwrap().unwrap().as_ptr();
    let mut blocks = 1;
    while let Some(block) = reader.next_events().unwrap() {
        assert_eq!(block.as_ptr(), first);
        blocks += 1;
    }
    assert_eq!(blocks, 9);
}

#[test]
fn command_line_quotes_where_needed() {
    let mut metadata = metadata();
    assert_eq!(metadata.command_line(), "./sort -n 'big file.txt'");
    metadata.command = vec!["echo".into(), "".into(), "it's".into()];
    assert_eq!(metadata.command_line(), r"echo '' 'it'\''s'");
}

/// A process title rewritten as one string (`-p` on redis) reads as `ps` shows it.
#[test]
fn a_rewritten_process_title_shows_without_quotes() {
    let mut metadata = metadata();
    metadata.command = vec!["redis-server 127.0.0.1:16399".into()];
    assert_eq!(metadata.command_line(), "redis-server 127.0.0.1:16399");
}

#[test]
fn table_too_large_to_write() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("huge.data");
    let mut huge = table(1);
    huge.functions[0].name = "x".repeat(format::MAX_CHUNK_LEN as usize + 1);
    let error = DataWriter::create(&path, &metadata(), &huge).err().unwrap();
    assert!(matches!(error, DataError::TooLarge { .. }), "{error}");
}

#[test]
fn write_error_names_the_file() {
    // /dev/full takes the open and fails every write with ENOSPC.
    let path = Path::new("/dev/full");
    if !path.exists() {
        eprintln!("skipped: no /dev/full");
        return;
    }
    let error = DataWriter::create(path, &metadata(), &table(3))
        .err()
        .unwrap();
    assert!(matches!(error, DataError::Io { .. }), "{error}");
    assert!(error.to_string().starts_with("/dev/full: "), "{error}");
}

#[test]
fn functions_planned_during_the_recording_are_known_from_the_start() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("more.data");
    let first = table(3);
    let mut writer = DataWriter::create(&path, &metadata(), &first).unwrap();
    writer.write_events(&events(1, 100)).unwrap();
    // A library loaded later: one more module (index 2, after the table's two), its functions
    // numbered on from 3.
    let mut more = table(2);
    more.modules = vec!["/lib/libplugin.so".into()];
    for function in &mut more.functions {
        function.module = 2;
    }
    writer.write_more_functions(&more).unwrap();
    writer.write_events(&events(2, 50)).unwrap();
    writer.finish(&Statistics::default()).unwrap();

    let mut reader = DataReader::open(&path).unwrap();
    let mut expected = first;
    expected.extend(more);
    assert_eq!(reader.functions(), &expected);
    assert_eq!(reader.functions().functions.len(), 5);
    let mut read = Vec::new();
    while let Some(block) = reader.next_events().unwrap() {
        read.extend_from_slice(block);
    }
    assert_eq!(read, [events(1, 100), events(2, 50)].concat());
    assert!(!reader.cut_short());
}

#[test]
fn functions_detached_during_the_recording_are_marked_from_the_start() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("detached.data");
    let mut writer = DataWriter::create(&path, &metadata(), &table(3)).unwrap();
    writer.write_events(&events(1, 100)).unwrap();
    let detachment = crate::table::Detachment {
        function: 1,
        after_ns: 420_000_000,
        calls_per_s: 1_200_000,
    };
    writer.write_detachments(&[detachment]).unwrap();
    writer.write_events(&events(2, 50)).unwrap();
    writer.finish(&Statistics::default()).unwrap();

    let mut reader = DataReader::open(&path).unwrap();
    let detached: Vec<_> = (reader.functions().functions.iter())
        .map(|function| function.detached)
        .collect();
    assert_eq!(detached, [None, Some(detachment), None]);
    let mut read = Vec::new();
    while let Some(block) = reader.next_events().unwrap() {
        read.extend_from_slice(block);
    }
    assert_eq!(read, [events(1, 100), events(2, 50)].concat());
    assert!(!reader.cut_short());
}
