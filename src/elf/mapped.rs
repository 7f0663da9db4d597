//! Files mapped read-only: parsing touches only the pages it reads (headers, the dynamic section,
//! the symbol tables, the code at probe sites). Reading libLLVM (110 MB) whole to plan its
//! functions copied it into freshly zeroed memory first; a mapping of the page cache does not.

use std::io;
use std::path::Path;

/// A private read-only mapping of a whole file.
pub struct MappedFile {
    address: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is read-only and owned: any thread may read it, and only drop unmaps it.
unsafe impl Send for MappedFile {}
// SAFETY: as above; shared references only read.
unsafe impl Sync for MappedFile {}

impl MappedFile {
    /// Maps the file at `path`; an empty file cannot be mapped and is an error
    /// (`InvalidInput`).
    pub fn open(path: &Path) -> io::Result<MappedFile> {
        let file = std::fs::File::open(path)?;
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file too large to map"))?;
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty file"));
        }
        // SAFETY: a private read-only mapping of a file we opened; the kernel keeps it valid
        // after the descriptor closes, and it is unmapped once, in drop. A file truncated
        // meanwhile would fault: programs and libraries in use are replaced, not rewritten in
        // place.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        match address == libc::MAP_FAILED {
            true => Err(io::Error::last_os_error()),
            false => Ok(MappedFile { address, len }),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `len` readable bytes at `address`, mapped for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.address.cast::<u8>(), self.len) }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, unmapped only here.
        unsafe { libc::munmap(self.address, self.len) };
    }
}

/// A file's bytes: mapped where it was opened from disk, owned where they were made in memory
/// (tests, a decompressed MiniDebugInfo).
pub enum FileBytes {
    Mapped(MappedFile),
    Owned(Vec<u8>),
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(mapped) => mapped.bytes(),
            FileBytes::Owned(bytes) => bytes,
        }
    }
}
