//! A report written to a file appears whole or not at all: it is written under a temporary name
//! beside its target (the same directory, so the same file system) and renamed over the target
//! once complete. A report that fails leaves no file behind, and an older report of the same name
//! stays as it was.
//!
//! What is not a regular file (`/dev/null`, a FIFO, a terminal) is written directly: renaming over
//! it would replace it. A symbolic link is followed, so the file it points to gets the report.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// A report file being written; [`commit`](Self::commit) puts it in place, dropping it without
/// removes what was written.
pub struct PendingFile {
    out: BufWriter<File>,
    /// Where the report goes, and the temporary file it is written to until then (`None` when
    /// it is written in place).
    target: PathBuf,
    temporary: Option<PathBuf>,
}

impl PendingFile {
    /// Starts writing the report that is to end up at `target`.
    pub fn create(target: &Path) -> io::Result<PendingFile> {
        let target = follow_link(target);
        let existing = fs::metadata(&target).ok();
        match &existing {
            Some(meta) if meta.is_dir() => return Err(io::Error::from_raw_os_error(libc::EISDIR)),
            Some(meta) if !meta.is_file() => {
                return Ok(PendingFile {
                    out: BufWriter::new(File::create(&target)?),
                    target,
                    temporary: None,
                })
            }
            _ => {}
        }
        let (file, temporary) = create_beside(&target)?;
        if let Some(meta) = existing {
            // The report replaces a file: it keeps that file's permissions. Best effort.
            let _ = file.set_permissions(meta.permissions());
        }
        Ok(PendingFile {
            out: BufWriter::new(file),
            target,
            temporary: Some(temporary),
        })
    }

    /// Writes out what is buffered and puts the report in place.
    pub fn commit(mut self) -> io::Result<()> {
        self.out.flush()?;
        if let Some(temporary) = self.temporary.take() {
            if let Err(error) = fs::rename(&temporary, &self.target) {
                let _ = fs::remove_file(&temporary);
                return Err(error);
            }
        }
        Ok(())
    }
}

/// `path`, or where it leads when it is a symbolic link (even one to a file not there yet).
fn follow_link(path: &Path) -> PathBuf {
    let is_link = fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink());
    if !is_link {
        return path.to_path_buf();
    }
    if let Ok(real) = fs::canonicalize(path) {
        return real;
    }
    match fs::read_link(path) {
        // Relative to the link's directory; an absolute one replaces it in the join.
        Ok(to) => path.parent().unwrap_or(Path::new("")).join(to),
        Err(_) => path.to_path_buf(),
    }
}

/// Creates a new file in `target`'s directory, named after it, that no other file has.
fn create_beside(target: &Path) -> io::Result<(File, PathBuf)> {
    let directory = match target.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let name = target
        .file_name()
        .map_or_else(|| "report".into(), |name| name.to_string_lossy());
    let pid = std::process::id();
    let mut attempt = 0u32;
    loop {
        let temporary = directory.join(format!(".{name}.{pid}.{attempt}.utrace-tmp"));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temporary)
        {
            Ok(file) => return Ok((file, temporary)),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists && attempt < 100 => {
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

impl Write for PendingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.out.write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if let Some(temporary) = self.temporary.take() {
            // Best effort: the error that stopped the report is the one to report.
            let _ = fs::remove_file(temporary);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_committed_file_replaces_its_target_whole() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("report.txt");
        fs::write(&target, "older report").unwrap();
        let mut pending = PendingFile::create(&target).unwrap();
        pending.write_all(b"new report").unwrap();
        // Until it is committed, the older one is there, and the new one beside it.
        assert_eq!(fs::read_to_string(&target).unwrap(), "older report");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2);
        pending.commit().unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "new report");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_dropped_file_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("idle.svg");
        let mut pending = PendingFile::create(&target).unwrap();
        pending.write_all(b"<svg").unwrap();
        drop(pending);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_link_is_followed_and_a_device_written_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.txt");
        let link = dir.path().join("link.txt");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mut pending = PendingFile::create(&link).unwrap();
        pending.write_all(b"through the link").unwrap();
        pending.commit().unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read_to_string(&real).unwrap(), "through the link");

        let mut null = PendingFile::create(Path::new("/dev/null")).unwrap();
        null.write_all(b"gone").unwrap();
        null.commit().unwrap();
        assert!(!fs::metadata("/dev/null").unwrap().is_file());
    }
}
