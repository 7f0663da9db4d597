//! Writes `utrace.data` as the recording goes: each call leaves whole chunks in the file, handed to
//! the OS before it returns, so a recorder killed at any point leaves a readable file.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::format::{self, ChunkHeader, ChunkKind, EventEncoder, EVENTS_PER_CHUNK, MAX_CHUNK_LEN};
use super::{DataError, Metadata, Statistics};
use crate::event::Event;
use crate::table::{Detachment, FunctionTable};
use crate::user_stack::UserStacks;

const BUFFER_CAPACITY: usize = 256 * 1024;

/// Writes one recording. Create it, hand it events as they come, and [`finish`](Self::finish) it.
/// Dropped without `finish`, the file reads as cut short.
pub struct DataWriter {
    path: PathBuf,
    out: BufWriter<File>,
    events_written: u64,
    bytes_written: u64,
    encoder: EventEncoder,
    /// The events payload being written, reused from chunk to chunk.
    payload: Vec<u8>,
    /// Set when a write failed: the file may end in a partial chunk, so nothing more may follow.
    failed: bool,
}

impl DataWriter {
    /// Creates (or truncates) `path` and writes the header, the metadata and the function table.
    pub fn create(
        path: &Path,
        metadata: &Metadata,
        functions: &FunctionTable,
    ) -> Result<DataWriter, DataError> {
        let metadata = checked(path, "metadata", format::encode_metadata(metadata))?;
        let functions = encode_table(path, functions)?;
        let file = File::create(path).map_err(|error| DataError::io(path, error))?;
        let mut writer = DataWriter {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(BUFFER_CAPACITY, file),
            events_written: 0,
            bytes_written: 0,
            encoder: EventEncoder::default(),
            payload: Vec::new(),
            failed: false,
        };
        writer.write(|out| {
            let header = format::file_header();
            out.write_all(&header)?;
            let mut written = header.len() as u64;
            written += write_chunk(
                out,
                ChunkHeader::for_payload(ChunkKind::Metadata, &metadata),
                &metadata,
            )?;
            written += write_chunk(
                out,
                ChunkHeader::for_payload(ChunkKind::FunctionTable, &functions),
                &functions,
            )?;
            Ok(written)
        })?;
        Ok(writer)
    }

    /// Appends `events` as one events chunk, or several when there are more than
    /// [`EVENTS_PER_CHUNK`]. Writes nothing for no events.
    pub fn write_events(&mut self, events: &[Event]) -> Result<(), DataError> {
        if events.is_empty() {
            return Ok(());
        }
        // Moved out for the closure and back after: no allocation.
        let mut payload = std::mem::take(&mut self.payload);
        let mut encoder = std::mem::take(&mut self.encoder);
        let result = self.write(|out| {
            let mut written = 0;
            for block in events.chunks(EVENTS_PER_CHUNK) {
                encoder.encode(block, &mut payload);
                let header = ChunkHeader::for_events(&payload, block.len());
                written += write_chunk(out, header, &payload)?;
            }
            Ok(written)
        });
        self.payload = payload;
        self.encoder = encoder;
        result?;
        self.events_written += events.len() as u64;
        Ok(())
    }

    /// Appends functions planned during the recording (see the format's "more functions"
    /// chunk): `more` holds only the new modules and functions, numbered on from those before.
    pub fn write_more_functions(&mut self, more: &FunctionTable) -> Result<(), DataError> {
        let payload = encode_table(&self.path, more)?;
        let header = ChunkHeader::for_payload(ChunkKind::MoreFunctions, &payload);
        self.write(|out| write_chunk(out, header, &payload))
    }

    /// Appends functions `--budget` detached during the recording.
    pub fn write_detachments(&mut self, detached: &[Detachment]) -> Result<(), DataError> {
        let payload = encode(&self.path, "detached functions", &detached)?;
        let header = ChunkHeader::for_payload(ChunkKind::Detachments, &payload);
        self.write(|out| write_chunk(out, header, &payload))
    }

    /// Appends the user stacks (`record --stack`), before the statistics.
    pub fn write_user_stacks(&mut self, stacks: &UserStacks) -> Result<(), DataError> {
        let payload = encode(&self.path, "user stacks", stacks)?;
        let header = ChunkHeader::for_payload(ChunkKind::UserStacks, &payload);
        self.write(|out| write_chunk(out, header, &payload))
    }

    /// Appends the statistics chunk, which marks the recording as complete, and flushes.
    pub fn finish(mut self, statistics: &Statistics) -> Result<(), DataError> {
        let payload = encode(&self.path, "statistics", statistics)?;
        let header = ChunkHeader::for_payload(ChunkKind::Statistics, &payload);
        self.write(|out| write_chunk(out, header, &payload))
    }

    /// Closes and removes the file, for a recording that never started: a file without events
    /// would read as a recording of nothing.
    pub fn discard(self) {
        drop(self.out);
        // Best effort: the error that made the recording fail is the one to report.
        let _ = std::fs::remove_file(&self.path);
    }

    /// Events written so far: entries, exits and notes, not the pieces of captured values.
    pub fn events_written(&self) -> u64 {
        self.events_written - self.encoder.pieces_encoded()
    }

    /// Bytes written so far, headers included: the length of the file once flushed.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `write` (which returns how many bytes it wrote), then flushes to the OS.
    fn write(
        &mut self,
        write: impl FnOnce(&mut BufWriter<File>) -> io::Result<u64>,
    ) -> Result<(), DataError> {
        if self.failed {
            return Err(DataError::WriterFailed {
                path: self.path.clone(),
            });
        }
        let result = write(&mut self.out);
        match result.and_then(|written| self.out.flush().map(|()| written)) {
            Ok(written) => {
                self.bytes_written += written;
                Ok(())
            }
            Err(error) => {
                self.failed = true;
                Err(DataError::io(&self.path, error))
            }
        }
    }
}

fn encode<T: Serialize>(path: &Path, what: &'static str, value: &T) -> Result<Vec<u8>, DataError> {
    checked(path, what, format::encode(value))
}

/// A function table's payload, with the specs of its captured values.
fn encode_table(path: &Path, table: &FunctionTable) -> Result<Vec<u8>, DataError> {
    checked(path, "function table", format::encode_table(table))
}

/// `encoded`, or why it cannot be written.
fn checked(
    path: &Path,
    what: &'static str,
    encoded: Result<Vec<u8>, bincode::error::EncodeError>,
) -> Result<Vec<u8>, DataError> {
    let payload = encoded.map_err(|error| DataError::Encode {
        path: path.to_path_buf(),
        what,
        error,
    })?;
    if payload.len() > MAX_CHUNK_LEN as usize {
        return Err(DataError::TooLarge {
            path: path.to_path_buf(),
            what,
            len: payload.len(),
        });
    }
    Ok(payload)
}

/// Writes one chunk, whose payload is at most [`MAX_CHUNK_LEN`] bytes; returns the bytes written.
fn write_chunk(out: &mut impl Write, header: ChunkHeader, payload: &[u8]) -> io::Result<u64> {
    debug_assert!(payload.len() <= MAX_CHUNK_LEN as usize);
    let header = header.encode();
    out.write_all(&header)?;
    out.write_all(payload)?;
    Ok((header.len() + payload.len()) as u64)
}
