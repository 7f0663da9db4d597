//! Reads `utrace.data` as a stream of event blocks. Each events chunk is decoded into a reused
//! buffer of [`Event`]s, with no allocation per event, nor per block once the buffers have grown
//! to the largest chunk.
//!
//! Hostile or damaged files give a [`DataError`], never a panic, and nothing is allocated on a
//! header's word beyond [`MAX_CHUNK_LEN`](format::MAX_CHUNK_LEN). A damaged chunk after the
//! function table is skipped and noted (see [`chunks`](super::chunks)), unless the reader is told
//! to fail on it ([`OnDamage::Fail`]).

use std::fs::File;
use std::io::{self, BufReader, Read, Seek};
use std::path::Path;

use super::chunks::{read_full, Chunks, DamagedChunk, Fault, OnDamage, Payloads, Step};
use super::format::{self, ChunkHeader, ChunkKind, EventDecoder, FILE_HEADER_LEN};
use super::{DataError, Metadata, Statistics};
use crate::event::Event;
use crate::table::{Detachment, FunctionTable};
use crate::user_stack::UserStacks;

const BUFFER_CAPACITY: usize = 256 * 1024;

/// Where the reader is in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Between chunks, after the function table.
    Events,
    /// The recording ended cleanly: its statistics chunk has been read (or was damaged).
    Finished,
    /// The file ended in the middle of a chunk or before a statistics chunk.
    CutShort,
    /// An error was returned; nothing more is read.
    Failed,
}

/// Reads one recording: the metadata and function table at [`open`](Self::open), then the event
/// blocks one at a time with [`next_events`](Self::next_events).
pub struct DataReader<R = File> {
    chunks: Chunks<R>,
    metadata: Metadata,
    functions: FunctionTable,
    /// The unwound user stacks (`record --stack`), when the file has them.
    user_stacks: Option<UserStacks>,
    statistics: Option<Statistics>,
    state: State,
    decoder: EventDecoder,
    /// The current events block; its length is the largest block read so far.
    events: Vec<Event>,
    /// Events handed out so far: the count of a file cut short before its statistics.
    events_read: u64,
    /// Where a second recording starts, when the file holds one after this one.
    second_recording: Option<u64>,
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
        if file.metadata().is_ok_and(|m| m.is_dir()) {
            return Err(DataError::Directory {
                path: path.to_path_buf(),
            });
        }
        DataReader::from_reader(path, file)
    }
}

impl<R: Read + Seek> DataReader<R> {
    /// Reads a recording from `input` (the fuzz tests give it bytes in memory); `path` only
    /// names it in errors.
    pub fn from_reader(path: &Path, input: R) -> Result<DataReader<R>, DataError> {
        let mut input = BufReader::with_capacity(BUFFER_CAPACITY, input);
        let version = read_file_header(path, &mut input)?;
        let mut chunks = Chunks::new(path, input, version, FILE_HEADER_LEN as u64);
        let metadata = read_table_chunk(&mut chunks, ChunkKind::Metadata, format::decode_metadata)?;
        let mut functions =
            read_table_chunk(&mut chunks, ChunkKind::FunctionTable, format::decode_table)?;
        let events_start = chunks.offset();
        let user_stacks = gather_more_functions(&mut chunks, &mut functions);
        chunks.rewind(events_start)?;
        chunks.set_on_damage(OnDamage::Skip);
        Ok(DataReader {
            chunks,
            metadata,
            functions,
            user_stacks,
            statistics: None,
            state: State::Events,
            decoder: EventDecoder::default(),
            events: Vec::new(),
            events_read: 0,
            second_recording: None,
        })
    }

    /// What to do with a damaged chunk after the function table: skip it (the default) or fail.
    pub fn on_damage(mut self, on_damage: OnDamage) -> Self {
        self.chunks.set_on_damage(on_damage);
        self
    }

    pub fn path(&self) -> &Path {
        self.chunks.path()
    }

    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    pub fn functions(&self) -> &FunctionTable {
        &self.functions
    }

    /// The user stacks unwound at the entries of the functions `record --stack` named; `None`
    /// when the recording has none (or its chunk is damaged).
    pub fn user_stacks(&self) -> Option<&UserStacks> {
        self.user_stacks.as_ref()
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
        self.chunks.offset()
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

    /// The damaged chunks skipped so far, in file order.
    pub fn damaged_chunks(&self) -> &[DamagedChunk] {
        self.chunks.damaged()
    }

    /// The events lost with the damaged chunks, once the events have all been read: `None`
    /// when that is not known (a damaged header hid a chunk's count, and the statistics that
    /// would tell are not there).
    pub fn events_lost_to_damage(&self) -> Option<u64> {
        let damaged = self.damaged_chunks();
        if damaged.is_empty() {
            return Some(0);
        }
        match &self.statistics {
            Some(statistics) => Some(statistics.events.saturating_sub(self.events_read)),
            None => damaged.iter().map(DamagedChunk::events_lost).sum(),
        }
    }

    /// Where a second recording starts in the file (two files joined with `cat`), once the
    /// events have been read up to it. It is not read.
    pub fn second_recording(&self) -> Option<u64> {
        self.second_recording
    }

    /// Logs a warning for each damaged chunk skipped and for a second recording, once the
    /// events have been read.
    pub fn warn_about_damage(&self) {
        let path = self.path().display();
        for chunk in self.damaged_chunks() {
            log::warn!("{path}: {chunk}");
        }
        if let Some(offset) = self.second_recording {
            log::warn!(
                "{path}: a second recording starts at byte {offset} (two files joined?): only the \
                 first is read; `tail -c +{} {path}` gives the second",
                offset + 1
            );
        }
    }

    /// Reads chunks up to the next events block, which it leaves in `self.events[..len]`;
    /// `None` when there are no more.
    fn read_events_block(&mut self) -> Result<Option<usize>, DataError> {
        loop {
            let (header, offset) = match self.chunks.next(Payloads::All)? {
                Step::Chunk { header, offset } => (header, offset),
                Step::End | Step::Cut => {
                    self.state = self.state_at_end();
                    return Ok(None);
                }
                Step::SecondRecording(offset) => {
                    self.found_second_recording(offset)?;
                    self.state = self.state_at_end();
                    return Ok(None);
                }
            };
            match header.kind {
                ChunkKind::Events => {
                    let decoded = self.decoder.decode(&self.chunks.payload, &mut self.events);
                    match (decoded, header.events) {
                        (Ok(count), Some(said)) if count != said as usize => {
                            let fault = format!("{count} events where its header says {said}");
                            self.chunks.reject(offset, header, Fault::Corrupt(fault))?;
                        }
                        (Ok(0), _) => {}
                        (Ok(count), _) => return Ok(Some(count)),
                        (Err(reason), _) => {
                            let fault = format!("the events do not decode: {reason}");
                            self.chunks.reject(offset, header, Fault::Corrupt(fault))?;
                        }
                    }
                }
                ChunkKind::Statistics => {
                    match format::decode(&self.chunks.payload) {
                        Ok(statistics) => self.statistics = Some(statistics),
                        Err(error) => {
                            let fault = Fault::Corrupt(decode_reason(&header, &error));
                            self.chunks.reject(offset, header, fault)?;
                        }
                    }
                    // Statistics come last; a file header after them starts a second recording,
                    // and nothing else that follows is read.
                    self.state = State::Finished;
                    if self.chunks.at_file_header()? {
                        self.found_second_recording(self.chunks.offset())?;
                    }
                    return Ok(None);
                }
                ChunkKind::Metadata | ChunkKind::FunctionTable => {
                    // Another recording, whose file header is damaged: not this one's events.
                    if self.chunks.on_damage() == OnDamage::Fail {
                        let reason = format!("a second {} chunk", header.kind.name());
                        return Err(DataError::corrupt(self.path(), offset, reason));
                    }
                    self.found_second_recording(offset)?;
                    self.state = self.state_at_end();
                    return Ok(None);
                }
                // Gathered when the file was opened.
                ChunkKind::MoreFunctions
                | ChunkKind::UserStacks
                | ChunkKind::Detachments
                | ChunkKind::Unknown(_) => {}
            }
        }
    }

    /// How the recording ended, when the file ends (or a second recording starts) without its
    /// statistics: cut short, unless a damaged chunk may have been its statistics (one that says
    /// so, or one whose kind is unknown with nothing whole after it).
    fn state_at_end(&self) -> State {
        let statistics_damaged = self.damaged_chunks().iter().any(|chunk| match chunk.kind {
            Some(kind) => kind == ChunkKind::Statistics,
            None => chunk.resumed_at.is_none(),
        });
        if statistics_damaged {
            State::Finished
        } else {
            State::CutShort
        }
    }

    fn found_second_recording(&mut self, offset: u64) -> Result<(), DataError> {
        if self.chunks.on_damage() == OnDamage::Fail {
            return Err(DataError::SecondRecording {
                path: self.path().to_path_buf(),
                offset,
            });
        }
        self.second_recording = Some(offset);
        Ok(())
    }
}

/// Reads the file header; the format version it declares, which this code reads.
fn read_file_header<R: Read>(path: &Path, input: &mut R) -> Result<u32, DataError> {
    let mut header = [0u8; FILE_HEADER_LEN];
    let got = read_full(input, &mut header).map_err(|error| DataError::io(path, error))?;
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
        None => Err(DataError::NotUtrace {
            path: path.to_path_buf(),
        }),
        Some(version) if format::reads_version(version) => Ok(version),
        Some(found) => Err(DataError::Version {
            path: path.to_path_buf(),
            found,
        }),
    }
}

/// Reads the next known chunk, which must be of `kind`, skipping unknown ones. Any damage is an
/// error: nothing can be reported without these chunks.
fn read_table_chunk<R: Read + Seek, T>(
    chunks: &mut Chunks<R>,
    kind: ChunkKind,
    decode: fn(&[u8]) -> Result<T, bincode::error::DecodeError>,
) -> Result<T, DataError> {
    let no_table = DataError::NoFunctionTable {
        path: chunks.path().to_path_buf(),
    };
    loop {
        let (header, offset) = match chunks.next(Payloads::All)? {
            Step::Chunk { header, offset } => (header, offset),
            Step::End | Step::Cut | Step::SecondRecording(_) => return Err(no_table),
        };
        if let ChunkKind::Unknown(_) = header.kind {
            continue;
        }
        if header.kind != kind {
            return Err(DataError::corrupt(
                chunks.path(),
                offset,
                format!(
                    "a {} chunk where the {} should be",
                    header.kind.name(),
                    kind.name()
                ),
            ));
        }
        return decode(&chunks.payload).map_err(|error| {
            DataError::corrupt(chunks.path(), offset, decode_reason(&header, &error))
        });
    }
}

/// Adds the functions of every "more functions" chunk after the function table to `functions`,
/// reading no other payload but the user stacks', which it returns, so reports know every
/// function and stack before the first event. Best effort: it stops where a damaged chunk might
/// have been one (later chunks number their functions on from it), and reading the events then
/// says what is wrong.
fn gather_more_functions<R: Read + Seek>(
    chunks: &mut Chunks<R>,
    functions: &mut FunctionTable,
) -> Option<UserStacks> {
    let mut user_stacks = None;
    gather_chunks(chunks, functions, &mut user_stacks);
    user_stacks
}

fn gather_chunks<R: Read + Seek>(
    chunks: &mut Chunks<R>,
    functions: &mut FunctionTable,
    user_stacks: &mut Option<UserStacks>,
) {
    chunks.set_on_damage(OnDamage::Skip);
    loop {
        let damaged_before = chunks.damaged().len();
        let step = chunks.next(Payloads::Some(&[
            ChunkKind::MoreFunctions,
            ChunkKind::UserStacks,
            ChunkKind::Detachments,
        ]));
        let lost_one = chunks.damaged()[damaged_before..]
            .iter()
            .any(|chunk| matches!(chunk.kind, None | Some(ChunkKind::MoreFunctions)));
        if lost_one {
            return;
        }
        match step {
            Ok(Step::Chunk { header, .. }) => match header.kind {
                ChunkKind::MoreFunctions => match format::decode_table(&chunks.payload) {
                    Ok(more) => functions.extend(more),
                    Err(_) => return,
                },
                ChunkKind::UserStacks => *user_stacks = format::decode(&chunks.payload).ok(),
                ChunkKind::Detachments => {
                    let detached: Vec<Detachment> =
                        format::decode(&chunks.payload).unwrap_or_default();
                    mark_detached(functions, &detached);
                }
                // Another recording's, with its file header damaged.
                ChunkKind::Metadata | ChunkKind::FunctionTable => return,
                _ => {}
            },
            _ => return,
        }
    }
}

/// Marks the functions `--budget` detached, as reports show them. A damaged list marks none:
/// their counts still say what was recorded.
fn mark_detached(functions: &mut FunctionTable, detached: &[Detachment]) {
    for detachment in detached {
        if let Some(function) = functions.functions.get_mut(detachment.function as usize) {
            function.detached = Some(*detachment);
        }
    }
}

/// Why a metadata, function table or statistics payload that matched its checksum is refused.
fn decode_reason(header: &ChunkHeader, error: &bincode::error::DecodeError) -> String {
    format!("the {} does not decode: {error}", header.kind.name())
}

impl<R: Read + Seek> crate::event::EventSource for DataReader<R> {
    type Error = DataError;

    fn next_block(&mut self) -> Result<Option<&[Event]>, DataError> {
        self.next_events()
    }
}
