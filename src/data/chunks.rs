//! The chunks of a file, one at a time, each checked: a chunk whose header or payload is damaged
//! is skipped, and reading goes on at the next whole chunk (or, when asked, it is an error).
//!
//! Where the next chunk starts is known from the damaged chunk's header when that header checks
//! (version 5 on), or, in a version 4 file, when a whole chunk follows where it says it ends.
//! Otherwise the bytes after the damage are scanned for a header that checks with a payload that
//! matches its checksum, or for a file header (a second recording).

use std::fmt;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::format::{self, ChunkHeader, ChunkKind, CHUNK_HEADER_LEN};
use super::DataError;

/// What the reader does with a damaged chunk after the function table. (The chunks up to the
/// function table hold what every report needs: their damage is always an error.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnDamage {
    /// Skip it, note it (see [`DataReader::damaged_chunks`](super::DataReader::damaged_chunks)),
    /// and read on from the next whole chunk.
    #[default]
    Skip,
    /// Stop with an error (`--strict`, for scripts).
    Fail,
}

/// A chunk the reader skipped because it was damaged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DamagedChunk {
    /// Where the damaged chunk starts.
    pub offset: u64,
    /// Where reading went on: the next whole chunk, or the end of the file (`None`).
    pub resumed_at: Option<u64>,
    /// What the chunk held, when its header could be trusted.
    pub kind: Option<ChunkKind>,
    /// The events it held, when its header could be trusted and says (version 5 on).
    pub events: Option<u64>,
    /// What was found wrong.
    pub reason: String,
}

impl DamagedChunk {
    /// The events lost with the chunk: `None` when unknown.
    pub fn events_lost(&self) -> Option<u64> {
        match self.kind {
            Some(ChunkKind::Events) | None => self.events,
            Some(_) => Some(0),
        }
    }
}

impl fmt::Display for DamagedChunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = self
            .kind
            .map_or(String::new(), |kind| format!("{} ", kind.name()));
        let resumed = match self.resumed_at {
            Some(at) => format!("read on at byte {at}"),
            None => "nothing whole after it".to_string(),
        };
        let lost = match (self.kind, self.events) {
            (Some(ChunkKind::Statistics), _) => "the recording's totals are lost".to_string(),
            (Some(ChunkKind::MoreFunctions), _) => {
                "the functions it added are lost, and their calls with them".to_string()
            }
            (Some(ChunkKind::Unknown(_)), _) => "it held nothing this utrace reads".to_string(),
            (_, Some(1)) => "1 event lost".to_string(),
            (_, Some(events)) => format!("{events} events lost"),
            (_, None) => "an unknown number of events lost".to_string(),
        };
        write!(
            f,
            "damaged {kind}chunk at byte {} skipped ({}; {resumed}): {lost}",
            self.offset, self.reason
        )
    }
}

/// What is wrong with a chunk.
pub(super) enum Fault {
    Checksum,
    Corrupt(String),
}

impl Fault {
    fn reason(&self) -> String {
        match self {
            Fault::Checksum => "checksum mismatch".to_string(),
            Fault::Corrupt(reason) => reason.clone(),
        }
    }

    fn into_error(self, path: &Path, offset: u64) -> DataError {
        match self {
            Fault::Checksum => DataError::Checksum {
                path: path.to_path_buf(),
                offset,
            },
            Fault::Corrupt(reason) => DataError::corrupt(path, offset, reason),
        }
    }
}

/// What [`Chunks::next`] found.
pub(super) enum Step {
    /// A chunk whose header and payload check; its payload is in [`Chunks::payload`] when it
    /// was read.
    Chunk { header: ChunkHeader, offset: u64 },
    /// The file ends here, at a chunk boundary.
    End,
    /// The file ends inside a chunk.
    Cut,
    /// A file header where a chunk should be, at this offset: a second recording (two files
    /// joined with `cat`).
    SecondRecording(u64),
}

/// Which payloads [`Chunks::next`] reads and checks; the others are seeked over.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Payloads {
    All,
    /// Those of any of these kinds.
    Some(&'static [ChunkKind]),
}

impl Payloads {
    fn includes(self, kind: ChunkKind) -> bool {
        match self {
            Payloads::All => true,
            Payloads::Some(kinds) => kinds.contains(&kind),
        }
    }
}

/// Walks the chunks of one file from a given offset.
pub(super) struct Chunks<R> {
    path: PathBuf,
    input: BufReader<R>,
    /// The file's format version.
    version: u32,
    /// Offset of the next chunk header.
    offset: u64,
    on_damage: OnDamage,
    /// The payload of the last chunk read whole, reused from chunk to chunk.
    pub(super) payload: Vec<u8>,
    damaged: Vec<DamagedChunk>,
}

impl<R: Read + Seek> Chunks<R> {
    /// Walks the chunks of `input`, a file of `version` positioned at `offset`; damage is an
    /// error until [`set_on_damage`](Self::set_on_damage) says otherwise.
    pub(super) fn new(path: &Path, input: BufReader<R>, version: u32, offset: u64) -> Self {
        Chunks {
            path: path.to_path_buf(),
            input,
            version,
            offset,
            on_damage: OnDamage::Fail,
            payload: Vec::new(),
            damaged: Vec::new(),
        }
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Offset of the next chunk: how far the file has been read.
    pub(super) fn offset(&self) -> u64 {
        self.offset
    }

    pub(super) fn set_on_damage(&mut self, on_damage: OnDamage) {
        self.on_damage = on_damage;
    }

    pub(super) fn on_damage(&self) -> OnDamage {
        self.on_damage
    }

    /// The chunks skipped so far.
    pub(super) fn damaged(&self) -> &[DamagedChunk] {
        &self.damaged
    }

    /// Goes back to `offset` (a chunk boundary seen before), forgetting the damage seen since.
    pub(super) fn rewind(&mut self, offset: u64) -> Result<(), DataError> {
        self.seek(offset)?;
        self.damaged.clear();
        Ok(())
    }

    /// The next chunk whose header and payload (if `payloads` reads it) check, past any damaged
    /// ones when damage is skipped.
    pub(super) fn next(&mut self, payloads: Payloads) -> Result<Step, DataError> {
        loop {
            let offset = self.offset;
            let mut bytes = [0u8; CHUNK_HEADER_LEN];
            let got = read_full(&mut self.input, &mut bytes).map_err(|e| self.io(e))?;
            if format::starts_a_file(&bytes[..got]) {
                return Ok(Step::SecondRecording(offset));
            }
            if got == 0 {
                return Ok(Step::End);
            }
            if got < bytes.len() {
                return Ok(Step::Cut);
            }
            let header = match self.checked_header(&bytes) {
                Ok(header) => header,
                Err(fault) => {
                    self.skip_damaged(offset, None, fault)?;
                    continue;
                }
            };
            let length = header.length as usize;
            let end = next_offset(offset, &header);
            if !payloads.includes(header.kind) {
                // Past the end of the file, the next header reads as the end.
                self.input
                    .seek_relative(i64::from(header.length))
                    .map_err(|e| self.io(e))?;
                self.offset = end;
                return Ok(Step::Chunk { header, offset });
            }
            if !self.read_payload(length)? {
                // The file ends inside the payload: it was cut short, unless what says so is a
                // damaged length that a header check would have caught.
                if header.is_checked()
                    || self.on_damage == OnDamage::Fail
                    || self.find_boundary(offset + 1)? >= self.file_len()?
                {
                    return Ok(Step::Cut);
                }
                let fault = Fault::Corrupt("its length runs past the end of the file".into());
                self.skip_damaged(offset, None, fault)?;
                continue;
            }
            if format::checksum(&self.payload) != header.checksum {
                self.skip_damaged(offset, Some(header), Fault::Checksum)?;
                continue;
            }
            self.offset = end;
            return Ok(Step::Chunk { header, offset });
        }
    }

    /// Records that the chunk at `offset`, just read whole with `header`, holds what its kind
    /// cannot hold, and goes on after it; an error instead when damage is not skipped.
    pub(super) fn reject(
        &mut self,
        offset: u64,
        header: ChunkHeader,
        fault: Fault,
    ) -> Result<(), DataError> {
        if self.on_damage == OnDamage::Fail {
            return Err(fault.into_error(&self.path, offset));
        }
        // Its checksum matched: its header is what was written.
        self.damaged.push(DamagedChunk {
            offset,
            resumed_at: Some(self.offset),
            kind: Some(header.kind),
            events: header.events.map(u64::from),
            reason: fault.reason(),
        });
        Ok(())
    }

    /// Whether a file header follows at the current offset (after the last chunk of a
    /// recording: a second one).
    pub(super) fn at_file_header(&mut self) -> Result<bool, DataError> {
        let mut bytes = [0u8; format::FILE_HEADER_LEN];
        let got = read_full(&mut self.input, &mut bytes).map_err(|e| self.io(e))?;
        self.seek(self.offset)?;
        Ok(format::starts_a_file(&bytes[..got]))
    }

    /// The header in `bytes` if it checks and its length is within bounds.
    fn checked_header(&self, bytes: &[u8; CHUNK_HEADER_LEN]) -> Result<ChunkHeader, Fault> {
        // Read without its check first, so that an absurd length is named as such.
        let claimed = ChunkHeader::decode(bytes, format::OLDEST_VERSION)
            .expect("a version 4 header is not checked");
        if claimed.length as usize > claimed.max_length() {
            return Err(Fault::Corrupt(format!(
                "{} chunk of {} bytes, more than the {} it may hold",
                claimed.kind.name(),
                claimed.length,
                claimed.max_length()
            )));
        }
        ChunkHeader::decode(bytes, self.version)
            .ok_or_else(|| Fault::Corrupt("its header is damaged".into()))
    }

    /// Skips the damaged chunk at `offset` (`header` as read, if its kind and length could be
    /// read) to the next chunk boundary, and records it; an error instead when damage is not
    /// skipped.
    fn skip_damaged(
        &mut self,
        offset: u64,
        header: Option<ChunkHeader>,
        fault: Fault,
    ) -> Result<(), DataError> {
        if self.on_damage == OnDamage::Fail {
            return Err(fault.into_error(&self.path, offset));
        }
        let trusted = match header {
            Some(header) if header.is_checked() => Some(header),
            // A version 4 header: trusted if a chunk boundary is where it says it ends.
            Some(header) if self.is_boundary(next_offset(offset, &header))? => Some(header),
            _ => None,
        };
        let resume = match trusted {
            Some(header) => next_offset(offset, &header),
            None => self.find_boundary(offset + 1)?,
        };
        let file_len = self.file_len()?;
        self.damaged.push(DamagedChunk {
            offset,
            resumed_at: (resume < file_len).then_some(resume),
            kind: trusted.map(|header| header.kind),
            events: trusted.and_then(|header| header.events).map(u64::from),
            reason: fault.reason(),
        });
        self.seek(resume.min(file_len))
    }

    /// The first chunk boundary at or after `from`: a whole chunk that checks, a file header,
    /// or the end of the file.
    fn find_boundary(&mut self, from: u64) -> Result<u64, DataError> {
        const WINDOW: usize = 64 * 1024;
        let mut window = Vec::with_capacity(WINDOW + CHUNK_HEADER_LEN);
        let mut start = from;
        loop {
            self.seek_input(start)?;
            window.clear();
            (&mut self.input)
                .take((WINDOW + CHUNK_HEADER_LEN) as u64)
                .read_to_end(&mut window)
                .map_err(|e| self.io(e))?;
            let last = window.len() <= WINDOW;
            let scanned = if last { window.len() } else { WINDOW };
            for at in 0..scanned {
                let rest = &window[at..];
                let position = start + at as u64;
                if format::starts_a_file(rest)
                    || (self.could_start_chunk(rest).is_some()
                        && self.is_whole_chunk_at(position)?)
                {
                    return Ok(position);
                }
            }
            if last {
                return Ok(start + window.len() as u64);
            }
            start += WINDOW as u64;
        }
    }

    /// Whether `offset` is a chunk boundary: a whole chunk that checks, a file header, or the
    /// end of the file.
    fn is_boundary(&mut self, offset: u64) -> Result<bool, DataError> {
        let file_len = self.file_len()?;
        if offset >= file_len {
            return Ok(offset == file_len);
        }
        let mut bytes = [0u8; CHUNK_HEADER_LEN];
        self.seek_input(offset)?;
        let got = read_full(&mut self.input, &mut bytes).map_err(|e| self.io(e))?;
        Ok(format::starts_a_file(&bytes[..got]) || self.is_whole_chunk_at(offset)?)
    }

    /// The header `bytes` start with, if it is of a known kind, checks, and has a length within
    /// bounds: what a chunk boundary found by scanning must start with. Cheap, and allocates
    /// nothing: it is tried at every byte scanned.
    fn could_start_chunk(&self, bytes: &[u8]) -> Option<ChunkHeader> {
        let bytes = bytes.first_chunk::<CHUNK_HEADER_LEN>()?;
        let kind = u32::from_le_bytes(*bytes.first_chunk::<4>()?);
        if let ChunkKind::Unknown(_) = ChunkKind::from_code(kind) {
            return None;
        }
        ChunkHeader::decode(bytes, self.version)
            .filter(|header| header.length as usize <= header.max_length())
    }

    /// Whether a chunk of a known kind, its header and payload checking, is at `offset`.
    fn is_whole_chunk_at(&mut self, offset: u64) -> Result<bool, DataError> {
        self.seek_input(offset)?;
        let mut bytes = [0u8; CHUNK_HEADER_LEN];
        let got = read_full(&mut self.input, &mut bytes).map_err(|e| self.io(e))?;
        let Some(header) = self.could_start_chunk(&bytes[..got]) else {
            return Ok(false);
        };
        Ok(self.read_payload(header.length as usize)?
            && format::checksum(&self.payload) == header.checksum)
    }

    /// Reads a `length`-byte payload into `payload`, which grows with the bytes actually read
    /// rather than with what the header claims. `false` when the file ends first.
    fn read_payload(&mut self, length: usize) -> Result<bool, DataError> {
        self.payload.clear();
        (&mut self.input)
            .take(length as u64)
            .read_to_end(&mut self.payload)
            .map_err(|e| self.io(e))?;
        Ok(self.payload.len() == length)
    }

    /// The length of the file. Leaves the input at its end: the walk seeks back before reading.
    fn file_len(&mut self) -> Result<u64, DataError> {
        self.input.seek(SeekFrom::End(0)).map_err(|e| self.io(e))
    }

    /// Moves the walk to `offset`.
    fn seek(&mut self, offset: u64) -> Result<(), DataError> {
        self.seek_input(offset)?;
        self.offset = offset;
        Ok(())
    }

    /// Moves the input, not the walk: for looking ahead, after which the walk seeks.
    fn seek_input(&mut self, offset: u64) -> Result<(), DataError> {
        self.input
            .seek(SeekFrom::Start(offset))
            .map(drop)
            .map_err(|e| self.io(e))
    }

    fn io(&self, error: io::Error) -> DataError {
        DataError::io(&self.path, error)
    }
}

/// Offset of the chunk after the one at `offset`; the length was checked against the cap, so
/// this cannot overflow for any file that exists, and saturates for those that cannot.
fn next_offset(offset: u64, header: &ChunkHeader) -> u64 {
    offset
        .saturating_add(CHUNK_HEADER_LEN as u64)
        .saturating_add(u64::from(header.length))
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
pub(super) fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}
