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

fn parse_maps(pid: u32, maps: &str) -> Vec<MappedFile> {
    let mut files: Vec<MappedFile> = Vec::new();
    for line in maps.lines() {
        // address perms offset dev inode path
        let mut fields = line.splitn(6, ' ');
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some(path) = fields.nth(3).map(str::trim_start) else {
            continue;
        };
        if !perms.contains('x') || !path.starts_with('/') {
            continue;
        }
        let (path, deleted) = match path.strip_suffix(" (deleted)") {
            Some(path) => (path, true),
            None => (path, false),
        };
        if files.iter().any(|f| f.path == path) {
            continue;
        }
        files.push(MappedFile {
            path: path.to_string(),
            open_path: PathBuf::from(format!("/proc/{pid}/map_files/{range}")),
            deleted,
        });
    }
    files
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
}
