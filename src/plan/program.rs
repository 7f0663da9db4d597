//! The files of a program: found as the dynamic loader finds them, each read once, and which of
//! them are traced (`--nest-lib`), with what their PLT calls bind to.

use std::path::{Path, PathBuf};

use super::{LibraryPatterns, PlanError, PlanOptions, PltLibraries};
use crate::elf::binding::BindingScope;
use crate::elf::ldcache::LdCache;
use crate::elf::loader::load_order;
use crate::elf::{ElfError, ElfFile};

/// One file of a program: the executable or a library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracedFile {
    /// The path reports show.
    pub path: String,
    /// The path that opens it for reading and for the uprobes (a running process's files go
    /// through `/proc/PID/map_files`).
    pub open_path: PathBuf,
}

/// A program's files: its executable and every library it loads, in load order.
#[derive(Clone, Debug)]
pub struct Program {
    pub executable: TracedFile,
    pub libraries: Vec<TracedFile>,
    /// How many of the first `libraries` were loaded with the program (DT_NEEDED reaches
    /// them): they stay where they are until it exits, unlike those opened with dlopen.
    pub loaded_with_program: usize,
}

impl Program {
    /// The program at `path`, about to start (or that a followed process has just exec'ed): its
    /// libraries found as the dynamic loader will find them. Says which it will not find.
    pub fn about_to_start(path: &Path) -> Program {
        let order = load_order(path, &LdCache::system());
        for name in &order.missing {
            log::warn!("{name} (needed by the program) was not found; the loader will fail too");
        }
        let libraries: Vec<TracedFile> = order
            .libraries
            .iter()
            .map(|library| TracedFile {
                path: library.path.to_string_lossy().into_owned(),
                open_path: library.path.clone(),
            })
            .collect();
        Program {
            executable: TracedFile {
                path: path.to_string_lossy().into_owned(),
                open_path: path.to_path_buf(),
            },
            loaded_with_program: libraries.len(),
            libraries,
        }
    }
}

/// Whether library patterns that select none of a program's libraries are warned of: for the
/// program traced, not again for those its followed processes exec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum UnmatchedPatterns {
    Warn,
    Ignore,
}

/// One file of a program, read once, or why it could not be.
pub(super) struct OpenedFile {
    pub file: TracedFile,
    pub elf: Result<ElfFile, ElfError>,
}

impl OpenedFile {
    fn open(file: TracedFile) -> OpenedFile {
        let elf = ElfFile::open_as(&file.open_path, Path::new(&file.path));
        OpenedFile { file, elf }
    }
}

/// The files of a program, each read once, and which of them are traced.
pub(super) struct ProgramFiles {
    /// The executable, then every library in load order.
    pub opened: Vec<OpenedFile>,
    /// Indices into `opened` of the files to probe: the executable, then the libraries
    /// `--nest-lib` matches.
    pub traced: Vec<usize>,
    /// What the PLT calls bind to.
    pub scope: BindingScope,
    /// How many of the libraries (after the executable in `opened`) were loaded with the
    /// program and stay where they are until it exits (see [`Program::loaded_with_program`]).
    pub loaded_with_program: usize,
}

impl ProgramFiles {
    /// Reads the files of `program` and selects those to probe: the executable, and the
    /// libraries `nest_libs` matches; binds PLT calls as the loader will.
    pub fn select(
        program: Program,
        options: &PlanOptions,
        unmatched: UnmatchedPatterns,
    ) -> ProgramFiles {
        let PlanOptions {
            nest_libs,
            plt_libraries,
            ..
        } = options;
        let loaded_with_program = program.loaded_with_program;
        let mut opened: Vec<OpenedFile> = std::iter::once(program.executable)
            .chain(program.libraries)
            .map(OpenedFile::open)
            .collect();
        let mut traced = vec![0];
        let libraries = selected_libraries(nest_libs, &opened[1..], unmatched);
        traced.extend(libraries.into_iter().map(|i| i + 1));
        for &index in &traced {
            let OpenedFile { file, elf } = &mut opened[index];
            if let Ok(elf) = elf {
                elf.load_debug_symbols(&options.debug, Path::new(&file.path));
            }
        }
        let scope = binding_scope(plt_libraries, &opened, unmatched);
        ProgramFiles {
            opened,
            traced,
            scope,
            loaded_with_program,
        }
    }

    pub fn executable(&self) -> &OpenedFile {
        &self.opened[0]
    }

    /// Every library, in load order.
    pub fn libraries(&self) -> &[OpenedFile] {
        &self.opened[1..]
    }

    /// The error of reading file `index`, which could not be read, as planning reports it.
    pub fn into_read_error(mut self, index: usize) -> PlanError {
        let OpenedFile { file, elf } = self.opened.swap_remove(index);
        PlanError::Symbols {
            path: file.path,
            error: elf.err().expect("a file that could not be read"),
        }
    }
}

/// The indices of the libraries among `libraries` that `nest_libs` selects; warns of patterns
/// that select none.
fn selected_libraries(
    nest_libs: &LibraryPatterns,
    libraries: &[OpenedFile],
    unmatched: UnmatchedPatterns,
) -> Vec<usize> {
    let all: Vec<&str> = libraries.iter().map(|l| l.file.path.as_str()).collect();
    if unmatched == UnmatchedPatterns::Warn {
        for pattern in nest_libs.unmatched(&all) {
            log::warn!(
                "--nest-lib {pattern} matches none of the program's libraries yet \
                 (a matching library it loads later with dlopen is traced then)"
            );
        }
    }
    (0..libraries.len())
        .filter(|&i| nest_libs.matches(&libraries[i].file.path))
        .collect()
}

/// The objects the loader binds PLT calls to, executable first (the PLT flags select by it, and
/// PLT calls are probed where they land); warns of patterns of `plt_libraries` that match none
/// of the libraries. A file that cannot be read defines nothing: its stubs stay unresolved.
fn binding_scope(
    plt_libraries: &PltLibraries,
    opened: &[OpenedFile],
    unmatched: UnmatchedPatterns,
) -> BindingScope {
    let libraries: Vec<&str> = opened[1..].iter().map(|l| l.file.path.as_str()).collect();
    if unmatched == UnmatchedPatterns::Warn {
        for (flag, pattern) in plt_libraries.unmatched(&libraries) {
            log::warn!("{flag} {pattern} matches none of the program's libraries");
        }
    }
    let mut scope = BindingScope::default();
    for OpenedFile { file, elf } in opened {
        match elf {
            Ok(elf) => scope.push(file.path.clone(), elf.exported_functions()),
            Err(error) if plt_libraries.is_active() => {
                log::warn!("{error}; its functions stay unresolved")
            }
            Err(_) => {}
        }
    }
    scope
}
