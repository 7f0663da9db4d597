//! `/etc/ld.so.cache`: the sonames `ldconfig` indexed, and where each lives. Only the format glibc
//! has written since 2.32 (`glibc-ld.so.cache1.1`, possibly behind the old `ld.so-1.7.0` table) is
//! read; anything else reads as an empty cache, and the loader's default paths still apply.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

const OLD_MAGIC: &[u8] = b"ld.so-1.7.0\0";
const OLD_ENTRY_SIZE: usize = 12;
const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
const NEW_HEADER_SIZE: usize = 48;
const NEW_ENTRY_SIZE: usize = 24;
/// `FLAG_ELF_LIBC6 | FLAG_X8664_LIB64`: an x86_64 glibc library.
const X86_64_LIBC6: u32 = 0x0303;

/// Soname → path, for x86_64 libraries.
#[derive(Debug, Default)]
pub struct LdCache {
    paths: HashMap<String, PathBuf>,
}

impl LdCache {
    /// Reads the system's cache; a missing or unreadable one is empty.
    pub fn system() -> LdCache {
        std::fs::read("/etc/ld.so.cache")
            .map(|bytes| LdCache::parse(&bytes))
            .unwrap_or_default()
    }

    pub fn parse(bytes: &[u8]) -> LdCache {
        let mut paths = HashMap::new();
        let Some(start) = new_format_start(bytes) else {
            return LdCache { paths };
        };
        let header = &bytes[start..];
        let count = read_u32(header, 20).unwrap_or(0) as usize;
        for index in 0..count {
            let entry = NEW_HEADER_SIZE + index * NEW_ENTRY_SIZE;
            let (Some(flags), Some(key), Some(value)) = (
                read_u32(header, entry),
                read_u32(header, entry + 4),
                read_u32(header, entry + 8),
            ) else {
                break;
            };
            if flags & 0xffff != X86_64_LIBC6 {
                continue;
            }
            // String offsets count from the start of the new-format header.
            if let (Some(soname), Some(path)) = (c_string(header, key), c_string(header, value)) {
                // The first entry for a soname is the one the loader uses.
                paths
                    .entry(soname.to_string())
                    .or_insert_with(|| PathBuf::from(path));
            }
        }
        LdCache { paths }
    }

    pub fn find(&self, soname: &str) -> Option<&Path> {
        self.paths.get(soname).map(PathBuf::as_path)
    }
}

/// Where the new-format header starts: at 0, or after the old format's table.
fn new_format_start(bytes: &[u8]) -> Option<usize> {
    if bytes.starts_with(NEW_MAGIC) {
        return Some(0);
    }
    if !bytes.starts_with(OLD_MAGIC) {
        return None;
    }
    let old_count = read_u32(bytes, OLD_MAGIC.len())? as usize;
    let end = (OLD_MAGIC.len() + 4).checked_add(old_count.checked_mul(OLD_ENTRY_SIZE)?)?;
    // The new header follows, aligned like its 64-bit fields.
    let start = end.checked_add(7)? & !7;
    bytes.get(start..)?.starts_with(NEW_MAGIC).then_some(start)
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let field = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(field.try_into().ok()?))
}

fn c_string(bytes: &[u8], at: u32) -> Option<&str> {
    let rest = bytes.get(at as usize..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache in the new format with the given (flags, soname, path) entries.
    fn cache(entries: &[(u32, &str, &str)]) -> Vec<u8> {
        let mut strings = Vec::new();
        let strings_start = NEW_HEADER_SIZE + entries.len() * NEW_ENTRY_SIZE;
        let mut table = Vec::new();
        for (flags, soname, path) in entries {
            let key = (strings_start + strings.len()) as u32;
            strings.extend_from_slice(soname.as_bytes());
            strings.push(0);
            let value = (strings_start + strings.len()) as u32;
            strings.extend_from_slice(path.as_bytes());
            strings.push(0);
            table.extend_from_slice(&flags.to_le_bytes());
            table.extend_from_slice(&key.to_le_bytes());
            table.extend_from_slice(&value.to_le_bytes());
            table.extend_from_slice(&[0; 12]);
        }
        let mut bytes = NEW_MAGIC.to_vec();
        bytes.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&(strings.len() as u32).to_le_bytes());
        bytes.resize(NEW_HEADER_SIZE, 0);
        bytes.extend(table);
        bytes.extend(strings);
        bytes
    }

    #[test]
    fn finds_x86_64_libraries_first_entry_first() {
        let bytes = cache(&[
            (0x0303, "libfoo.so.1", "/lib/x86_64-linux-gnu/libfoo.so.1"),
            (0x0303, "libfoo.so.1", "/usr/local/lib/libfoo.so.1"),
            (0x0003, "libbar.so.2", "/lib/i386-linux-gnu/libbar.so.2"),
        ]);
        let cache = LdCache::parse(&bytes);
        assert_eq!(
            cache.find("libfoo.so.1"),
            Some(Path::new("/lib/x86_64-linux-gnu/libfoo.so.1"))
        );
        assert_eq!(
            cache.find("libbar.so.2"),
            None,
            "32-bit entries are not ours"
        );
    }

    #[test]
    fn damaged_caches_read_as_empty_or_partial() {
        let bytes = cache(&[(0x0303, "libfoo.so.1", "/lib/libfoo.so.1")]);
        for cut in 0..bytes.len() {
            let _ = LdCache::parse(&bytes[..cut]);
        }
        assert!(LdCache::parse(b"not a cache").find("libc.so.6").is_none());
    }

    #[test]
    fn the_system_cache_knows_libc() {
        // Every glibc system has one, and libc is in it.
        let cache = LdCache::system();
        let libc = cache
            .find("libc.so.6")
            .expect("libc.so.6 in /etc/ld.so.cache");
        assert!(libc.exists());
    }
}
