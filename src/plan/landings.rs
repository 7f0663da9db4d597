//! The PLT calls of the executable and of the traced libraries probed in the library function
//! they land in rather than at their stub, which the kernel single-steps (see
//! [`crate::elf::plt_calls`]), and why the others keep their stub; and the executable's calls
//! through its GOT slots (`-fno-plt`, Rust: see [`crate::elf::got_calls`]), which have no stub
//! and are only seen where they land.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use super::ifuncs::{IfuncChoices, IfuncNotFollowed};
use super::program::OpenedFile;
use super::{ExitPolicy, PlanOptions};
use crate::elf::binding::BindingScope;
use crate::elf::got_calls::GotCall;
use crate::elf::plt_calls::StubUses;
use crate::elf::plt_calls::{ImplementationLanding, Implementations, Landing, LibraryEntries};
use crate::elf::returns::saves_its_return_address;
use crate::elf::unwinder::UNWINDER_ENTRY_POINTS;
use crate::elf::{ElfFile, FunctionSymbol, ProbeSite, SitePolicy};
use crate::table::{Execution, FunctionId, FunctionKind};

/// The calls through one PLT stub or GOT slot, probed in the library function they land in: the
/// BPF program keeps a hit when its return address follows a call that took that route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LandedCall {
    /// The stub's (or GOT call's) function id.
    pub function: FunctionId,
    /// The file offset of the probe site in the library called.
    pub offset: u64,
    pub route: Route,
}

/// The calls a landing counts: how the BPF program tells them from the function's other callers.
/// In the executable, it finds the stub or slot from the kernel's `mm->start_code` and
/// [`ProbePlan::executable_code_vaddr`](super::ProbePlan::executable_code_vaddr); in a traced
/// library, from where the kernel has mapped the library's file (its inode: see
/// [`CallingLibrary`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Direct calls (`e8 rel32`) of the executable's PLT stub at this virtual address.
    ExecutableStub(u32),
    /// Direct calls of the PLT stub at file offset `stub` of the traced library of slot
    /// `library` in [`Landings::calling_libraries`].
    LibraryStub { stub: u32, library: u32 },
    /// Calls `call *slot(%rip)` (`ff 15 disp32`) through the executable's GOT slot at this
    /// virtual address.
    ExecutableGot(u32),
}

/// A tail call through a PLT stub whose direct calls land: the probe goes on the jump
/// (`jmp memcpy@plt`), an instruction the kernel emulates, where the stack already holds the
/// return address the called function will take, so the jump is the call's entry and the
/// return probe it asks for sees its return, as the stub's probe would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailJump {
    /// The stub's function id.
    pub function: FunctionId,
    /// The file offset of the jump in the stub's file.
    pub offset: u64,
}

/// A traced library whose PLT calls land.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallingLibrary {
    /// Its path, as reports name it.
    pub path: String,
    /// Its file's inode number, by which the BPF program recognises its code in the process.
    pub inode: u64,
}

/// The PLT stubs whose calls are probed where they land.
#[derive(Debug, Default)]
pub struct Landings {
    /// Per library called (as opened), its landed calls.
    libraries: Vec<(PathBuf, Vec<LandedCall>)>,
    /// The ids of the stubs probed this way, which get no probe of their own.
    functions: HashSet<FunctionId>,
    /// How many stubs keep their probe, by why.
    kept: BTreeMap<StubKept, usize>,
    /// The stubs into ifuncs probed where they land, with the implementation's name.
    implementations: BTreeMap<FunctionId, String>,
    /// The traced libraries whose stubs' calls land, by slot.
    calling_libraries: Vec<CallingLibrary>,
    /// Per traced file (as opened), the tail jumps to its stubs whose calls land.
    tail_jumps: Vec<(PathBuf, Vec<TailJump>)>,
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

    /// The landed calls, per library called (as opened).
    pub fn libraries(&self) -> &[(PathBuf, Vec<LandedCall>)] {
        &self.libraries
    }

    /// The traced libraries whose stubs' calls land, by slot ([`Route::LibraryStub`]).
    pub fn calling_libraries(&self) -> &[CallingLibrary] {
        &self.calling_libraries
    }

    /// The tail jumps to stubs whose calls land, per file (as opened).
    pub fn tail_jumps(&self) -> &[(PathBuf, Vec<TailJump>)] {
        &self.tail_jumps
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

/// Libraries whose stubs' calls land, at most: the BPF program's slots (interface.h).
const LIBRARY_SLOTS: usize = 64;

/// Why a PLT stub keeps its own probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum StubKept {
    Follow,
    NoSessions,
    ExitsAtCallers,
    ProbeAtEntry,
    Preloaded,
    Unreadable,
    NotPositionIndependent,
    OpenedWithDlopen,
    SeveralCodeSegments,
    TooManyLibraries,
    OwnIfunc,
    NotOnlyCalled,
    TailJumpOnProbe,
    SavesReturnAddress,
    Unwinder,
    Beyond4GiB,
    BoundToNoLibrary,
    BoundToProgram,
    IntoTracedLibrary,
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
            StubKept::Unreadable => "as the file cannot be read",
            StubKept::NotPositionIndependent => "as the executable is not position-independent",
            StubKept::OpenedWithDlopen => {
                "as the library was opened with dlopen (it may be closed and come back elsewhere)"
            }
            StubKept::SeveralCodeSegments => "as the library has several code segments",
            StubKept::TooManyLibraries => "as 64 other libraries' calls land already",
            StubKept::OwnIfunc => "into the program's own ifuncs",
            StubKept::NotOnlyCalled => "reached by a conditional jump or taken as an address",
            StubKept::TailJumpOnProbe => "reached by a tail jump where another probe sits",
            StubKept::SavesReturnAddress => "saving their return address (setjmp)",
            StubKept::Unwinder => "into the unwinder",
            StubKept::Beyond4GiB => "beyond 4 GiB",
            StubKept::BoundToNoLibrary => "bound to no library",
            StubKept::BoundToProgram => "bound to the program itself",
            StubKept::IntoTracedLibrary => "into a traced library, whose own probes may come first",
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

/// A traced file whose PLT stubs may be probed where their calls land.
pub(super) struct Caller<'a> {
    pub file: &'a OpenedFile,
    /// Its planned functions, the first of which has id `first_id`.
    pub functions: &'a [FunctionSymbol],
    pub first_id: FunctionId,
    /// A library loaded with the program (see [`super::Program::loaded_with_program`]): the
    /// BPF program learns where a library is once.
    pub loaded_with_program: bool,
    /// The file offsets of the file's planned probes (entries, exit sites): a tail jump there
    /// cannot take another, whose order with the first the kernel does not promise.
    pub probe_sites: HashSet<u64>,
}

/// The PLT calls of the traced files, and what they bind to.
pub(super) struct PltCalls<'a> {
    /// The executable, then the traced libraries.
    pub callers: Vec<Caller<'a>>,
    /// Every library, in load order.
    pub libraries: &'a [OpenedFile],
    pub scope: &'a BindingScope,
}

/// Which PLT stubs of the traced files are probed in the library function their calls land in,
/// with the executable's GOT calls `got` that land, and the lowest virtual address of the
/// executable's code (0 when none of its stubs or GOT calls may be).
/// Under `--debug`, says per file how many got which kind of site and why the others keep their
/// stub.
pub(super) fn plan(
    program: &PltCalls,
    options: &PlanOptions,
    exit_policy: ExitPolicy,
    got: &[GotLanding],
) -> (Landings, u64) {
    let mut landings = Landings::default();
    let mut executable_code_vaddr = 0;
    let all_kept = every_stub_kept(options, exit_policy);
    for (position, caller) in program.callers.iter().enumerate() {
        if position == 0 && !got.is_empty() {
            if let Ok(elf) = &caller.file.elf {
                executable_code_vaddr = elf.code_vaddr();
            }
            for (library, call, implementation) in got_calls_of(caller, got) {
                landings.add(&library, call);
                if let Some(name) = implementation {
                    landings.implementations.insert(call.function, name);
                }
            }
        }
        let stubs: Vec<(FunctionId, &FunctionSymbol)> = (caller.first_id..)
            .zip(caller.functions)
            .filter(|(_, f)| f.kind == FunctionKind::Plt)
            .collect();
        if stubs.is_empty() {
            continue;
        }
        let landed_before = landings.len();
        let mut tail_jumps = 0;
        let kept = match all_kept.map_or_else(|| located_stubs(caller, position, &landings), Err) {
            Err(why) => BTreeMap::from([(why, stubs.len())]),
            Ok((elf, uses, location)) => {
                if location == StubLocation::ExecutableAddress {
                    executable_code_vaddr = uses.code_vaddr;
                }
                let planned = land(program, options, caller, elf, &uses, location, &stubs);
                tail_jumps = planned.tail_jumps.len();
                landings.merge(planned)
            }
        };
        let landed = landings.len() - landed_before;
        say(
            &caller.file.file.path,
            &kept,
            landed,
            tail_jumps,
            stubs.len(),
        );
        for (why, count) in kept {
            *landings.kept.entry(why).or_default() += count;
        }
    }
    if let (IfuncChoices::Unknown(why), 1..) = (&options.ifuncs, landings.kept(StubKept::Ifunc)) {
        log::debug!("PLT calls into ifuncs keep their stub: {why}");
    }
    (landings, executable_code_vaddr)
}

/// Why no stub's calls may land, whatever the file: the options or the kernel say so.
fn every_stub_kept(options: &PlanOptions, exit_policy: ExitPolicy) -> Option<StubKept> {
    if options.kernel_lacks_sessions {
        Some(StubKept::NoSessions)
    } else if options.follow {
        Some(StubKept::Follow)
    } else if exit_policy == ExitPolicy::Ret {
        Some(StubKept::ExitsAtCallers)
    } else if options.sites == SitePolicy::Entry {
        Some(StubKept::ProbeAtEntry)
    } else if options.preloaded_libraries {
        Some(StubKept::Preloaded)
    } else {
        None
    }
}

/// How the BPF program finds a file's stubs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StubLocation {
    /// By their virtual address, from the executable's `mm->start_code`.
    ExecutableAddress,
    /// By their file offset, in the library of this slot.
    LibraryOffset(u32),
}

/// The caller's file, how it uses its stubs and how the BPF program will find them; or why
/// none of its stubs' calls may land. `position` is the caller's among the traced files (the
/// executable's is 0).
fn located_stubs<'a>(
    caller: &Caller<'a>,
    position: usize,
    landings: &Landings,
) -> Result<(&'a ElfFile, StubUses, StubLocation), StubKept> {
    let elf = caller.file.elf.as_ref().map_err(|_| StubKept::Unreadable)?;
    let uses = elf.stub_uses();
    if position == 0 {
        return match uses.pie {
            true => Ok((elf, uses, StubLocation::ExecutableAddress)),
            false => Err(StubKept::NotPositionIndependent),
        };
    }
    if !caller.loaded_with_program {
        return Err(StubKept::OpenedWithDlopen);
    }
    // The BPF program learns where one code mapping of the library starts.
    if uses.code_segments != 1 {
        return Err(StubKept::SeveralCodeSegments);
    }
    let slot = landings.calling_libraries.len();
    if slot >= LIBRARY_SLOTS {
        return Err(StubKept::TooManyLibraries);
    }
    Ok((elf, uses, StubLocation::LibraryOffset(slot as u32)))
}

impl Landings {
    /// Adds the landed calls of one more file, and its library slot when it has one; returns
    /// how many of its stubs keep their probe, by why.
    fn merge(&mut self, planned: PlannedFile) -> BTreeMap<StubKept, usize> {
        if let Some(library) = planned
            .calling_library
            .filter(|_| !planned.calls.is_empty())
        {
            self.calling_libraries.push(library);
        }
        for (library, call) in planned.calls {
            self.add(&library, call);
        }
        if !planned.tail_jumps.is_empty() {
            let file = planned.file.clone();
            self.tail_jumps.push((file, planned.tail_jumps));
        }
        self.implementations.extend(planned.implementations);
        planned.kept
    }
}

/// What [`land`] planned for one file's stubs.
struct PlannedFile {
    /// The file whose stubs these are (as opened).
    file: PathBuf,
    calls: Vec<(PathBuf, LandedCall)>,
    tail_jumps: Vec<TailJump>,
    kept: BTreeMap<StubKept, usize>,
    implementations: BTreeMap<FunctionId, String>,
    calling_library: Option<CallingLibrary>,
}

/// One of the executable's GOT slots whose calls land: its function (`name@got`, which the
/// planner adds to the executable's module) and where the calls land.
pub(super) struct GotLanding {
    pub function: FunctionSymbol,
    /// The library called, as opened.
    library: PathBuf,
    offset: u64,
    implementation: Option<String>,
}

/// Which of the calls of `executable` through its GOT slots land, as functions `name@got`: those
/// that [`LandingSites::find`] places and the function-name filter and `--lib`/`--no-lib` show.
/// The others are not traced (they have no stub to probe); `--debug` says why.
pub(super) fn land_got_calls(
    program: &PltCalls,
    options: &PlanOptions,
    exit_policy: ExitPolicy,
    executable: &OpenedFile,
) -> Vec<GotLanding> {
    let Ok(elf) = executable.elf.as_ref() else {
        return Vec::new();
    };
    let calls = elf.got_calls();
    if calls.is_empty() {
        return Vec::new();
    }
    let mut kept: BTreeMap<StubKept, usize> = BTreeMap::new();
    let mut landed = Vec::new();
    if let Some(why) = every_stub_kept(options, exit_policy) {
        kept.insert(why, calls.len());
        if why == StubKept::NoSessions {
            warn_got_calls_untraced(&calls, program, options);
        }
    } else {
        let mut sites = LandingSites::new(program, options);
        for call in &calls {
            if !got_call_shown(call, program, options) {
                continue;
            }
            let name = format!("{}@got", call.target);
            let found = u32::try_from(call.slot)
                .map_err(|_| StubKept::Beyond4GiB)
                .and_then(|_| sites.find(elf, &call.symbol, &name));
            match found {
                Ok(found) => landed.push(GotLanding {
                    function: got_function(name, call),
                    library: found.library.file.open_path.clone(),
                    offset: found.offset,
                    implementation: found.implementation,
                }),
                Err(why) => *kept.entry(why).or_default() += 1,
            }
        }
    }
    log::debug!(
        "GOT calls of {}: {} slots called through, {} probed in the library function they \
         call (an emulated site), the others not traced{}",
        executable.file.path,
        calls.len(),
        landed.len(),
        counted_reasons(&kept, |why| why.why()),
    );
    landed
}

/// Says in one line that the calls through the GOT slots the filters show are not traced on this
/// kernel: a Rust program's library calls would be missing without a word.
fn warn_got_calls_untraced(calls: &[GotCall], program: &PltCalls, options: &PlanOptions) {
    let shown = (calls.iter())
        .filter(|call| got_call_shown(call, program, options))
        .count();
    if shown > 0 {
        log::warn!(
            "{shown} library functions the program calls through its GOT (-fno-plt, Rust) are not \
             traced there: counting them where they land needs uprobe sessions (Linux 6.13), \
             which this kernel lacks; their PLT calls are"
        );
    }
}

/// Whether the filters (`-f`, `--lib`/`--no-lib`) show the calls through `call`'s slot.
fn got_call_shown(call: &GotCall, program: &PltCalls, options: &PlanOptions) -> bool {
    options
        .functions
        .shows_name(&format!("{}@got", call.target))
        && (options.plt_libraries).traces_calls_into(program.scope.library_of(&call.symbol))
}

/// The function of the calls through the GOT slot of `call`, named `name`. It has no probe site
/// of its own: its address is the slot's.
fn got_function(name: String, call: &GotCall) -> FunctionSymbol {
    FunctionSymbol {
        name,
        address: call.slot,
        offset: 0,
        size: 0,
        kind: FunctionKind::Got,
        site: ProbeSite::ENTRY,
        execution: Execution::Emulated,
        plt_symbol: Some(call.symbol.clone()),
    }
}

/// The landed calls of the executable's GOT functions among `caller`'s functions, by the
/// landings `got` found for them.
fn got_calls_of(caller: &Caller, got: &[GotLanding]) -> Vec<(PathBuf, LandedCall, Option<String>)> {
    (caller.first_id..)
        .zip(caller.functions)
        .filter(|(_, f)| f.kind == FunctionKind::Got)
        .filter_map(|(function, symbol)| {
            let landing = got.iter().find(|g| g.function.address == symbol.address)?;
            let call = LandedCall {
                function,
                offset: landing.offset,
                route: Route::ExecutableGot(u32::try_from(symbol.address).ok()?),
            };
            Some((
                landing.library.clone(),
                call,
                landing.implementation.clone(),
            ))
        })
        .collect()
}

/// Where the calls through each of `stubs` of `caller` (its file read as `elf`) land, or why
/// they do not.
fn land(
    program: &PltCalls,
    options: &PlanOptions,
    caller: &Caller,
    elf: &ElfFile,
    uses: &StubUses,
    location: StubLocation,
    stubs: &[(FunctionId, &FunctionSymbol)],
) -> PlannedFile {
    let mut planned = PlannedFile {
        file: caller.file.file.open_path.clone(),
        calls: Vec::new(),
        tail_jumps: Vec::new(),
        kept: BTreeMap::new(),
        implementations: BTreeMap::new(),
        calling_library: None,
    };
    if let StubLocation::LibraryOffset(_) = location {
        use std::os::unix::fs::MetadataExt;
        let Ok(metadata) = std::fs::metadata(&caller.file.file.open_path) else {
            planned.kept.insert(StubKept::Unreadable, stubs.len());
            return planned;
        };
        planned.calling_library = Some(CallingLibrary {
            path: caller.file.file.path.clone(),
            inode: metadata.ino(),
        });
    }
    let mut sites = LandingSites::new(program, options);
    for &(function, symbol) in stubs {
        let landed = (|| {
            let raw = symbol.plt_symbol.as_deref().ok_or(StubKept::OwnIfunc)?;
            if !uses.only_called_or_jumped(symbol.address) {
                return Err(StubKept::NotOnlyCalled);
            }
            let tail_jumps = tail_jumps_to(caller, elf, uses, symbol.address, function)?;
            let stub = match location {
                StubLocation::ExecutableAddress => Some(symbol.address),
                StubLocation::LibraryOffset(_) => elf.code_offset(symbol.address),
            };
            let stub = stub
                .and_then(|stub| u32::try_from(stub).ok())
                .ok_or(StubKept::Beyond4GiB)?;
            let route = match location {
                StubLocation::ExecutableAddress => Route::ExecutableStub(stub),
                StubLocation::LibraryOffset(library) => Route::LibraryStub { stub, library },
            };
            Ok((sites.find(elf, raw, &symbol.name)?, route, tail_jumps))
        })();
        match landed {
            Ok((landed, route, tail_jumps)) => {
                let call = LandedCall {
                    function,
                    offset: landed.offset,
                    route,
                };
                planned
                    .calls
                    .push((landed.library.file.open_path.clone(), call));
                planned.tail_jumps.extend(tail_jumps);
                if let Some(name) = landed.implementation {
                    planned.implementations.insert(function, name);
                }
            }
            Err(why) => *planned.kept.entry(why).or_default() += 1,
        }
    }
    planned
}

/// Where a call into a library lands.
struct Landed<'a> {
    library: &'a OpenedFile,
    /// The file offset of the probe site in `library`.
    offset: u64,
    /// For an ifunc, the name of the implementation the loader chose.
    implementation: Option<String>,
}

/// Finds where calls into libraries land, reading each library's entries once.
struct LandingSites<'a> {
    program: &'a PltCalls<'a>,
    options: &'a PlanOptions,
    entries: BTreeMap<&'a str, Option<LibraryEntries>>,
    implementations: BTreeMap<&'a str, Implementations>,
}

impl<'a> LandingSites<'a> {
    fn new(program: &'a PltCalls<'a>, options: &'a PlanOptions) -> LandingSites<'a> {
        LandingSites {
            program,
            options,
            entries: BTreeMap::new(),
            implementations: BTreeMap::new(),
        }
    }

    /// Where the calls of the file `elf` into its symbol `raw` (a stub or GOT call named `name`)
    /// land, or why they are not probed there.
    fn find(&mut self, elf: &ElfFile, raw: &str, name: &str) -> Result<Landed<'a>, StubKept> {
        // Its landing would get a return probe, which setjmp would save as its return address.
        if saves_its_return_address(raw) {
            return Err(StubKept::SavesReturnAddress);
        }
        // Probed there, the unwinder would walk the frame before the shadow stack knew it.
        if UNWINDER_ENTRY_POINTS.contains(&raw) {
            return Err(StubKept::Unwinder);
        }
        let program = self.program;
        let path = program
            .scope
            .library_of(raw)
            .ok_or(StubKept::BoundToNoLibrary)?;
        let library = program
            .libraries
            .iter()
            .find(|l| l.file.path == path)
            .ok_or(StubKept::BoundToProgram)?;
        // The traced function's own probe may fire first, at an earlier site, and take
        // the return address the landing's check reads.
        let traced = |caller: &Caller| caller.file.file.path == library.file.path;
        if program.callers.iter().any(traced) {
            return Err(StubKept::IntoTracedLibrary);
        }
        let read = self.entries.entry(path).or_insert_with(|| {
            let elf = library.elf.as_ref().ok()?;
            Some(elf.library_entries())
        });
        let version = elf.requested_version(raw);
        let at = |offset, implementation| Landed {
            library,
            offset,
            implementation,
        };
        match read
            .as_ref()
            .map(|read| read.landing_of_version(raw, version))
        {
            Some(Landing::At(offset)) => Ok(at(offset, None)),
            Some(Landing::Ifunc) => {
                let library_elf = library.elf.as_ref().map_err(|_| StubKept::Unresolved)?;
                let known_as = Path::new(&library.file.path);
                let address = (self.options.ifuncs)
                    .implementation(known_as, library_elf.build_id(), raw)
                    .map_err(|why| match why {
                        IfuncNotFollowed::Unknown => StubKept::Ifunc,
                        IfuncNotFollowed::OtherBuild => StubKept::IfuncOfOtherBuild,
                        IfuncNotFollowed::NotResolved => StubKept::IfuncNotResolved,
                    })?;
                let debug = &self.options.debug;
                let functions = self
                    .implementations
                    .entry(path)
                    .or_insert_with(|| library_elf.implementations(debug, known_as));
                match library_elf.implementation_landing(functions, address, raw) {
                    ImplementationLanding::At {
                        offset,
                        name: chosen,
                    } => {
                        say_ifunc_landing(name, raw, &chosen, offset, known_as);
                        Ok(at(offset, Some(chosen)))
                    }
                    ImplementationLanding::SingleStepped { .. } => Err(StubKept::SingleStepped),
                    ImplementationLanding::UnknownSize => Err(StubKept::IfuncWithoutSymbols),
                }
            }
            Some(Landing::SingleStepped) => Err(StubKept::SingleStepped),
            Some(Landing::Versioned) => Err(StubKept::Versioned),
            Some(Landing::Undefined) | None => Err(StubKept::Unresolved),
        }
    }
}

/// The probes of the tail jumps of `caller` to the stub at `stub` (function `function`), or why
/// the stub keeps its own.
fn tail_jumps_to(
    caller: &Caller,
    elf: &ElfFile,
    uses: &StubUses,
    stub: u64,
    function: FunctionId,
) -> Result<Vec<TailJump>, StubKept> {
    (uses.tail_jumps_to(stub).iter())
        .map(|&address| {
            let offset = elf.code_offset(address).ok_or(StubKept::Unresolved)?;
            match caller.probe_sites.contains(&offset) {
                true => Err(StubKept::TailJumpOnProbe),
                false => Ok(TailJump { function, offset }),
            }
        })
        .collect()
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

/// Says how many of the `stubs` of `file` are probed where their calls land (`landed`, and
/// `tail_jumps` jumps to them), and why the others keep their stub (`--debug`).
fn say(
    file: &str,
    kept: &BTreeMap<StubKept, usize>,
    landed: usize,
    tail_jumps: usize,
    stubs: usize,
) {
    if !log::log_enabled!(log::Level::Debug) {
        return;
    }
    log::debug!(
        "PLT calls of {file}: {landed} probed in the library function they call (an emulated \
         site; {tail_jumps} tail jumps to them on the jump), {} at their stub \
         (single-stepped){}",
        stubs - landed,
        counted_reasons(kept, |why| why.why()),
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
