//! Finding the shared libraries a program will load before it runs, the way the dynamic loader
//! does: DT_NEEDED breadth first, then for each name DT_RPATH (when there is no DT_RUNPATH),
//! LD_LIBRARY_PATH, DT_RUNPATH, `/etc/ld.so.cache` and the default directories.

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use goblin::elf::Elf;

use super::ldcache::LdCache;
use super::mapped::MappedFile;

/// Where the loader looks last.
const DEFAULT_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// A library the program will load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NeededLibrary {
    /// The DT_NEEDED name (`libc.so.6`).
    pub name: String,
    pub path: PathBuf,
}

/// The libraries found, and the names that were not.
#[derive(Debug, Default)]
pub struct LoadOrder {
    pub libraries: Vec<NeededLibrary>,
    pub missing: Vec<String>,
}

/// What the loader needs of one ELF file.
struct DynamicInfo {
    soname: Option<String>,
    needed: Vec<String>,
    rpath: Vec<String>,
    runpath: Vec<String>,
}

fn dynamic_info(path: &Path) -> Option<DynamicInfo> {
    let mapped = MappedFile::open(path).ok()?;
    let elf = Elf::parse(mapped.bytes()).ok()?;
    let split = |entries: &[&str]| -> Vec<String> {
        entries
            .iter()
            .flat_map(|e| e.split(':'))
            .filter(|d| !d.is_empty())
            .map(String::from)
            .collect()
    };
    Some(DynamicInfo {
        soname: elf.soname.map(str::to_owned),
        needed: elf.libraries.iter().map(|s| s.to_string()).collect(),
        rpath: split(&elf.rpaths),
        runpath: split(&elf.runpaths),
    })
}

/// An object whose DT_NEEDED entries are being resolved: its search directories, `$ORIGIN`
/// already expanded.
struct Needer {
    rpath: Vec<String>,
    runpath: Vec<String>,
}

impl Needer {
    fn new(path: &Path, info: &DynamicInfo) -> Rc<Needer> {
        Rc::new(Needer {
            rpath: expand_origin(&info.rpath, path),
            runpath: expand_origin(&info.runpath, path),
        })
    }
}

/// The loader's search directories that do not depend on the needing object.
struct SearchPath<'a> {
    executable_rpath: Vec<String>,
    library_path: Vec<String>,
    cache: &'a LdCache,
}

/// The libraries `executable` will load, in the loader's order.
pub fn load_order(executable: &Path, cache: &LdCache) -> LoadOrder {
    let mut order = LoadOrder::default();
    let Some(main) = dynamic_info(executable) else {
        return order;
    };
    let main_needer = Needer::new(executable, &main);
    let search = SearchPath {
        executable_rpath: main_needer.rpath.clone(),
        library_path: std::env::var("LD_LIBRARY_PATH")
            .unwrap_or_default()
            .split([':', ';'])
            .filter(|d| !d.is_empty())
            .map(String::from)
            .collect(),
        cache,
    };
    let mut seen: HashSet<String> = HashSet::new();
    let mut queue: VecDeque<(String, Rc<Needer>)> = main
        .needed
        .into_iter()
        .map(|name| (name, Rc::clone(&main_needer)))
        .collect();
    while let Some((name, needer)) = queue.pop_front() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let Some(path) = find_library(&name, &needer, &search) else {
            order.missing.push(name);
            continue;
        };
        if let Some(info) = dynamic_info(&path) {
            let library = Needer::new(&path, &info);
            queue.extend(info.needed.into_iter().map(|n| (n, Rc::clone(&library))));
        }
        order.libraries.push(NeededLibrary { name, path });
    }
    order
}

/// The order in which a running process loaded its libraries, from the files it has mapped:
/// `libraries` are (path as mapped, path that opens the file), in any order (`/proc/PID/maps`
/// lists them by address, which is not load order). DT_NEEDED is followed breadth first from
/// `executable`, each name matched to a mapped library by its DT_SONAME or file name (as the
/// loader recognises a library it has already loaded); libraries no DT_NEEDED reaches (opened
/// with dlopen) follow in the order given.
pub fn mapped_load_order(executable: &Path, libraries: &[(String, PathBuf)]) -> MappedLoadOrder {
    let infos: Vec<Option<DynamicInfo>> = libraries
        .iter()
        .map(|(_, open)| dynamic_info(open))
        .collect();
    let matches = |name: &str, index: usize| {
        let path = &libraries[index].0;
        if name.contains('/') {
            return path == name;
        }
        let soname = infos[index].as_ref().and_then(|i| i.soname.as_deref());
        soname == Some(name) || Path::new(path).file_name() == Some(name.as_ref())
    };
    let mut order: Vec<usize> = Vec::new();
    let mut queue: VecDeque<String> = dynamic_info(executable)
        .map(|info| info.needed.into())
        .unwrap_or_default();
    let mut seen: HashSet<String> = HashSet::new();
    while let Some(name) = queue.pop_front() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let Some(index) = (0..libraries.len()).find(|&i| matches(&name, i)) else {
            continue;
        };
        if order.contains(&index) {
            continue;
        }
        order.push(index);
        if let Some(info) = &infos[index] {
            queue.extend(info.needed.iter().cloned());
        }
    }
    let reached = order.clone();
    order.extend((0..libraries.len()).filter(|i| !reached.contains(i)));
    MappedLoadOrder {
        indices: order,
        needed: reached.len(),
    }
}

/// The libraries of a running process in load order ([`mapped_load_order`]).
#[derive(Debug)]
pub struct MappedLoadOrder {
    /// Indices into the libraries given.
    pub indices: Vec<usize>,
    /// How many of the first `indices` DT_NEEDED reaches: loaded with the program, they stay
    /// mapped where they are until it exits.
    pub needed: usize,
}

fn find_library(name: &str, needer: &Needer, search: &SearchPath) -> Option<PathBuf> {
    if name.contains('/') {
        let path = PathBuf::from(name);
        return path.is_file().then_some(path);
    }
    let in_dirs = |dirs: &[String]| {
        dirs.iter()
            .map(|dir| Path::new(dir).join(name))
            .find(|candidate| candidate.is_file())
    };
    // DT_RPATH counts only where the needing object has no DT_RUNPATH; the executable's applies
    // to every library it brings in.
    let rpath = if needer.runpath.is_empty() {
        in_dirs(&needer.rpath).or_else(|| in_dirs(&search.executable_rpath))
    } else {
        None
    };
    rpath
        .or_else(|| in_dirs(&search.library_path))
        .or_else(|| in_dirs(&needer.runpath))
        .or_else(|| {
            let cached = search.cache.find(name)?;
            cached.is_file().then(|| cached.to_path_buf())
        })
        .or_else(|| {
            DEFAULT_DIRS
                .iter()
                .map(|dir| Path::new(dir).join(name))
                .find(|candidate| candidate.is_file())
        })
}

/// Replaces `$ORIGIN` (the directory of `object`) in search directories.
fn expand_origin(dirs: &[String], object: &Path) -> Vec<String> {
    let origin = object
        .canonicalize()
        .ok()
        .and_then(|p| p.parent().map(|d| d.to_string_lossy().into_owned()))
        .unwrap_or_default();
    dirs.iter()
        .map(|dir| {
            dir.replace("${ORIGIN}", &origin)
                .replace("$ORIGIN", &origin)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_is_the_objects_directory() {
        let dirs = vec!["$ORIGIN/../lib".to_string(), "${ORIGIN}".to_string()];
        let expanded = expand_origin(&dirs, Path::new("/bin/sh"));
        let bin = Path::new("/bin").canonicalize().unwrap();
        assert_eq!(expanded[0], format!("{}/../lib", bin.display()));
        assert_eq!(expanded[1], bin.display().to_string());
    }

    #[test]
    fn a_system_program_needs_libc_found_where_ldd_finds_it() {
        let sh = Path::new("/bin/sh");
        let order = load_order(sh, &LdCache::system());
        assert!(order.missing.is_empty(), "{:?}", order.missing);
        let libc = order
            .libraries
            .iter()
            .find(|l| l.name == "libc.so.6")
            .expect("sh needs libc");
        let ldd = std::process::Command::new("ldd").arg(sh).output().unwrap();
        let ldd = String::from_utf8_lossy(&ldd.stdout);
        let expected = ldd
            .lines()
            .find_map(|l| l.trim().strip_prefix("libc.so.6 => "))
            .and_then(|rest| rest.split_whitespace().next())
            .expect("ldd names libc");
        assert_eq!(libc.path, Path::new(expected));
    }
}
