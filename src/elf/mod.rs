//! ELF symbols, PLT stubs, file offsets and demangled names of the traced files.
//!
//! [`ElfFile`] is the entry point: it reads one x86_64 ELF file (executable or shared library)
//! once and answers what planning asks of it: every function that can carry a uprobe, with the
//! file offset the probe attaches to ([`ElfFile::functions`]), where each one's exits are
//! ([`ElfFile::exit_probes`]), what it exports, how it uses its PLT stubs, where its unwinder
//! is. The work is split by job:
//!
//! - `file`: reading and parsing the file, once;
//! - `symbols`: function symbols of `.symtab` and `.dynsym`, aliases merged, `.cold` fragments
//!   dropped;
//! - `plt`: PLT stubs, named by decoding each stub's `jmp *GOT(%rip)` and matching the GOT slot
//!   to its relocation;
//! - `segments`: virtual address to file offset, through the executable `PT_LOAD` segments;
//! - `site`: where in each function the probes go (past a leading `lock` instruction the kernel
//!   cannot probe, for one);
//! - `demangle`: Rust (legacy and v0) and C++ names;
//! - `binding`: which library a PLT stub calls into;
//! - `plt_calls`: where a PLT stub's calls can be probed in the library function they land in,
//!   instead of on the stub's jump, which the kernel single-steps;
//! - `returns`: the instructions that leave each function, where exit probes go when no
//!   uretprobe may touch the stack;
//! - `frames`: where code starts and ends by `.eh_frame`, for a file without symbols;
//! - `unwinder`: where the stack unwinder's entry points are;
//! - `prototypes`: how DWARF says each function's parameters and return value are shown
//!   (`-a/--auto-args`);
//! - `source_lines`: the source file and line of each function's entry, from the DWARF line
//!   tables (`--srcline`);
//! - `go`: whether the Go toolchain built the file;
//! - `loader`, `ldcache`: the libraries a program will load, found as the dynamic loader does.

pub mod binding;
pub mod contexts;
pub mod debug_file;
pub mod debuginfod;
mod demangle;
mod file;
mod frames;
mod go;
mod go_code;
mod go_goid;
pub mod got_calls;
pub mod ldcache;
pub mod loader;
mod mapped;
mod plt;
pub mod plt_calls;
pub mod prototypes;
pub mod returns;
mod segments;
pub mod site;
pub mod source_lines;
mod symbols;
mod thread_starts;
pub mod unwinder;
pub mod usdt;
mod versions;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::table::Execution;
use crate::table::FunctionKind;

pub use debug_file::{DebugLookup, SymbolSource};
pub use demangle::demangle;
pub use file::{ElfFile, SymbolOrigin};
pub use returns::{LeafExits, NoExitSites};
pub use site::{NoSite, ProbeSite, SingleStepCause, SiteKind, SitePolicy};

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
    /// How many of `functions` (PLT stubs aside) have a site the kernel single-steps, by cause.
    pub single_stepped: BTreeMap<SingleStepCause, usize>,
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
        "{} has no function symbols and no PLT stubs: nothing in it can be probed; install its \
         debug file (Debian: its -dbgsym package), give its folder with --debug-dir, or use a \
         build with symbols",
        path.display()
    )]
    NoFunctionSymbols { path: PathBuf },

    #[error("{} is a malformed ELF file ({message}): check it with `readelf -a` or rebuild it", path.display())]
    Malformed { path: PathBuf, message: String },
}

/// The functions of the ELF file at `path`, sorted by address: [`ElfFile::functions`] with
/// probe sites past `endbr64` where they count the same.
pub fn read_function_symbols(path: &Path) -> Result<Vec<FunctionSymbol>, ElfError> {
    Ok(read_elf_functions(path)?.functions)
}

/// [`read_function_symbols`], with the functions left out because they have no probe site.
pub fn read_elf_functions(path: &Path) -> Result<ElfFunctions, ElfError> {
    ElfFile::open(path)?.functions(SitePolicy::Best)
}

/// [`read_elf_functions`] on the contents of a file; `path` only names it in errors.
#[cfg(test)]
fn functions_in(path: &Path, bytes: &[u8], sites: SitePolicy) -> Result<ElfFunctions, ElfError> {
    ElfFile::from_bytes(path, bytes.to_vec())?.functions(sites)
}

impl ElfFile {
    /// The functions of the file, sorted by address: the defined function symbols of `.symtab`
    /// and `.dynsym` (aliases merged, `.cold` fragments left out) and the PLT stubs.
    ///
    /// A function outside every executable `PT_LOAD` segment has no file offset a uprobe could
    /// use and is left out. Each function's `offset` is that of its probe site, chosen as
    /// `sites` says (see [`site`]); functions without one are left out, and listed as
    /// unprobeable.
    pub fn functions(&self, sites: SitePolicy) -> Result<ElfFunctions, ElfError> {
        let mut functions = Vec::new();
        let mut unprobeable = Vec::new();
        let mut single_stepped = BTreeMap::new();
        // Each function's site as its own code allows.
        let mut chosen = Vec::new();
        for function in symbols::defined_functions(&self.symbols) {
            // The entry point (`_start`) is jumped to by the kernel, not called: where a return
            // address would be, its stack holds argc, which a return probe would overwrite.
            if function.address == self.entry {
                continue;
            }
            let Some(offset) = self.segments.file_offset(function.address) else {
                continue;
            };
            let site = site::choose_beside(self.code_at(offset, function.size), sites, &[]);
            chosen.push((function, offset, site));
        }
        // A site moved past instructions that other code of the file jumps into (its `.cold`
        // fragments; glibc's `__mempcpy_*` jumps past `__memcpy_*`'s first instruction) would
        // count those jumps as calls: such a function keeps the site its own code allows with
        // that target.
        let skipped: Vec<(u64, u64, usize)> = (chosen.iter().enumerate())
            .filter_map(|(index, (function, _, site))| {
                let moved = site.as_ref().ok()?.site.offset_in_function;
                (moved > 0).then(|| (function.address + 1, function.address + moved, index))
            })
            .collect();
        for (index, target) in self.branches_into(&skipped) {
            let (function, offset, site) = &mut chosen[index];
            let outside = [target - function.address];
            *site = site::choose_beside(self.code_at(*offset, function.size), sites, &outside);
        }
        for (function, offset, site) in chosen {
            match site {
                Ok(chosen) => {
                    if let Some(cause) = chosen.single_stepped {
                        *single_stepped.entry(cause).or_default() += 1;
                    }
                    functions.push(FunctionSymbol {
                        name: demangle(function.name),
                        address: function.address,
                        offset: offset + chosen.site.offset_in_function,
                        size: function.size,
                        kind: FunctionKind::Function,
                        site: chosen.site,
                        execution: chosen.execution(),
                        plt_symbol: None,
                    })
                }
                Err(reason) => unprobeable.push(Unprobeable {
                    name: demangle(function.name),
                    address: function.address,
                    reason,
                }),
            }
        }
        for stub in &self.stubs {
            if let Some(offset) = self.segments.file_offset(stub.address) {
                functions.push(FunctionSymbol {
                    name: format!("{}@plt", stub.target),
                    address: stub.address,
                    offset,
                    size: stub.size,
                    kind: FunctionKind::Plt,
                    // `[endbr64] jmp *GOT(%rip)`: always probeable.
                    site: ProbeSite::ENTRY,
                    execution: site::execution_at(self.code_at(offset, stub.size)),
                    plt_symbol: stub.symbol.clone(),
                });
            }
        }

        // A stripped program still has its PLT stubs: its library calls are traced.
        if functions.is_empty() && unprobeable.is_empty() {
            return Err(ElfError::NoFunctionSymbols {
                path: self.path().to_owned(),
            });
        }

        // One function per address. Linkers do not put symbols on PLT stubs, but if one does,
        // the stub's name says more about what the code is.
        functions.sort_by(|a, b| {
            a.address
                .cmp(&b.address)
                .then_with(|| kind_rank(a.kind).cmp(&kind_rank(b.kind)))
        });
        functions.dedup_by_key(|function| function.address);
        Ok(ElfFunctions {
            functions,
            unprobeable,
            single_stepped,
        })
    }

    /// Where the exit of each of `functions` (of this file) is seen, in the same order; a
    /// leaf's as `leaves` says.
    pub fn exit_probes(&self, functions: &[FunctionSymbol], leaves: LeafExits) -> Vec<ExitProbe> {
        let defined = symbols::defined_functions(&self.symbols);
        // Every function start is a tail call's possible target, traced or not.
        let starts = defined
            .iter()
            .map(|f| f.address)
            .chain(self.stubs.iter().map(|stub| stub.address))
            .collect();
        let cold: Vec<(u64, u64)> = symbols::cold_fragments(&self.symbols)
            .iter()
            .map(|f| (f.address, f.size))
            .collect();
        let mut code_symbols: Vec<(u64, u64)> =
            defined.iter().map(|f| (f.address, f.size)).collect();
        code_symbols.extend(&cold);
        code_symbols.extend(self.code_without_symbols(&code_symbols));
        // Data too: a switch's jump is checked on its table (see `returns::exit_sites`).
        let code = |address: u64, size: u64| self.loaded_at_address(address, size);
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
                FunctionKind::Got => Err(NoExitSites::ProbedWhereItLands),
                // Symbols are functions or stubs; events are planned elsewhere.
                FunctionKind::Function
                | FunctionKind::Kernel
                | FunctionKind::Event
                | FunctionKind::Tracer
                | FunctionKind::Preemption => {
                    returns::exit_sites(&index, function.address, function.size, leaves)
                }
            };
            let sites = sites.and_then(|addresses| {
                addresses
                    .into_iter()
                    .map(|address| {
                        self.segments
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
        functions.iter().map(probe).collect()
    }
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
        FunctionKind::Plt | FunctionKind::Got => 0,
        FunctionKind::Function | FunctionKind::Kernel | FunctionKind::Event => 1,
        FunctionKind::Tracer | FunctionKind::Preemption => 1,
    }
}
