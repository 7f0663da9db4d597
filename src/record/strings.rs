//! Strings the probes could not read. A probe may not fault, so a string on a page the process
//! has not touched yet (a literal in `.rodata` before anything read its page) comes as its
//! address and an error. The recorder reads it as it meets the event, off the probes' path and
//! only then: from the file where the probe placed it in a file mapping nothing has written to
//! (src/bpf/values.bpf.h: it holds what the process saw, and is there after the process has
//! gone); else from the process's memory, which a read from outside faults in. The event's bytes
//! then hold the string as if the probe had read it, or why it cannot be read ([`Unreadable`]).

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};

use crate::event::Event;
use crate::fast_hash::FastHashMap;
use crate::plan::{ProbePlan, TracedFile};
use crate::probe::{StringPlace, StringPlaces};
use crate::table::FunctionId;
use crate::value::{with_unread_strings, Unreadable, ValueFormat, ValueSpec};

/// Reads the strings of the events whose probes could not read them.
#[derive(Default)]
pub struct UnreadStrings {
    /// The values of the functions that capture a string (most capture none).
    specs: FastHashMap<FunctionId, Vec<ValueSpec>>,
    /// The functions of the table looked at so far.
    functions_seen: usize,
    source: StringSource,
}

/// Where the strings are read from.
#[derive(Default)]
struct StringSource {
    /// Where the probes placed them; none before the programs are loaded.
    places: Option<StringPlaces>,
    /// The traced files, open (a running process's `/proc/PID/map_files` paths close with it),
    /// by device and inode as `stat` gives them.
    files: HashMap<(u64, u64), File>,
    /// The plan's files opened so far.
    files_seen: usize,
}

impl UnreadStrings {
    pub fn new(places: StringPlaces) -> UnreadStrings {
        UnreadStrings {
            source: StringSource {
                places: Some(places),
                ..StringSource::default()
            },
            ..UnreadStrings::default()
        }
    }

    /// Takes in the functions and files planned since the last call.
    pub fn learn(&mut self, plan: &ProbePlan) {
        let table = &plan.table;
        let new = table.functions.iter().enumerate().skip(self.functions_seen);
        for (id, function) in new {
            let string = |spec: &ValueSpec| matches!(spec.format, ValueFormat::String { .. });
            if function.values.iter().any(string) {
                self.specs.insert(id as FunctionId, function.values.clone());
            }
        }
        self.functions_seen = table.functions.len();
        // Files are opened only for recordings that capture strings.
        if !self.specs.is_empty() {
            self.source.open_files(&plan.files);
        }
    }

    /// `values`, captured with `event`, with the strings its probe could not read read here;
    /// None when there were none (the usual case, which costs a lookup).
    pub fn read_into(&mut self, event: &Event, values: &[u8]) -> Option<Vec<u8>> {
        if self.specs.is_empty() {
            return None;
        }
        let specs = self.specs.get(&event.function_id())?;
        with_unread_strings(specs, event.is_exit(), values, |pointer, max| {
            self.source.read(event.pid, pointer, usize::from(max) + 1)
        })
    }
}

impl StringSource {
    fn open_files(&mut self, files: &[TracedFile]) {
        for file in files.iter().skip(self.files_seen) {
            let opened =
                File::open(&file.open_path).and_then(|opened| Ok((opened.metadata()?, opened)));
            match opened {
                Ok((metadata, opened)) => {
                    self.files.insert((metadata.dev(), metadata.ino()), opened);
                }
                Err(error) => log::debug!("strings: cannot open {}: {error}", file.path),
            }
        }
        self.files_seen = self.files_seen.max(files.len());
    }

    /// At most `limit` bytes of the string at `pointer` in process `pid`, without its NUL.
    fn read(&self, pid: u32, pointer: u64, limit: usize) -> Result<Vec<u8>, Unreadable> {
        let place = self.places.as_ref().and_then(|p| p.find(pid, pointer));
        match place {
            Some(StringPlace::NotMapped) => return Err(Unreadable::NotMapped),
            Some(StringPlace::InFile {
                device,
                inode,
                offset,
            }) => match self.files.get(&(device, inode)) {
                Some(file) => match read_file_string(file, offset, limit) {
                    Ok(text) => return Ok(text),
                    Err(error) => {
                        log::debug!("strings: cannot read {pointer:#x} in a file: {error}")
                    }
                },
                None => log::debug!("strings: {pointer:#x} lies in a file not traced"),
            },
            Some(StringPlace::InMemory) | None => {}
        }
        read_process_string(pid, pointer, limit).map_err(|error| {
            log::debug!("strings: cannot read {pointer:#x} in process {pid}: {error}");
            match error.raw_os_error() {
                Some(libc::ESRCH) => Unreadable::ProcessEnded,
                _ => Unreadable::NotMapped,
            }
        })
    }
}

/// The bytes of `text` before its first NUL.
fn before_nul(mut text: Vec<u8>) -> Vec<u8> {
    if let Some(nul) = text.iter().position(|&byte| byte == 0) {
        text.truncate(nul);
    }
    text
}

/// At most `limit` bytes of the string at `offset` of `file`.
fn read_file_string(file: &File, offset: u64, limit: usize) -> io::Result<Vec<u8>> {
    let mut text = vec![0u8; limit];
    let mut done = 0;
    while done < limit {
        match file.read_at(&mut text[done..], offset + done as u64)? {
            0 => break,
            read => done += read,
        }
        if text[..done].contains(&0) {
            break;
        }
    }
    text.truncate(done);
    Ok(before_nul(text))
}

/// At most `limit` bytes of the string at `address` of process `pid`, read a page at a time: a
/// string that runs into a page it cannot read ends there; one it cannot begin to read is an
/// error (ESRCH: the process has gone).
fn read_process_string(pid: u32, address: u64, limit: usize) -> io::Result<Vec<u8>> {
    const PAGE: u64 = 4096;
    let mut text = vec![0u8; limit];
    let mut done = 0;
    while done < limit {
        let at = address.wrapping_add(done as u64);
        let want = ((PAGE - at % PAGE) as usize).min(limit - done);
        let local = libc::iovec {
            iov_base: text[done..].as_mut_ptr().cast(),
            iov_len: want,
        };
        let remote = libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: want,
        };
        // SAFETY: the local iovec covers `want` bytes of `text` from `done`, which it has; the
        // remote one is only read, in the other process.
        let read = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if read <= 0 {
            if done == 0 {
                return Err(io::Error::last_os_error());
            }
            break;
        }
        let got = done..done + read as usize;
        done = got.end;
        if text[got].contains(&0) {
            break;
        }
    }
    text.truncate(done);
    Ok(before_nul(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_in_this_process_reads_to_its_nul() {
        let text = b"hello\0world";
        let address = text.as_ptr() as u64;
        let read = read_process_string(std::process::id(), address, 65).unwrap();
        assert_eq!(read, b"hello");
        assert_eq!(
            read_process_string(std::process::id(), address, 3).unwrap(),
            b"hel"
        );
    }

    #[test]
    fn a_string_that_runs_into_an_unmapped_page_ends_there() {
        // SAFETY: a fresh private anonymous mapping of two pages, the second unmapped below.
        let pages = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(pages, libc::MAP_FAILED);
        // SAFETY: the first page is mapped and writable; the second is unmapped after.
        unsafe {
            std::ptr::write_bytes(pages.cast::<u8>(), b'x', 4096);
            libc::munmap(pages.cast::<u8>().add(4096).cast(), 4096);
        }
        let address = pages as u64 + 4093;
        let read = read_process_string(std::process::id(), address, 65).unwrap();
        assert_eq!(read, b"xxx");
        let error = read_process_string(std::process::id(), address + 3, 65).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EFAULT));
        // SAFETY: the first page, mapped above, is no longer used.
        unsafe { libc::munmap(pages, 4096) };
    }

    #[test]
    fn a_string_in_a_file_reads_to_its_nul_or_the_end() {
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, b"..hello\0..tail").unwrap();
        assert_eq!(read_file_string(&file, 2, 65).unwrap(), b"hello");
        assert_eq!(read_file_string(&file, 10, 65).unwrap(), b"tail");
        assert_eq!(read_file_string(&file, 2, 2).unwrap(), b"he");
    }
}
