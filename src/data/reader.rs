//! Reads `utrace.data` as a stream of event blocks. Each events chunk is decoded into a reused
//! buffer of [`Event`]s, with no allocation per event, nor per block once the buffers have grown
//! to the largest chunk.
//!
//! Hostile or damaged files give a [`DataError`], never a panic, and nothing is allocated on a
//! header's word beyond [`MAX_CHUNK_LEN`](format::MAX_CHUNK_LEN).

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use super::format::{
    self, ChunkHeader, ChunkKind, EventDecoder, CHUNK_HEADER_LEN, FILE_HEADER_LEN, MAX_CHUNK_LEN,
};
use super::{DataError, Metadata, Statistics};
use crate::event::Event;
use crate::table::FunctionTable;

const BUFFER_CAPACITY: usize = 256 * 1024;

/// Where the reader is in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Between chunks, after the function table.
    Events,
    /// The statistics chunk has been read: the recording ended cleanly.
    Finished,
    /// The file ended in the middle of a chunk or before a statistics chunk.
    CutShort,
    /// An error was returned; nothing more is read.
    Failed,
}

/// What came after the last whole chunk.
enum Next {
    Chunk(ChunkHeader),
    /// The file ends here, at a chunk boundary.
    End,
    /// The file ends inside a chunk header.
    Cut,
}

/// Reads one recording: the metadata and function table at [`open`](Self::open), then the event
/// blocks one at a time with [`next_events`](Self::next_events).
pub struct DataReader<R = File> {
    path: PathBuf,
    input: BufReader<R>,
    /// Byte offset of the next chunk header.
    offset: u64,
    metadata: Metadata,
    functions: FunctionTable,
    statistics: Option<Statistics>,
    state: State,
    /// The payload of the chunk being read, reused from chunk to chunk.
    payload: Vec<u8>,
    decoder: EventDecoder,
    /// The current events block; its length is the largest block read so far.
    events: Vec<Event>,
    /// Events handed out so far: the count of a file cut short before its statistics.
    events_read: u64,
}

impl DataReader<File> {
    /// Opens `path` and reads its header, metadata and function table.
    pub fn open(path: &Path) -> Result<DataReader, DataError> {
        let file = File::open(path).map_err(|error| match error.kind() {
            io::ErrorKind::NotFound => DataError::Missing {
                path: path.to_path_buf(),
            },
            _ => DataError::io(path, error),
        })?;
        DataReader::from_reader(path, file)
    }
}

impl<R: Read + Seek> DataReader<R> {
    /// Reads a recording from `input` (the fuzz tests give it bytes in memory); `path` only
    /// names it in errors.
    pub fn from_reader(path: &Path, input: R) -> Result<DataReader<R>, DataError> {
        let mut input = BufReader::with_capacity(BUFFER_CAPACITY, input);

        let mut header = [0u8; FILE_HEADER_LEN];
        let got = read_full(&mut input, &mut header).map_err(|error| DataError::io(path, error))?;
        if got == 0 {
            return Err(DataError::Empty {
                path: path.to_path_buf(),
            });
        }
        if got < header.len() {
            return Err(if format::is_magic_prefix(&header[..got]) {
                DataError::NoFunctionTable {
                    path: path.to_path_buf(),
                }
            } else {
                DataError::NotUtrace {
                    path: path.to_path_buf(),
                }
            });
        }
        match format::file_header_version(&header) {
            None => {
                return Err(DataError::NotUtrace {
                    path: path.to_path_buf(),
                })
            }
            Some(format::VERSION) => {}
            Some(found) => {
                return Err(DataError::Version {
                    path: path.to_path_buf(),
                    found,
                    supported: format::VERSION,
                })
            }
        }

        let mut opening = Opening {
            path,
            input: &mut input,
            offset: FILE_HEADER_LEN as u64,
            payload: Vec::new(),
        };
        let metadata = opening.read_table_chunk(ChunkKind::Metadata)?;
        let mut functions = opening.read_table_chunk(ChunkKind::FunctionTable)?;
        let offset = opening.offset;
        gather_more_functions(path, &mut input, offset, &mut functions);
        input
            .seek(SeekFrom::Start(offset))
            .map_err(|error| DataError::io(path, error))?;
        Ok(DataReader {
            path: path.to_path_buf(),
            input,
            offset,
            metadata,
            functions,
            statistics: None,
            state: State::Events,
            payload: Vec::new(),
            decoder: EventDecoder::default(),
            events: Vec::new(),
            events_read: 0,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    pub fn functions(&self) -> &FunctionTable {
        &self.functions
    }

    /// The next block of events, in the order they were written; `None` at the end of the file
    /// (after which [`cut_short`](Self::cut_short) and [`statistics`](Self::statistics) say how
    /// it ended). The slice lives in a buffer that the next call reuses. After an error, every
    /// later call returns `None`.
    pub fn next_events(&mut self) -> Result<Option<&[Event]>, DataError> {
        if self.state != State::Events {
            return Ok(None);
        }
        match self.read_events_block() {
            Ok(Some(len)) => {
                self.events_read += len as u64;
                Ok(Some(&self.events[..len]))
            }
            Ok(None) => Ok(None),
            Err(error) => {
                self.state = State::Failed;
                Err(error)
            }
        }
    }

    /// Bytes of the file read so far, up to the end of the last chunk read.
    pub fn bytes_read(&self) -> u64 {
        self.offset
    }

    /// Events returned by [`next_events`](Self::next_events) so far.
    pub fn events_read(&self) -> u64 {
        self.events_read
    }

    /// The statistics, once [`next_events`](Self::next_events) has reached them.
    pub fn statistics(&self) -> Option<&Statistics> {
        self.statistics.as_ref()
    }

    /// Whether the file ended in the middle of a chunk or without statistics (the recorder was
    /// killed): its events are those up to the last whole chunk. Known once
    /// [`next_events`](Self::next_events) has returned `None`.
    pub fn cut_short(&self) -> bool {
        self.state == State::CutShort
    }

    /// Reads chunks up to the next events block, which it leaves in `self.events[..len]`;
    /// `None` when there are no more.
    fn read_events_block(&mut self) -> Result<Option<usize>, DataError> {
        loop {
            let offset = self.offset;
            let header = match read_chunk_header(&self.path, &mut self.input, offset)? {
                Next::Chunk(header) => header,
                Next::End | Next::Cut => {
                    self.state = State::CutShort;
                    return Ok(None);
                }
            };
            let length = header.length as usize;
            match header.kind {
                ChunkKind::Events => {
                    if length > format::MAX_EVENTS_LEN {
                        return Err(DataError::corrupt(
                            &self.path,
                            offset,
                            format!(
                                "an events chunk of {length} bytes, more than the {} its \
                                 events can take",
                                format::MAX_EVENTS_LEN
                            ),
                        ));
                    }
                    if !read_payload(&self.path, &mut self.input, length, &mut self.payload)? {
                        self.state = State::CutShort;
                        return Ok(None);
                    }
                    check_sum(&self.path, offset, &header, &self.payload)?;
                    let count = self
                        .decoder
                        .decode(&self.payload, &mut self.events)
                        .map_err(|reason| {
                            DataError::corrupt(
                                &self.path,
                                offset,
                                format!("the events do not decode: {reason}"),
                            )
                        })?;
                    self.offset = next_offset(offset, &header);
                    if count > 0 {
                        return Ok(Some(count));
                    }
                }
                ChunkKind::Statistics => {
                    if !read_payload(&self.path, &mut self.input, length, &mut self.payload)? {
                        self.state = State::CutShort;
                        return Ok(None);
                    }
                    check_sum(&self.path, offset, &header, &self.payload)?;
                    self.statistics = Some(decode(&self.path, offset, &header, &self.payload)?);
                    self.offset = next_offset(offset, &header);
                    // Statistics come last; whatever follows is not read.
                    self.state = State::Finished;
                    return Ok(None);
                }
                ChunkKind::Metadata | ChunkKind::FunctionTable => {
                    return Err(DataError::corrupt(
                        &self.path,
                        offset,
                        format!("a second {} chunk", header.kind.name()),
                    ));
                }
                // Gathered when the file was opened.
                ChunkKind::MoreFunctions | ChunkKind::Unknown(_) => {
                    if !skip(&self.path, &mut self.input, length)? {
                        self.state = State::CutShort;
                        return Ok(None);
                    }
                    self.offset = next_offset(offset, &header);
                }
            }
        }
    }
}

/// Adds the functions of every "more functions" chunk from `offset` on to `functions`, seeking
/// over the rest, so reports know every function before the first event. Best effort: it stops
/// at the first chunk it cannot read, and reading the events then reports what is wrong.
fn gather_more_functions<R: Read + Seek>(
    path: &Path,
    input: &mut BufReader<R>,
    mut offset: u64,
    functions: &mut FunctionTable,
) {
    let mut payload = Vec::new();
    while let Ok(Next::Chunk(header)) = read_chunk_header(path, input, offset) {
        let length = header.length as usize;
        if header.kind == ChunkKind::MoreFunctions {
            let more = read_payload(path, input, length, &mut payload)
                .ok()
                .filter(|&whole| whole)
                .and_then(|_| check_sum(path, offset, &header, &payload).ok())
                .and_then(|()| decode::<FunctionTable>(path, offset, &header, &payload).ok());
            match more {
                Some(more) => functions.extend(more),
                None => return,
            }
        } else if input
            .seek(SeekFrom::Current(i64::from(header.length)))
            .is_err()
        {
            return;
        }
        offset = next_offset(offset, &header);
    }
}

/// Reads the chunks up to the function table, which must all be there.
struct Opening<'a, R> {
    path: &'a Path,
    input: &'a mut BufReader<R>,
    offset: u64,
    payload: Vec<u8>,
}

impl<R: Read> Opening<'_, R> {
    /// Reads the next known chunk, which must be of `kind`, skipping unknown ones.
    fn read_table_chunk<T: DeserializeOwned>(&mut self, kind: ChunkKind) -> Result<T, DataError> {
        let no_table = || DataError::NoFunctionTable {
            path: self.path.to_path_buf(),
        };
        loop {
            let offset = self.offset;
            let header = match read_chunk_header(self.path, self.input, offset)? {
                Next::Chunk(header) => header,
                Next::End | Next::Cut => return Err(no_table()),
            };
            let length = header.length as usize;
            if let ChunkKind::Unknown(_) = header.kind {
                if !skip(self.path, self.input, length)? {
                    return Err(no_table());
                }
                self.offset = next_offset(offset, &header);
                continue;
            }
            if header.kind != kind {
                return Err(DataError::corrupt(
                    self.path,
                    offset,
                    format!(
                        "a {} chunk where the {} should be",
                        header.kind.name(),
                        kind.name()
                    ),
                ));
            }
            if !read_payload(self.path, self.input, length, &mut self.payload)? {
                return Err(no_table());
            }
            check_sum(self.path, offset, &header, &self.payload)?;
            let value = decode(self.path, offset, &header, &self.payload)?;
            self.offset = next_offset(offset, &header);
            return Ok(value);
        }
    }
}

/// Reads the chunk header at `offset` and checks its length against the cap.
fn read_chunk_header(path: &Path, input: &mut impl Read, offset: u64) -> Result<Next, DataError> {
    let mut bytes = [0u8; CHUNK_HEADER_LEN];
    let got = read_full(input, &mut bytes).map_err(|error| DataError::io(path, error))?;
    if got == 0 {
        return Ok(Next::End);
    }
    if got < bytes.len() {
        return Ok(Next::Cut);
    }
    let header = ChunkHeader::decode(&bytes);
    if header.length > MAX_CHUNK_LEN {
        return Err(DataError::corrupt(
            path,
            offset,
            format!(
                "{} chunk of {} bytes, more than the {MAX_CHUNK_LEN} a chunk may hold",
                header.kind.name(),
                header.length
            ),
        ));
    }
    Ok(Next::Chunk(header))
}

/// Offset of the chunk after the one at `offset`; the length was checked against the cap, so
/// this cannot overflow for any file that exists, and saturates for those that cannot.
fn next_offset(offset: u64, header: &ChunkHeader) -> u64 {
    offset
        .saturating_add(CHUNK_HEADER_LEN as u64)
        .saturating_add(u64::from(header.length))
}

/// Reads a `length`-byte payload into `payload`, which grows with the bytes actually read rather
/// than with what the header claims. `false` when the file ends first.
fn read_payload(
    path: &Path,
    input: &mut impl Read,
    length: usize,
    payload: &mut Vec<u8>,
) -> Result<bool, DataError> {
    payload.clear();
    input
        .take(length as u64)
        .read_to_end(payload)
        .map_err(|error| DataError::io(path, error))?;
    Ok(payload.len() == length)
}

/// Skips a `length`-byte payload; `false` when the file ends first.
fn skip(path: &Path, input: &mut impl Read, length: usize) -> Result<bool, DataError> {
    let skipped = io::copy(&mut input.take(length as u64), &mut io::sink())
        .map_err(|error| DataError::io(path, error))?;
    Ok(skipped == length as u64)
}

fn check_sum(
    path: &Path,
    offset: u64,
    header: &ChunkHeader,
    payload: &[u8],
) -> Result<(), DataError> {
    if format::checksum(payload) == header.checksum {
        Ok(())
    } else {
        Err(DataError::Checksum {
            path: path.to_path_buf(),
            offset,
        })
    }
}

fn decode<T: DeserializeOwned>(
    path: &Path,
    offset: u64,
    header: &ChunkHeader,
    payload: &[u8],
) -> Result<T, DataError> {
    format::decode(payload).map_err(|error| {
        DataError::corrupt(
            path,
            offset,
            format!("the {} does not decode: {error}", header.kind.name()),
        )
    })
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
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

impl<R: Read + Seek> crate::event::EventSource for DataReader<R> {
    type Error = DataError;

    fn next_block(&mut self) -> Result<Option<&[Event]>, DataError> {
        self.next_events()
    }
}
