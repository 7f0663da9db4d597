//! What can go wrong writing or reading `utrace.data`. Every message is one line that names the
//! file.

use std::io;
use std::path::{Path, PathBuf};

use super::format::{MAX_CHUNK_LEN, OLDEST_VERSION, VERSION};

#[derive(thiserror::Error, Debug)]
pub enum DataError {
    #[error("{}: {error}", path.display())]
    Io { path: PathBuf, error: io::Error },

    #[error("{}: no such file: record one with `utrace record`, or name another with -i", path.display())]
    Missing { path: PathBuf },

    #[error("{}: empty file: nothing was recorded; record again", path.display())]
    Empty { path: PathBuf },

    #[error("{}: not a utrace.data file: give a file written by `utrace record`", path.display())]
    NotUtrace { path: PathBuf },

    #[error("{}: is a directory: name a data file with -i", path.display())]
    Directory { path: PathBuf },

    #[error(
        "{}: format version {found}, this utrace reads versions {OLDEST_VERSION} to {VERSION}: \
         report it with the utrace that recorded it",
        path.display()
    )]
    Version { path: PathBuf, found: u32 },

    #[error("{} ends before its function table: nothing was recorded; record again", path.display())]
    NoFunctionTable { path: PathBuf },

    #[error("{}: corrupt chunk at byte {offset} (checksum mismatch)", path.display())]
    Checksum { path: PathBuf, offset: u64 },

    #[error("{}: corrupt chunk at byte {offset} ({reason})", path.display())]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },

    #[error(
        "{}: a second recording starts at byte {offset} (two files joined?)",
        path.display()
    )]
    SecondRecording { path: PathBuf, offset: u64 },

    #[error(
        "{}: the {what} takes {len} bytes, more than the {} a chunk may hold",
        path.display(),
        MAX_CHUNK_LEN
    )]
    TooLarge {
        path: PathBuf,
        what: &'static str,
        len: usize,
    },

    #[error("{}: cannot encode the {what}: {error}", path.display())]
    Encode {
        path: PathBuf,
        what: &'static str,
        error: bincode::error::EncodeError,
    },

    #[error(
        "{}: an earlier write failed; the file holds what was written before it",
        path.display()
    )]
    WriterFailed { path: PathBuf },
}

impl DataError {
    pub(super) fn io(path: &Path, error: io::Error) -> DataError {
        DataError::Io {
            path: path.to_path_buf(),
            error,
        }
    }

    pub(super) fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> DataError {
        DataError::Corrupt {
            path: path.to_path_buf(),
            offset,
            reason: reason.into(),
        }
    }
}
