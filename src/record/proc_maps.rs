//! The files a running process has mapped executable, from `/proc/PID/maps`, each with a path
//! that opens the very file mapped: `/proc/PID/map_files/START-END` still reaches a file that was
//! deleted or replaced since, or that lives in another mount namespace.

use std::io;
use std::path::PathBuf;

/// One file mapped with execute permission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedFile {
    /// The path the process mapped it from, as the kernel shows it (without " (deleted)").
    pub path: String,
    /// Opens the mapped file itself.
    pub open_path: PathBuf,
    pub deleted: bool,
}

/// The executable file mappings of `pid`, one per file, in address order.
pub fn executable_files(pid: u32) -> io::Result<Vec<MappedFile>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    Ok(parse_maps(pid, &maps))
}

/// The file mapped executable at `address` in `pid`, and the file offset of that address.
pub fn file_offset_of(pid: u32, address: u64) -> io::Result<Option<(MappedFile, u64)>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    Ok(find_offset(pid, &maps, address))
}

fn parse_maps(pid: u32, maps: &str) -> Vec<MappedFile> {
    let mut files: Vec<MappedFile> = Vec::new();
    for mapping in executable_mappings(maps) {
        let file = mapping.file(pid);
        if !files.iter().any(|f| f.path == file.path) {
            files.push(file);
        }
    }
    files
}

fn find_offset(pid: u32, maps: &str, address: u64) -> Option<(MappedFile, u64)> {
    executable_mappings(maps)
        .find(|m| (m.start..m.end).contains(&address))
        .map(|m| (m.file(pid), address - m.start + m.offset))
}

/// One line of `/proc/PID/maps` that maps a file with execute permission.
struct ExecutableMapping<'a> {
    start: u64,
    end: u64,
    /// File offset of `start`.
    offset: u64,
    /// As the kernel shows it, " (deleted)" included.
    path: &'a str,
}

impl ExecutableMapping<'_> {
    fn file(&self, pid: u32) -> MappedFile {
        let (path, deleted) = match self.path.strip_suffix(" (deleted)") {
            Some(path) => (path, true),
            None => (self.path, false),
        };
        MappedFile {
            path: path.to_string(),
            // Without the leading zeros that /proc/PID/maps pads addresses below 2^32 with (a
            // program linked at 0x400000, as Go links them): map_files has none.
            open_path: PathBuf::from(format!(
                "/proc/{pid}/map_files/{:x}-{:x}",
                self.start, self.end
            )),
            deleted,
        }
    }
}

fn executable_mappings(maps: &str) -> impl Iterator<Item = ExecutableMapping<'_>> {
    maps.lines().filter_map(|line| {
        // address perms offset dev inode path (which may hold spaces)
        let mut fields = line.splitn(6, ' ');
        let range = fields.next()?;
        let perms = fields.next()?;
        let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
        let path = fields.nth(2)?.trim_start();
        if !perms.contains('x') || !path.starts_with('/') {
            return None;
        }
        let (start, end) = range.split_once('-')?;
        Some(ExecutableMapping {
            start: u64::from_str_radix(start, 16).ok()?,
            end: u64::from_str_radix(end, 16).ok()?,
            offset,
            path,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_one_executable_mapping_per_file() {
        let maps = "\
55a9f3956000-55a9f3958000 r--p 00000000 fe:00 247030                     /usr/bin/cat
55a9f3958000-55a9f395d000 r-xp 00002000 fe:00 247030                     /usr/bin/cat
7f00-7f10 r-xp 00000000 fe:00 1 /tmp/lib with space.so (deleted)
7f20-7f30 r-xp 00000000 00:00 0                          [vdso]
7f40-7f50 rw-p 00000000 00:00 0
7f60-7f70 r-xp 00001000 fe:00 247030                     /usr/bin/cat
";
        let files = parse_maps(42, maps);
        assert_eq!(
            files,
            [
                MappedFile {
                    path: "/usr/bin/cat".into(),
                    open_path: "/proc/42/map_files/55a9f3958000-55a9f395d000".into(),
                    deleted: false
                },
                MappedFile {
                    path: "/tmp/lib with space.so".into(),
                    open_path: "/proc/42/map_files/7f00-7f10".into(),
                    deleted: true
                },
            ]
        );
    }

    #[test]
    fn file_offsets_come_from_the_executable_mapping() {
        let maps = "\
55d0c0000000-55d0c0001000 r--p 00000000 fe:01 123 /usr/bin/prog
55d0c0001000-55d0c0005000 r-xp 00001000 fe:01 123 /usr/bin/prog
7f0000000000-7f0000001000 rw-p 00000000 00:00 0
";
        let (file, offset) = find_offset(7, maps, 0x55d0_c000_1234).unwrap();
        assert_eq!(offset, 0x1234);
        assert_eq!(file.path, "/usr/bin/prog");
        assert_eq!(
            file.open_path,
            PathBuf::from("/proc/7/map_files/55d0c0001000-55d0c0005000")
        );
        // Mapped, but not executable; and not mapped at all.
        assert_eq!(find_offset(7, maps, 0x55d0_c000_0010), None);
        assert_eq!(find_offset(7, maps, 0x10), None);
    }

    #[test]
    fn reads_its_own_process() {
        let files = executable_files(std::process::id()).unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(files[0].path, exe.to_string_lossy());
        // The map_files path opens the same file.
        let via_map = std::fs::metadata(&files[0].open_path).unwrap();
        let direct = std::fs::metadata(&exe).unwrap();
        assert_eq!(
            std::os::unix::fs::MetadataExt::ino(&via_map),
            std::os::unix::fs::MetadataExt::ino(&direct)
        );
    }

    #[test]
    fn a_low_mapping_opens_without_leading_zeros() {
        let maps = "00400000-00487000 r-xp 00000000 08:01 1234 /tmp/goprog\n";
        assert_eq!(
            parse_maps(7, maps)[0].open_path,
            PathBuf::from("/proc/7/map_files/400000-487000")
        );
    }
}
