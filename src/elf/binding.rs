//! Which library a PLT stub calls into, found as the dynamic loader binds it: the first object of
//! the global scope (the executable, then its libraries in load order) whose `.dynsym` defines
//! the stub's symbol.
//!
//! Symbol versions are ignored: a library that defines `memcpy@GLIBC_2.14` defines `memcpy`.
//! Programs built against the system's libraries ask for versions those libraries have, so the
//! first object defining the name is the one the loader picks.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use goblin::elf::sym::{STB_GLOBAL, STB_GNU_UNIQUE, STB_WEAK, STT_GNU_IFUNC};

use super::ElfFile;

impl ElfFile {
    /// The functions the file exports, as its `.dynsym` spells them (mangled): defined `FUNC`
    /// or `GNU_IFUNC` symbols with `GLOBAL` or `WEAK` binding (or `GNU_UNIQUE`, which the loader
    /// treats as global).
    pub fn exported_functions(&self) -> HashSet<String> {
        self.symbols
            .iter()
            .filter(|symbol| {
                symbol.dynamic
                    && symbol.defined
                    && matches!(symbol.binding, STB_GLOBAL | STB_WEAK | STB_GNU_UNIQUE)
            })
            .map(|symbol| symbol.name.clone())
            .collect()
    }

    /// What each exported function (see [`exported_functions`](Self::exported_functions)) is
    /// bound to when the loader binds a call to it in this file, by name as `.dynsym` spells it.
    pub fn export_targets(&self) -> HashMap<String, ExportTarget> {
        let mut targets = HashMap::new();
        let exported = self.symbols.iter().filter(|symbol| {
            symbol.dynamic
                && symbol.defined
                && matches!(symbol.binding, STB_GLOBAL | STB_WEAK | STB_GNU_UNIQUE)
        });
        for symbol in exported {
            let target = match symbol.kind {
                STT_GNU_IFUNC => ExportTarget::Ifunc,
                _ => ExportTarget::Function(symbol.address),
            };
            match targets.entry(symbol.name.clone()) {
                Entry::Vacant(vacant) => {
                    vacant.insert(target);
                }
                Entry::Occupied(mut seen) if *seen.get() != target => {
                    seen.insert(ExportTarget::Versioned);
                }
                Entry::Occupied(_) => {}
            }
        }
        targets
    }
}

/// Where a call bound to an exported function of a file goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportTarget {
    /// The function at this virtual address of the file.
    Function(u64),
    /// An ifunc: the loader binds the call to the implementation its resolver returns.
    Ifunc,
    /// The name is defined more than once, at different addresses or as an ifunc and not (one
    /// per symbol version, `realpath@GLIBC_2.2.5` and `realpath@@GLIBC_2.3`): which one a call
    /// binds to depends on the version the caller asks for.
    Versioned,
}

/// The objects the loader searches for a symbol, in its order.
#[derive(Debug, Default)]
pub struct BindingScope {
    objects: Vec<ScopeObject>,
}

#[derive(Debug)]
struct ScopeObject {
    path: String,
    functions: HashSet<String>,
}

impl BindingScope {
    /// Adds the next object of the scope: its path (as reports name it) and its exports.
    pub fn push(&mut self, path: String, functions: HashSet<String>) {
        self.objects.push(ScopeObject { path, functions });
    }

    /// The path of the first object that defines `symbol` (raw, as the stub's relocation names
    /// it); `None` when none does.
    pub fn library_of(&self, symbol: &str) -> Option<&str> {
        self.objects
            .iter()
            .find(|object| object.functions.contains(symbol))
            .map(|object| object.path.as_str())
    }

    /// The paths of the objects, in scope order.
    pub fn paths(&self) -> Vec<&str> {
        self.objects.iter().map(|o| o.path.as_str()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    use tempfile::TempDir;

    use super::*;
    use crate::elf::ldcache::LdCache;
    use crate::elf::loader::{load_order, mapped_load_order};
    use crate::elf::tests::{compile, run};
    use crate::elf::{read_function_symbols, FunctionKind};

    const MATHCALLS_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/test/mathcalls.c");
    /// `compile` puts the flags before the source: without `--no-as-needed`, libm would be
    /// dropped as not needed yet.
    const LIBM: &[&str] = &["-Wl,--no-as-needed", "-lm"];
    const INTERPOSE_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/elf/testdata/interpose.c");

    /// The executable and its libraries in load order, with what each exports.
    fn scope_of(program: &Path) -> BindingScope {
        let mut scope = BindingScope::default();
        let order = load_order(program, &LdCache::system());
        assert!(order.missing.is_empty(), "{:?}", order.missing);
        let libraries = order.libraries.iter().map(|l| l.path.clone());
        for path in std::iter::once(program.to_owned()).chain(libraries) {
            let exports = ElfFile::open(&path).unwrap().exported_functions();
            scope.push(path.to_string_lossy().into_owned(), exports);
        }
        scope
    }

    /// Symbol → file name of the library, for each PLT stub of `program`.
    fn our_bindings(program: &Path) -> BTreeMap<String, String> {
        let scope = scope_of(program);
        read_function_symbols(program)
            .unwrap()
            .into_iter()
            .filter(|f| f.kind == FunctionKind::Plt)
            .map(|f| {
                let symbol = f.plt_symbol.expect("a stub of an imported function");
                let library = scope.library_of(&symbol).unwrap_or("(none)");
                (symbol, file_name(library))
            })
            .collect()
    }

    /// Symbol → file name of the library, as the loader itself reports binding `program`'s
    /// symbols (`LD_DEBUG=bindings`, everything bound at start with `LD_BIND_NOW`).
    fn loader_bindings(program: &Path) -> BTreeMap<String, String> {
        let output = std::process::Command::new(program)
            .env("LD_DEBUG", "bindings")
            .env("LD_BIND_NOW", "1")
            .output()
            .unwrap();
        assert!(output.status.success());
        let from = format!("binding file {} [0] to ", program.display());
        String::from_utf8_lossy(&output.stderr)
            .lines()
            .filter_map(|line| line.split_once(&from)?.1.split_once(' '))
            .filter_map(|(library, rest)| {
                let symbol = rest.split_once('`')?.1.split_once('\'')?.0;
                Some((symbol.to_owned(), file_name(library)))
            })
            .collect()
    }

    fn file_name(path: &str) -> String {
        path.rsplit('/').next().unwrap_or(path).to_owned()
    }

    #[test]
    fn exports_are_the_defined_functions_of_dynsym() {
        let dir = TempDir::new().unwrap();
        let program = compile(&dir, "cc", MATHCALLS_C, "mathcalls", LIBM);
        let order = load_order(&program, &LdCache::system());
        let library = |name: &str| {
            let found = order.libraries.iter().find(|l| l.name == name);
            found.expect(name).path.clone()
        };
        let libm = ElfFile::open(&library("libm.so.6"))
            .unwrap()
            .exported_functions();
        let libc = ElfFile::open(&library("libc.so.6"))
            .unwrap()
            .exported_functions();
        assert!(libm.contains("cos") && libm.contains("cbrt"));
        assert!(libc.contains("strtol") && libc.contains("printf"));
        // Functions libm imports from libc are undefined in its .dynsym; data is not a function.
        let undefined = run(
            "readelf",
            &["--dyn-syms", "-W", library("libm.so.6").to_str().unwrap()],
        );
        let imported: Vec<&str> = undefined
            .lines()
            .filter(|line| line.contains(" FUNC ") && line.contains(" UND "))
            .filter_map(|line| line.split_whitespace().nth(7))
            .map(|name| name.split('@').next().unwrap_or(name))
            .collect();
        assert!(!imported.is_empty());
        for name in imported {
            assert!(
                !libm.contains(name),
                "{name} is imported by libm, not defined"
            );
        }
        assert!(!libc.contains("stdout"), "an object, not a function");
        assert!(!libc.contains("cos"));
        // The program exports nothing it was not asked to.
        assert!(!ElfFile::open(&program)
            .unwrap()
            .exported_functions()
            .contains("main"));
    }

    #[test]
    fn stubs_bind_where_the_loader_binds_them() {
        let dir = TempDir::new().unwrap();
        let program = compile(&dir, "cc", MATHCALLS_C, "mathcalls", LIBM);
        let ours = our_bindings(&program);
        assert_eq!(ours["cos"], "libm.so.6");
        assert_eq!(ours["cbrt"], "libm.so.6");
        assert_eq!(ours["strtol"], "libc.so.6");
        let loader = loader_bindings(&program);
        for (symbol, library) in &ours {
            assert_eq!(Some(library), loader.get(symbol), "{symbol}");
        }
        assert_eq!(scope_of(&program).library_of("no_such_function"), None);
    }

    /// libinterpose.so (which defines `cos`) and mathcalls linked against it before libm, so it
    /// comes first in DT_NEEDED and in load order.
    fn interposed_mathcalls(dir: &TempDir) -> (PathBuf, PathBuf) {
        let interpose = compile(
            dir,
            "cc",
            INTERPOSE_C,
            "libinterpose.so",
            &["-shared", "-fPIC"],
        );
        let dir_path = dir.path().to_str().unwrap();
        let program = compile(
            dir,
            "cc",
            MATHCALLS_C,
            "mathcalls",
            &[
                "-L",
                dir_path,
                "-Wl,-rpath,$ORIGIN",
                "-Wl,--no-as-needed",
                "-linterpose",
                "-lm",
            ],
        );
        (interpose, program)
    }

    #[test]
    fn the_first_library_in_load_order_wins() {
        let dir = TempDir::new().unwrap();
        let (_, program) = interposed_mathcalls(&dir);
        let ours = our_bindings(&program);
        assert_eq!(ours["cos"], "libinterpose.so");
        assert_eq!(ours["cbrt"], "libm.so.6");
        let loader = loader_bindings(&program);
        assert_eq!(loader["cos"], "libinterpose.so");
        for (symbol, library) in &ours {
            assert_eq!(Some(library), loader.get(symbol), "{symbol}");
        }
    }

    #[test]
    fn mapped_libraries_are_put_back_in_load_order() {
        let dir = TempDir::new().unwrap();
        let (interpose, program) = interposed_mathcalls(&dir);
        let order = load_order(&program, &LdCache::system());
        let expected: Vec<PathBuf> = order.libraries.iter().map(|l| l.path.clone()).collect();
        assert_eq!(expected[0], interpose);
        // As /proc/PID/maps lists them: by address, which is roughly the reverse; plus a library
        // that no DT_NEEDED names (dlopen), which comes last.
        let other = compile(
            &dir,
            "cc",
            INTERPOSE_C,
            "libother.so",
            &["-shared", "-fPIC"],
        );
        let mut mapped: Vec<(String, PathBuf)> = expected
            .iter()
            .chain([&other])
            .rev()
            .map(|path| (path.to_string_lossy().into_owned(), path.clone()))
            .collect();
        mapped.rotate_left(1);
        let found = mapped_load_order(&program, &mapped);
        assert_eq!(found.needed, expected.len());
        let order: Vec<PathBuf> = found
            .indices
            .into_iter()
            .map(|index| mapped[index].1.clone())
            .collect();
        let mut with_other = expected.clone();
        with_other.push(other);
        assert_eq!(order, with_other);
    }
}
