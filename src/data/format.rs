//! The byte layout of `utrace.data`. This is the only code that knows it; the writer and the
//! reader go through the functions here.
//!
//! ```text
//! file header, 16 bytes:  magic [u8; 8] = "UTRACE\0D" | version: u32 | reserved: u32 (0)
//! then chunks, each:      kind: u32 | length: u32 | checksum: u32 | tally: u32 | payload
//! tally:                  bits 0-16   the events in an events chunk, 0 in the others
//!                         bits 17-31  the header's check: the low 15 bits of the CRC-32 of the
//!                                     header's first 12 bytes followed by bits 0-16 of the tally
//!                                     (a little-endian u32)
//! ```
//!
//! Every integer is little-endian. `length` counts the payload bytes; `checksum` is the CRC-32
//! (IEEE, as `crc32fast` computes it) of the payload. Chunks follow each other with no padding.
//! The header's check lets a reader tell a damaged header from a damaged payload: it skips a
//! chunk whose payload is damaged by its length, and says how many events it lost; past a
//! damaged header it finds the next chunk by scanning for a header that checks and a payload
//! that matches its checksum. Version 4 files, which this code reads too, have 0 in place of the
//! tally: their headers cannot be checked and do not say how many events a chunk holds.
//!
//! | kind | chunk          | payload                                                          |
//! |------|----------------|------------------------------------------------------------------|
//! | 1    | metadata       | bincode 2 (standard configuration) of [`Metadata`], then the    |
//! |      |                | spreads of its probe costs (`encode_metadata`; files without    |
//! |      |                | them have none)                                                  |
//! | 2    | function table | bincode 2 (standard configuration) of [`FunctionTable`], then   |
//! |      |                | (version 6) of its captured values' specs, then of its functions'|
//! |      |                | source lines (`encode_table`; tables without them have none)     |
//! | 3    | events         | up to [`EVENTS_PER_CHUNK`] events, each encoded as its change    |
//! |      |                | from the one before (the layout is in `format/events.rs`)        |
//! | 4    | statistics     | bincode 2 (standard configuration) of [`Statistics`]             |
//! | 5    | more functions | bincode 2 of a [`FunctionTable`] of the modules and functions   |
//! |      |                | planned during the recording (a library loaded with `dlopen`):  |
//! |      |                | ids and module indices continue those before it                 |
//! | 6    | user stacks    | bincode 2 of [`UserStacks`]: the functions whose entries carry |
//! |      |                | a stack id and each stack's symbolized frames (`record --stack`, |
//! |      |                | written at the end, before the statistics)                       |
//! | 7    | detached       | bincode 2 of a list of [`Detachment`]s: functions whose probes  |
//! |      | functions      | `record --budget` took off during the recording, written then    |
//!
//! Order: metadata, function table, any number of events and more-functions chunks, statistics
//! when the recording ended cleanly. A more-functions chunk comes before the events that use its
//! ids; readers gather them all when they open a file, so reports know every function first. Readers skip chunks of kinds they do not know, and ignore bytes that follow a
//! bincode value inside its payload, so later versions can add chunks and append fields.
//!
//! A payload is at most [`MAX_CHUNK_LEN`] bytes (64 MiB): readers refuse longer ones without
//! allocating them. The function table is the only chunk that comes near that: 100,000 functions
//! with 200-byte names take about 23 MB. An events chunk holds at most [`EVENTS_PER_CHUNK`]
//! events (1.5 MiB in memory) in at most [`MAX_EVENTS_LEN`] bytes (about 2 MB), which bounds
//! what a reader allocates for one.
//!
//! [`Metadata`]: super::Metadata
//! [`Statistics`]: super::Statistics
//! [`UserStacks`]: crate::user_stack::UserStacks
//! [`Detachment`]: crate::table::Detachment
//!
mod events;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::Metadata;
use crate::table::FunctionTable;

pub use events::{EventDecoder, EventEncoder, MAX_EVENTS_LEN};

/// The first 8 bytes of every `utrace.data` file.
pub const MAGIC: [u8; 8] = *b"UTRACE\0D";
/// The format version this code writes (3: events stored as changes from the event before; the
/// metadata holds the probe costs measured at start, and each function its probe class; 4: the
/// statistics end with the events lost per thread; 5: each chunk header checks itself, and an
/// events chunk's says how many events it holds; 6: events may carry captured values, whose
/// specs follow each function table; 7: an exit of the innermost open call is written as a
/// return, without its function and stack; 8: a function may be of the kind `Tracer`, the time
/// utrace held a thread stopped, which a reader of version 7 cannot decode; 9: a function may be
/// of the kind `Preemption`, the time a thread was preempted, which a reader of 8 cannot decode;
/// 10: a function, and a probe cost, may be of a kernel function's probe class, whose exit kind a
/// reader of 9 cannot decode).
pub const VERSION: u32 = 10;
/// The oldest version this code reads: version 4 differs only in the chunk headers' last word.
pub const OLDEST_VERSION: u32 = 4;
/// Size of the file header: magic, version, reserved.
pub const FILE_HEADER_LEN: usize = 16;
/// Size of a chunk header: kind, length, checksum, reserved.
pub const CHUNK_HEADER_LEN: usize = 16;

/// The longest payload a chunk may have (64 MiB).
pub const MAX_CHUNK_LEN: u32 = 64 << 20;
/// The most events one chunk may hold.
pub const EVENTS_PER_CHUNK: usize = 64 * 1024;

/// The tally bits that count events: enough for [`EVENTS_PER_CHUNK`].
const TALLY_EVENTS: u32 = (1 << 17) - 1;
const TALLY_CHECK_SHIFT: u32 = 17;

/// What a chunk holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkKind {
    Metadata,
    FunctionTable,
    Events,
    Statistics,
    MoreFunctions,
    UserStacks,
    Detachments,
    /// A kind this version does not know: skipped.
    Unknown(u32),
}

impl ChunkKind {
    pub fn from_code(code: u32) -> ChunkKind {
        match code {
            1 => ChunkKind::Metadata,
            2 => ChunkKind::FunctionTable,
            3 => ChunkKind::Events,
            4 => ChunkKind::Statistics,
            5 => ChunkKind::MoreFunctions,
            6 => ChunkKind::UserStacks,
            7 => ChunkKind::Detachments,
            other => ChunkKind::Unknown(other),
        }
    }

    pub fn code(self) -> u32 {
        match self {
            ChunkKind::Metadata => 1,
            ChunkKind::FunctionTable => 2,
            ChunkKind::Events => 3,
            ChunkKind::Statistics => 4,
            ChunkKind::MoreFunctions => 5,
            ChunkKind::UserStacks => 6,
            ChunkKind::Detachments => 7,
            ChunkKind::Unknown(code) => code,
        }
    }

    /// How messages name the chunk.
    pub fn name(self) -> &'static str {
        match self {
            ChunkKind::Metadata => "metadata",
            ChunkKind::FunctionTable => "function table",
            ChunkKind::Events => "events",
            ChunkKind::Statistics => "statistics",
            ChunkKind::MoreFunctions => "more functions",
            ChunkKind::UserStacks => "user stacks",
            ChunkKind::Detachments => "detached functions",
            ChunkKind::Unknown(_) => "unknown",
        }
    }
}

/// The file header for this version.
pub fn file_header() -> [u8; FILE_HEADER_LEN] {
    let mut bytes = [0u8; FILE_HEADER_LEN];
    bytes[..8].copy_from_slice(&MAGIC);
    bytes[8..12].copy_from_slice(&VERSION.to_le_bytes());
    bytes
}

/// The format version a file header declares, or `None` when the magic is not ours.
pub fn file_header_version(bytes: &[u8; FILE_HEADER_LEN]) -> Option<u32> {
    if !starts_a_file(bytes) {
        return None;
    }
    Some(le_u32(bytes, 8))
}

/// Whether `bytes` begin with a file header's magic: where a chunk should be, a second recording
/// (two files joined with `cat`).
pub fn starts_a_file(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

/// Whether `bytes`, shorter than a file header, could be the start of one.
pub fn is_magic_prefix(bytes: &[u8]) -> bool {
    let n = bytes.len().min(MAGIC.len());
    bytes[..n] == MAGIC[..n]
}

/// Whether this code reads files of `version`.
pub fn reads_version(version: u32) -> bool {
    (OLDEST_VERSION..=VERSION).contains(&version)
}

/// The header in front of each chunk's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    pub kind: ChunkKind,
    /// Payload bytes.
    pub length: u32,
    /// [`checksum`] of the payload.
    pub checksum: u32,
    /// The events of an events chunk, 0 for the other kinds; `None` in a version 4 header, which
    /// does not say.
    pub events: Option<u32>,
}

impl ChunkHeader {
    /// The header for `payload`, of any kind but events. Callers check the length against
    /// [`MAX_CHUNK_LEN`] first.
    pub fn for_payload(kind: ChunkKind, payload: &[u8]) -> ChunkHeader {
        ChunkHeader {
            kind,
            length: u32::try_from(payload.len()).unwrap_or(u32::MAX),
            checksum: checksum(payload),
            events: Some(0),
        }
    }

    /// The header for an events `payload` of `events` events (at most [`EVENTS_PER_CHUNK`]).
    pub fn for_events(payload: &[u8], events: usize) -> ChunkHeader {
        debug_assert!(events <= EVENTS_PER_CHUNK);
        ChunkHeader {
            events: Some(events as u32),
            ..ChunkHeader::for_payload(ChunkKind::Events, payload)
        }
    }

    /// The header as this version writes it (a `None` event count is written as 0).
    pub fn encode(&self) -> [u8; CHUNK_HEADER_LEN] {
        let mut bytes = [0u8; CHUNK_HEADER_LEN];
        bytes[0..4].copy_from_slice(&self.kind.code().to_le_bytes());
        bytes[4..8].copy_from_slice(&self.length.to_le_bytes());
        bytes[8..12].copy_from_slice(&self.checksum.to_le_bytes());
        let events = self.events.unwrap_or(0) & TALLY_EVENTS;
        let tally = events | header_check(&bytes, events) << TALLY_CHECK_SHIFT;
        bytes[12..16].copy_from_slice(&tally.to_le_bytes());
        bytes
    }

    /// Reads a header of a file of `version`; `None` when the header does not check (version 5
    /// on), which means it is damaged.
    pub fn decode(bytes: &[u8; CHUNK_HEADER_LEN], version: u32) -> Option<ChunkHeader> {
        let tally = le_u32(bytes, 12);
        let events = if version >= 5 {
            let events = tally & TALLY_EVENTS;
            if tally >> TALLY_CHECK_SHIFT != header_check(bytes, events) {
                return None;
            }
            Some(events)
        } else {
            None
        };
        Some(ChunkHeader {
            kind: ChunkKind::from_code(le_u32(bytes, 0)),
            length: le_u32(bytes, 4),
            checksum: le_u32(bytes, 8),
            events,
        })
    }

    /// Whether the header can be trusted on its own: its check passed. A version 4 header cannot
    /// be checked; only its payload's checksum can vouch for it.
    pub fn is_checked(&self) -> bool {
        self.events.is_some()
    }

    /// The longest payload a chunk of this kind may have.
    pub fn max_length(&self) -> usize {
        match self.kind {
            ChunkKind::Events => MAX_EVENTS_LEN,
            _ => MAX_CHUNK_LEN as usize,
        }
    }
}

/// The 15-bit check of a chunk header: over its first 12 bytes and its event count.
fn header_check(bytes: &[u8; CHUNK_HEADER_LEN], events: u32) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&bytes[..12]);
    hasher.update(&events.to_le_bytes());
    hasher.finalize() & (u32::MAX >> TALLY_CHECK_SHIFT)
}

/// The checksum stored in a chunk header.
pub fn checksum(payload: &[u8]) -> u32 {
    crc32fast::hash(payload)
}

fn le_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<{ MAX_CHUNK_LEN as usize }>()
}

/// The payload of a metadata, function table or statistics chunk.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, bincode::error::EncodeError> {
    bincode::serde::encode_to_vec(value, bincode_config())
}

/// The payload of a metadata chunk: the metadata, then the spread of each of its probe costs
/// ([`ProbeCosts::spreads`](crate::probe_cost::ProbeCosts::spreads)), which readers that
/// predate it ignore.
pub fn encode_metadata(metadata: &Metadata) -> Result<Vec<u8>, bincode::error::EncodeError> {
    let mut payload = encode(metadata)?;
    let spreads = metadata.probe_costs.as_ref().map(|costs| costs.spreads());
    payload.extend(encode(&spreads.unwrap_or_default())?);
    Ok(payload)
}

/// Decodes a metadata payload, with the spreads of its probe costs when it has them (a file
/// written before has none).
pub fn decode_metadata(payload: &[u8]) -> Result<Metadata, bincode::error::DecodeError> {
    let (mut metadata, used): (Metadata, usize) = decode_with_length(payload)?;
    let rest = &payload[used..];
    if let (Some(costs), false) = (&mut metadata.probe_costs, rest.is_empty()) {
        let spreads: Vec<u64> = decode(rest)?;
        costs.set_spreads(&spreads);
    }
    Ok(metadata)
}

/// The payload of a function table or more-functions chunk: the table, then (version 6) the
/// specs of the values its functions capture, then the source lines of its functions, then where
/// each module's symbols came from, then the names of arguments where known; readers that
/// predate one of these ignore it and what follows.
pub fn encode_table(table: &FunctionTable) -> Result<Vec<u8>, bincode::error::EncodeError> {
    let mut payload = encode(table)?;
    payload.extend(encode(&table.captured_values())?);
    payload.extend(encode(&table.source_lines())?);
    payload.extend(encode(&table.symbol_origins)?);
    payload.extend(encode(&table.argument_names())?);
    Ok(payload)
}

/// Decodes a function table or more-functions payload, with what follows it when it does (a
/// table written before has less).
pub fn decode_table(payload: &[u8]) -> Result<FunctionTable, bincode::error::DecodeError> {
    let (mut table, used): (FunctionTable, usize) = decode_with_length(payload)?;
    let mut rest = &payload[used..];
    if !rest.is_empty() {
        let (values, used) = decode_with_length(rest)?;
        table.set_captured_values(values);
        rest = &rest[used..];
    }
    if !rest.is_empty() {
        let (lines, used) = decode_with_length(rest)?;
        table.set_source_lines(lines);
        rest = &rest[used..];
    }
    if !rest.is_empty() {
        let (origins, used) = decode_with_length(rest)?;
        table.symbol_origins = origins;
        rest = &rest[used..];
    }
    if !rest.is_empty() {
        table.set_argument_names(decode(rest)?);
    }
    Ok(table)
}

fn decode_with_length<T: DeserializeOwned>(
    payload: &[u8],
) -> Result<(T, usize), bincode::error::DecodeError> {
    bincode::serde::decode_from_slice(payload, bincode_config())
}

/// Decodes a metadata, function table or statistics payload. Bytes after the value are ignored
/// (room for fields a later version appends). Claimed lengths inside the payload are bounded by
/// [`MAX_CHUNK_LEN`], so a hostile payload cannot make it allocate more than that.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, bincode::error::DecodeError> {
    bincode::serde::decode_from_slice(payload, bincode_config()).map(|(value, _)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_header_round_trip() {
        let header = file_header();
        assert_eq!(&header[..8], b"UTRACE\0D");
        assert_eq!(file_header_version(&header), Some(VERSION));
        let mut other = header;
        other[0] = b'X';
        assert_eq!(file_header_version(&other), None);
        assert!(is_magic_prefix(b"UTR"));
        assert!(is_magic_prefix(b""));
        assert!(!is_magic_prefix(b"UTX"));
    }

    #[test]
    fn chunk_header_layout_is_little_endian() {
        let header = ChunkHeader {
            kind: ChunkKind::Events,
            length: 0x0102_0304,
            checksum: 0xa0b0_c0d0,
            events: Some(0x1_0000),
        };
        let bytes = header.encode();
        assert_eq!(
            bytes[..12],
            [3, 0, 0, 0, 4, 3, 2, 1, 0xd0, 0xc0, 0xb0, 0xa0]
        );
        let tally = u32::from_le_bytes(bytes[12..].try_into().unwrap());
        assert_eq!(tally & TALLY_EVENTS, 0x1_0000);
        assert_eq!(tally >> TALLY_CHECK_SHIFT, header_check(&bytes, 0x1_0000));
        assert_eq!(ChunkHeader::decode(&bytes, VERSION), Some(header));
        // Version 4: the last word is not read, and nothing is checked.
        let old = ChunkHeader::decode(&[99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 7, 7, 7], 4);
        assert_eq!(
            old.map(|h| (h.kind, h.events)),
            Some((ChunkKind::Unknown(99), None))
        );
    }

    #[test]
    fn every_flipped_header_bit_fails_the_check() {
        let header = ChunkHeader::for_events(b"some events", 3).encode();
        for bit in 0..CHUNK_HEADER_LEN * 8 {
            let mut damaged = header;
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(ChunkHeader::decode(&damaged, VERSION), None, "bit {bit}");
        }
    }

    /// A table of two functions, the second with a captured argument, its name and a source
    /// line, and where its module's symbols came from.
    fn described_table() -> FunctionTable {
        use crate::table::SourceLine;
        use crate::value::{ValueFormat, ValueSource, ValueSpec};
        let mut table = FunctionTable::of_names(&["main", "add"]);
        table.functions[1].values = vec![ValueSpec::new(
            ValueSource::Argument(1),
            ValueFormat::Signed,
        )];
        table.functions[1].source = Some(SourceLine {
            file: "test/args.c".into(),
            line: 10,
        });
        table.symbol_origins = vec![(0, "2 functions from .symtab".into())];
        table.functions[1].argument_names = vec!["a".into()];
        table
    }

    #[test]
    fn tables_keep_their_values_source_lines_and_symbol_origins() {
        let table = described_table();
        let payload = encode_table(&table).unwrap();
        assert_eq!(decode_table(&payload).unwrap(), table);
    }

    #[test]
    fn tables_written_before_source_lines_read_without_them() {
        let table = described_table();
        // Version 5: the table alone.
        let v5 = encode(&table).unwrap();
        let read = decode_table(&v5).unwrap();
        assert!(read.functions.iter().all(|f| f.values.is_empty()));
        assert!(read.functions.iter().all(|f| f.source.is_none()));
        // Version 6 before source lines: the table and its values.
        let mut v6 = encode(&table).unwrap();
        v6.extend(encode(&table.captured_values()).unwrap());
        let read = decode_table(&v6).unwrap();
        assert_eq!(read.functions[1].values, table.functions[1].values);
        assert!(read.functions.iter().all(|f| f.source.is_none()));
        // Then source lines, before symbol origins.
        v6.extend(encode(&table.source_lines()).unwrap());
        let read = decode_table(&v6).unwrap();
        assert_eq!(read.functions[1].source, table.functions[1].source);
        assert!(read.symbol_origins.is_empty());
        // Then symbol origins, before argument names.
        v6.extend(encode(&table.symbol_origins).unwrap());
        let read = decode_table(&v6).unwrap();
        assert_eq!(read.symbol_origins, table.symbol_origins);
        assert!(read.functions.iter().all(|f| f.argument_names.is_empty()));
    }
}
