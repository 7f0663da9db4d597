//! The executable's PLT calls probed in the library function they land in rather than at their
//! stub, which the kernel single-steps (see [`crate::elf::plt_calls`]), and why the others keep
//! their stub.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use super::ifuncs::{IfuncChoices, IfuncNotFollowed};
use super::program::OpenedFile;
use super::{ExitPolicy, PlanOptions};
use crate::elf::binding::BindingScope;
use crate::elf::plt_calls::{ImplementationLanding, Implementations, Landing, LibraryEntries};
use crate::elf::returns::saves_its_return_address;
use crate::elf::unwinder::UNWINDER_ENTRY_POINTS;
use crate::elf::{FunctionSymbol, SitePolicy};
use crate::table::{FunctionId, FunctionKind};

/// The calls through one PLT stub of the executable, probed in the library function they land
/// in: the BPF program keeps a hit when its return address follows a direct call of the stub in
/// the executable, whose load bias it finds from the kernel's `mm->start_code` and
/// [`ProbePlan::executable_code_vaddr`](super::ProbePlan::executable_code_vaddr).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LandedCall {
    /// The stub's function id.
    pub function: FunctionId,
    /// The stub's virtual address in the executable.
    pub stub: u32,
    /// The file offset of the probe site in the library.
    pub offset: u64,
}

/// The executable's PLT stubs whose calls are probed where they land.
#[derive(Debug, Default)]
pub struct Landings {
    /// Per library (as opened), its landed calls.
    libraries: Vec<(PathBuf, Vec<LandedCall>)>,
    /// The ids of the stubs probed this way, which get no probe of their own.
    functions: HashSet<FunctionId>,
    /// How many stubs keep their probe, by why.
    kept: BTreeMap<StubKept, usize>,
    /// The stubs into ifuncs probed where they land, with the implementation's name.
    implementations: BTreeMap<FunctionId, String>,
}

impl Landings {
    /// Probes the calls of `call` at its offset in `library`.
    fn add(&mut self, library: &Path, call: LandedCall) {
        match self.libraries.iter_mut().find(|(path, _)| path == library) {
            Some((_, calls)) => calls.push(call),
            None => self.libraries.push((library.to_owned(), vec![call])),
        }
        self.functions.insert(call.function);
    }

    pub fn len(&self) -> usize {
        self.functions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }

    /// The landed calls, per library (as opened).
    pub fn libraries(&self) -> &[(PathBuf, Vec<LandedCall>)] {
        &self.libraries
    }

    /// Whether the calls through stub `id` are probed where they land.
    pub fn contains(&self, id: FunctionId) -> bool {
        self.functions.contains(&id)
    }

    /// The ids of the stubs probed where their calls land.
    pub fn functions(&self) -> impl Iterator<Item = FunctionId> + '_ {
        self.functions.iter().copied()
    }

    /// How many stubs keep their probe because of `why`.
    pub fn kept(&self, why: StubKept) -> usize {
        self.kept.get(&why).copied().unwrap_or(0)
    }

    /// For a stub into an ifunc probed where its calls land, the name of the implementation
    /// (`__memcmp_avx2_movbe`).
    pub fn implementation_of(&self, id: FunctionId) -> Option<&str> {
        self.implementations.get(&id).map(String::as_str)
    }
}

/// Why a PLT stub of the executable keeps its own probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum StubKept {
    Follow,
    NoSessions,
    ExitsAtCallers,
    ProbeAtEntry,
    Preloaded,
    Unreadable,
    NotPositionIndependent,
    OwnIfunc,
    NotOnlyCalled,
    SavesReturnAddress,
    Unwinder,
    Beyond4GiB,
    BoundToNoLibrary,
    BoundToProgram,
    Ifunc,
    IfuncOfOtherBuild,
    IfuncNotResolved,
    IfuncWithoutSymbols,
    SingleStepped,
    Versioned,
    Unresolved,
}

impl StubKept {
    /// How `record -d` says it.
    pub fn why(self) -> &'static str {
        match self {
            StubKept::Follow => "as --follow traces other processes, which may run other programs",
            StubKept::NoSessions => "as probing them where they land needs uprobe sessions",
            StubKept::ExitsAtCallers => "as --exit-probes=ret probes their exits at the callers",
            StubKept::ProbeAtEntry => "as --probe-at-entry asks",
            StubKept::Preloaded => "as libraries are preloaded, which utrace does not bind",
            StubKept::Unreadable => "as the executable cannot be read",
            StubKept::NotPositionIndependent => "as the executable is not position-independent",
            StubKept::OwnIfunc => "into the program's own ifuncs",
            StubKept::NotOnlyCalled => "jumped to or taken as an address",
            StubKept::SavesReturnAddress => "saving their return address (setjmp)",
            StubKept::Unwinder => "into the unwinder",
            StubKept::Beyond4GiB => "beyond 4 GiB",
            StubKept::BoundToNoLibrary => "bound to no library",
            StubKept::BoundToProgram => "bound to the program itself",
            StubKept::Ifunc => "into ifuncs, whose choice utrace does not know here",
            StubKept::IfuncOfOtherBuild => {
                "into ifuncs of another build of a library than utrace's own, whose choice it \
                 cannot ask"
            }
            StubKept::IfuncNotResolved => "into ifuncs of libraries utrace does not map itself",
            StubKept::IfuncWithoutSymbols => {
                "into ifuncs whose implementation has no known size (the library's debug file, \
                 libc6-dbg for libc, is missing)"
            }
            StubKept::SingleStepped => "single-stepped in the library too",
            StubKept::Versioned => "into names of several versions",
            StubKept::Unresolved => "unresolved",
        }
    }
}

/// The executable's PLT calls, and what they bind to.
pub(super) struct PltCalls<'a> {
    pub executable: &'a OpenedFile,
    /// The executable's planned functions, whose ids start at 0.
    pub functions: &'a [FunctionSymbol],
    /// Every library, in load order.
    pub libraries: &'a [OpenedFile],
    pub scope: &'a BindingScope,
}

/// Which of the executable's PLT stubs are probed in the library function their calls land in,
/// and the lowest virtual address of its code (0 when none may be). Under `--debug`, says how
/// many got which kind of site and why the others keep their stub.
pub(super) fn plan(
    program: &PltCalls,
    options: &PlanOptions,
    exit_policy: ExitPolicy,
) -> (Landings, u64) {
    let path = &program.executable.file.path;
    let stubs: Vec<(FunctionId, &FunctionSymbol)> = (0..)
        .zip(program.functions)
        .filter(|(_, f)| f.kind == FunctionKind::Plt)
        .collect();
    if stubs.is_empty() {
        return (Landings::default(), 0);
    }
    let everything_kept = |why| {
        let landings = Landings {
            kept: BTreeMap::from([(why, stubs.len())]),
            ..Landings::default()
        };
        say(path, &landings, stubs.len());
        (landings, 0)
    };
    if options.kernel_lacks_sessions {
        return everything_kept(StubKept::NoSessions);
    }
    if options.follow {
        return everything_kept(StubKept::Follow);
    }
    if exit_policy == ExitPolicy::Ret {
        return everything_kept(StubKept::ExitsAtCallers);
    }
    if options.sites == SitePolicy::Entry {
        return everything_kept(StubKept::ProbeAtEntry);
    }
    if options.preloaded_libraries {
        return everything_kept(StubKept::Preloaded);
    }
    let Ok(executable) = &program.executable.elf else {
        return everything_kept(StubKept::Unreadable);
    };
    let uses = executable.stub_uses();
    if !uses.pie {
        return everything_kept(StubKept::NotPositionIndependent);
    }
    let mut landings = Landings::default();
    let mut entries: BTreeMap<&str, Option<LibraryEntries>> = BTreeMap::new();
    let mut implementations: BTreeMap<&str, Implementations> = BTreeMap::new();
    for &(function, symbol) in &stubs {
        let why = (|| {
            let raw = symbol.plt_symbol.as_deref().ok_or(StubKept::OwnIfunc)?;
            if !uses.only_called(symbol.address) {
                return Err(StubKept::NotOnlyCalled);
            }
            // Its landing would get a return probe, which setjmp would save as its return address.
            if saves_its_return_address(raw) {
                return Err(StubKept::SavesReturnAddress);
            }
            // Probed there, the unwinder would walk the frame before the shadow stack knew it.
            if UNWINDER_ENTRY_POINTS.contains(&raw) {
                return Err(StubKept::Unwinder);
            }
            let stub = u32::try_from(symbol.address).map_err(|_| StubKept::Beyond4GiB)?;
            let path = program
                .scope
                .library_of(raw)
                .ok_or(StubKept::BoundToNoLibrary)?;
            let library = program
                .libraries
                .iter()
                .find(|l| l.file.path == path)
                .ok_or(StubKept::BoundToProgram)?;
            let read = entries.entry(path).or_insert_with(|| {
                let elf = library.elf.as_ref().ok()?;
                Some(elf.library_entries())
            });
            let version = executable.requested_version(raw);
            match read
                .as_ref()
                .map(|read| read.landing_of_version(raw, version))
            {
                Some(Landing::At(offset)) => {
                    let call = LandedCall {
                        function,
                        stub,
                        offset,
                    };
                    landings.add(&library.file.open_path, call);
                    Ok(())
                }
                Some(Landing::Ifunc) => {
                    let elf = library.elf.as_ref().map_err(|_| StubKept::Unresolved)?;
                    let known_as = Path::new(&library.file.path);
                    let address = (options.ifuncs)
                        .implementation(known_as, elf.build_id(), raw)
                        .map_err(|why| match why {
                            IfuncNotFollowed::Unknown => StubKept::Ifunc,
                            IfuncNotFollowed::OtherBuild => StubKept::IfuncOfOtherBuild,
                            IfuncNotFollowed::NotResolved => StubKept::IfuncNotResolved,
                        })?;
                    let functions = implementations
                        .entry(path)
                        .or_insert_with(|| elf.implementations(&options.debug, known_as));
                    match elf.implementation_landing(functions, address, raw) {
                        ImplementationLanding::At { offset, name } => {
                            say_ifunc_landing(&symbol.name, raw, &name, offset, known_as);
                            let call = LandedCall {
                                function,
                                stub,
                                offset,
                            };
                            landings.add(&library.file.open_path, call);
                            landings.implementations.insert(function, name);
                            Ok(())
                        }
                        ImplementationLanding::SingleStepped { .. } => Err(StubKept::SingleStepped),
                        ImplementationLanding::UnknownSize => Err(StubKept::IfuncWithoutSymbols),
                    }
                }
                Some(Landing::SingleStepped) => Err(StubKept::SingleStepped),
                Some(Landing::Versioned) => Err(StubKept::Versioned),
                Some(Landing::Undefined) | None => Err(StubKept::Unresolved),
            }
        })();
        if let Err(why) = why {
            *landings.kept.entry(why).or_default() += 1;
        }
    }
    say(path, &landings, stubs.len());
    if let (IfuncChoices::Unknown(why), 1..) = (&options.ifuncs, landings.kept(StubKept::Ifunc)) {
        log::debug!("PLT calls into ifuncs keep their stub: {why}");
    }
    (landings, uses.code_vaddr)
}

/// Says where the calls through the stub `stub` into the ifunc `ifunc` are probed: in its
/// implementation `implementation` at file offset `offset` of `library` (`--debug`).
fn say_ifunc_landing(stub: &str, ifunc: &str, implementation: &str, offset: u64, library: &Path) {
    log::debug!(
        "{stub}: probed in {implementation} at file offset {offset:#x} of {}, where the ifunc \
         {ifunc} lands (as utrace's own loader resolved it)",
        library.display()
    );
}

/// Says how many of the executable's `stubs` are probed where their calls land, and why the
/// others keep their stub (`--debug`).
fn say(executable: &str, landings: &Landings, stubs: usize) {
    if !log::log_enabled!(log::Level::Debug) {
        return;
    }
    log::debug!(
        "PLT calls of {executable}: {} probed in the library function they call (an emulated \
         site), {} at their stub (single-stepped){}",
        landings.len(),
        stubs - landings.len(),
        counted_reasons(&landings.kept, |why| why.why()),
    );
}

/// `counts` of stubs by reason as `--debug` says them: `": 3 into files not traced, 1 …"`, by
/// reason as the words sort; nothing when there is none.
pub(super) fn counted_reasons<K>(
    counts: &BTreeMap<K, usize>,
    why: impl Fn(&K) -> &'static str,
) -> String {
    let mut reasons: Vec<(&str, usize)> = counts.iter().map(|(k, &n)| (why(k), n)).collect();
    reasons.sort_unstable();
    let reasons: Vec<String> = reasons
        .iter()
        .map(|(why, n)| format!("{n} {why}"))
        .collect();
    match reasons.is_empty() {
        true => String::new(),
        false => format!(": {}", reasons.join(", ")),
    }
}
