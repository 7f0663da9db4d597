//! ELF symbols, PLT stubs, file offsets and demangled names of the traced files.
//!
//! [`read_function_symbols`] is the entry point: it reads one x86_64 ELF file (executable or
//! shared library) and returns every function that can carry a uprobe, with the file offset the
//! probe attaches to. The work is split by job:
//!
//! - `symbols`: defined function symbols of `.symtab` and `.dynsym`, aliases merged, `.cold`
//!   fragments dropped;
//! - `plt`: PLT stubs, named by decoding each stub's `jmp *GOT(%rip)` and matching the GOT slot
//!   to its relocation;
//! - `segments`: virtual address to file offset, through the executable `PT_LOAD` segments;
//! - `site`: where in each function the probes go (past a leading `lock` instruction the kernel
//!   cannot probe, for one);
//! - `demangle`: Rust (legacy and v0) and C++ names;
//! - `plt_calls`: where a PLT stub's calls can be probed in the library function they land in,
//!   instead of on the stub's jump, which the kernel single-steps;
//! - `returns`: the instructions that leave each function, where exit probes go when no
//!   uretprobe may touch the stack ([`read_exit_probes`]).

pub mod binding;
mod demangle;
pub mod ldcache;
pub mod loader;
mod plt;
pub mod plt_calls;
pub mod returns;
mod segments;
pub mod site;
mod symbols;
pub mod unwinder;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;

use std::io;
use std::path::{Path, PathBuf};

use goblin::elf::header::{self, Header};
use goblin::elf::Elf;

use crate::table::Execution;
use crate::table::FunctionKind;

pub use demangle::demangle;
pub use returns::NoExitSites;
pub use site::{NoSite, ProbeSite, SiteKind, SitePolicy};

/// One function of an ELF file that a uprobe can attach to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSymbol {
    /// Demangled name; PLT stubs are `name@plt` (`qsort@plt`).
    pub name: String,
    /// Virtual address in the ELF file (before any load bias).
    pub address: u64,
    /// File offset of the probe site, through the executable `PT_LOAD` segment that contains
    /// `address`: what uprobes attach to. The offset of `address` itself, plus
    /// `site.offset_in_function`.
    pub offset: u64,
    /// Size in bytes (the symbol's `st_size`, or the stub size for PLT stubs).
    pub size: u64,
    pub kind: FunctionKind,
    /// Where in the function the probes sit: the entry, unless the kernel cannot probe it.
    pub site: ProbeSite,
    /// How the kernel runs the instruction under the entry probe: what the probe costs.
    pub execution: Execution,
    /// For a PLT stub, the symbol its GOT slot is bound to, as the file spells it (mangled):
    /// what the dynamic loader looks up (see [`binding`]). `None` for functions, and for stubs
    /// of the file's own ifuncs (`R_X86_64_IRELATIVE`), which call into the file itself.
    pub plt_symbol: Option<String>,
}

/// The functions of an ELF file: those a uprobe can attach to, and those it cannot.
#[derive(Clone, Debug, Default)]
pub struct ElfFunctions {
    /// Sorted by address, one per address.
    pub functions: Vec<FunctionSymbol>,
    /// Functions left out of `functions` because they have no probe site, sorted by address.
    pub unprobeable: Vec<Unprobeable>,
}

/// A function that cannot be traced: the kernel cannot probe its first instruction and no
/// equivalent site follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unprobeable {
    /// Demangled name.
    pub name: String,
    /// Virtual address in the ELF file.
    pub address: u64,
    pub reason: NoSite,
}

/// Why the functions of an ELF file could not be read. Each message says what failed, on which
/// file and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("cannot read {}: {error}: check that the file exists and is readable", path.display())]
    Io { path: PathBuf, error: io::Error },

    #[error("{} is a directory: give the path of an executable or a shared library", path.display())]
    IsDirectory { path: PathBuf },

    #[error("{} is not an ELF file: give the path of an executable or a shared library", path.display())]
    NotElf { path: PathBuf },

    #[error(
        "{} is a {class} ELF file for {machine}: utrace traces only 64-bit x86_64 programs",
        path.display()
    )]
    UnsupportedMachine {
        path: PathBuf,
        /// `32-bit`, `64-bit` or `invalid-class`.
        class: &'static str,
        /// The `e_machine` name (`ARM`, `386`, ...).
        machine: String,
    },

    #[error(
        "{} is an ELF {kind} file, not an executable or a shared library: give a linked program",
        path.display()
    )]
    UnsupportedType { path: PathBuf, kind: &'static str },

    #[error(
        "{} has no function symbols (stripped?): use a build with symbols, or trace the \
         libraries it calls with --nest-lib",
        path.display()
    )]
    NoFunctionSymbols { path: PathBuf },

    #[error("{} is a malformed ELF file ({message}): check it with `readelf -a` or rebuild it", path.display())]
    Malformed { path: PathBuf, message: String },
}

/// The functions of the ELF file at `path`, sorted by address: the defined function symbols of
/// `.symtab` and `.dynsym` (aliases merged, `.cold` fragments left out) and the PLT stubs.
///
/// Only 64-bit x86_64 executables and shared libraries are accepted. A function outside every
/// executable `PT_LOAD` segment has no file offset a uprobe could use and is left out.
///
/// Each function's `offset` is that of its probe site (see [`site`]); functions without one are
/// left out. [`read_elf_functions`] also says which and why.
pub fn read_function_symbols(path: &Path) -> Result<Vec<FunctionSymbol>, ElfError> {
    Ok(read_elf_functions(path)?.functions)
}

/// [`read_function_symbols`], with the functions left out because they have no probe site.
pub fn read_elf_functions(path: &Path) -> Result<ElfFunctions, ElfError> {
    read_elf_functions_with(path, SitePolicy::Best)
}

/// [`read_elf_functions`], with probe sites chosen as `sites` says.
pub fn read_elf_functions_with(path: &Path, sites: SitePolicy) -> Result<ElfFunctions, ElfError> {
    let bytes = read_file(path)?;
    functions_in(path, &bytes, sites)
}

/// [`read_elf_functions`] on the contents of the file; `path` only names it in errors.
fn functions_in(path: &Path, bytes: &[u8], sites: SitePolicy) -> Result<ElfFunctions, ElfError> {
    let elf = parse(path, bytes)?;
    let segments = segments::ExecutableSegments::new(&elf.program_headers);

    let mut functions = Vec::new();
    let mut unprobeable = Vec::new();
    for function in symbols::defined_functions(&elf) {
        // The entry point (`_start`) is jumped to by the kernel, not called: where a return
        // address would be, its stack holds argc, which a return probe would overwrite.
        if function.address == elf.entry {
            continue;
        }
        let Some(offset) = segments.file_offset(function.address) else {
            continue;
        };
        let code = code_at(bytes, offset, function.size);
        match site::choose(code, sites) {
            Ok(site) => functions.push(FunctionSymbol {
                name: demangle(function.name),
                address: function.address,
                offset: offset + site.offset_in_function,
                size: function.size,
                kind: FunctionKind::Function,
                site,
                execution: site::execution_at(
                    code.get(site.offset_in_function as usize..)
                        .unwrap_or_default(),
                ),
                plt_symbol: None,
            }),
            Err(reason) => unprobeable.push(Unprobeable {
                name: demangle(function.name),
                address: function.address,
                reason,
            }),
        }
    }
    let has_symbols = !functions.is_empty() || !unprobeable.is_empty();

    for stub in plt::stubs(&elf, bytes) {
        if let Some(offset) = segments.file_offset(stub.address) {
            functions.push(FunctionSymbol {
                name: format!("{}@plt", stub.target),
                address: stub.address,
                offset,
                size: stub.size,
                kind: FunctionKind::Plt,
                // `[endbr64] jmp *GOT(%rip)`: always probeable.
                site: ProbeSite::ENTRY,
                execution: site::execution_at(code_at(bytes, offset, stub.size)),
                plt_symbol: stub.symbol,
            });
        }
    }

    // PLT stubs alone are not a symbol table: a stripped file keeps its relocations.
    if !has_symbols {
        return Err(ElfError::NoFunctionSymbols {
            path: path.to_owned(),
        });
    }

    // One function per address. Linkers do not put symbols on PLT stubs, but if one does, the
    // stub's name says more about what the code is.
    functions.sort_by(|a, b| {
        a.address
            .cmp(&b.address)
            .then_with(|| kind_rank(a.kind).cmp(&kind_rank(b.kind)))
    });
    functions.dedup_by_key(|function| function.address);
    Ok(ElfFunctions {
        functions,
        unprobeable,
    })
}

/// How the exit of one traced function is seen when exits are probed on instructions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExitProbe {
    /// Probes at these file offsets: the function's `ret`s and tail jumps. Empty for a function
    /// that never returns.
    Sites(Vec<u64>),
    /// A uretprobe, because the exits cannot all be found (see [`returns`]).
    Uretprobe(NoExitSites),
}

/// Where the exit of each of `functions` (read from the file at `path`) is seen, in the same
/// order.
pub fn read_exit_probes(
    path: &Path,
    functions: &[FunctionSymbol],
) -> Result<Vec<ExitProbe>, ElfError> {
    let bytes = read_file(path)?;
    let elf = parse(path, &bytes)?;
    let segments = segments::ExecutableSegments::new(&elf.program_headers);
    let bytes = bytes.as_slice();
    let code = |address: u64, size: u64| {
        segments
            .file_offset(address)
            .map_or(&[][..], |offset| code_at(bytes, offset, size))
    };
    // Every function start is a tail call's possible target, traced or not.
    let starts = symbols::defined_functions(&elf)
        .iter()
        .map(|f| f.address)
        .chain(plt::stubs(&elf, bytes).iter().map(|stub| stub.address))
        .collect();
    let cold: Vec<(u64, u64)> = symbols::cold_fragments(&elf)
        .iter()
        .map(|f| (f.address, f.size))
        .collect();
    let mut code_symbols: Vec<(u64, u64)> = symbols::defined_functions(&elf)
        .iter()
        .map(|f| (f.address, f.size))
        .collect();
    code_symbols.extend(&cold);
    let index = returns::CodeIndex::new(starts, cold.into_iter().collect(), code);
    let stubs = functions
        .iter()
        .filter(|f| f.kind == FunctionKind::Plt)
        .map(|f| f.address)
        .collect();
    let mut plt_sites = returns::plt_return_sites(&index, &code_symbols, &stubs);
    let probe = |function: &FunctionSymbol| {
        let sites = match function.kind {
            FunctionKind::Plt => plt_sites
                .remove(&function.address)
                .unwrap_or(Ok(Vec::new())),
            FunctionKind::Function => returns::exit_sites(&index, function.address, function.size),
        };
        let sites = sites.and_then(|addresses| {
            addresses
                .into_iter()
                .map(|address| {
                    segments
                        .file_offset(address)
                        .ok_or(NoExitSites::Undecodable { address })
                })
                .collect()
        });
        match sites {
            Ok(offsets) => ExitProbe::Sites(offsets),
            Err(reason) => ExitProbe::Uretprobe(reason),
        }
    };
    Ok(functions.iter().map(probe).collect())
}

/// The bytes of the function at file offset `offset` with `size` bytes, as far as the file has
/// them.
fn code_at(bytes: &[u8], offset: u64, size: u64) -> &[u8] {
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    let rest = bytes.get(start..).unwrap_or_default();
    let size = usize::try_from(size).unwrap_or(usize::MAX);
    &rest[..size.min(rest.len())]
}

fn kind_rank(kind: FunctionKind) -> u8 {
    match kind {
        FunctionKind::Plt => 0,
        FunctionKind::Function => 1,
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, ElfError> {
    let io_error = |error| ElfError::Io {
        path: path.to_owned(),
        error,
    };
    let metadata = std::fs::metadata(path).map_err(io_error)?;
    if metadata.is_dir() {
        return Err(ElfError::IsDirectory {
            path: path.to_owned(),
        });
    }
    std::fs::read(path).map_err(io_error)
}

/// Checks the identity of the file before goblin parses the rest, so that the common mistakes
/// (a script, a 32-bit or ARM binary, an object file) get their own message.
fn parse<'a>(path: &Path, bytes: &'a [u8]) -> Result<Elf<'a>, ElfError> {
    if bytes.get(..header::SELFMAG) != Some(header::ELFMAG.as_slice()) {
        return Err(ElfError::NotElf {
            path: path.to_owned(),
        });
    }
    let malformed = |error: goblin::error::Error| ElfError::Malformed {
        path: path.to_owned(),
        message: error.to_string(),
    };
    let header: Header = Elf::parse_header(bytes).map_err(malformed)?;
    let class = header.e_ident.get(header::EI_CLASS).copied();
    if class != Some(header::ELFCLASS64) || header.e_machine != header::EM_X86_64 {
        return Err(ElfError::UnsupportedMachine {
            path: path.to_owned(),
            class: match class {
                Some(header::ELFCLASS32) => "32-bit",
                Some(header::ELFCLASS64) => "64-bit",
                _ => "invalid-class",
            },
            machine: header::machine_to_str(header.e_machine).to_owned(),
        });
    }
    if header.e_type != header::ET_EXEC && header.e_type != header::ET_DYN {
        return Err(ElfError::UnsupportedType {
            path: path.to_owned(),
            kind: match header.e_type {
                header::ET_REL => "relocatable (object)",
                header::ET_CORE => "core dump",
                _ => "unknown-type",
            },
        });
    }
    Elf::parse(bytes).map_err(malformed)
}
