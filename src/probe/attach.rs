//! Attaching: the probes of a plan's functions (entries, exits, PLT calls where they land) and
//! the watches (dlopen's and dlclose's returns, the unwinder's entries), each filtered to one
//! process, as the strategy says: one `uprobe_multi` link per file and kind, or one uprobe per
//! probe site.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Instant;

use libbpf_rs::{Link, MapCore, MapFlags, ProgramMut, UprobeMultiOpts, UprobeOpts};

use super::error::ProbeError;
use super::generations::Generations;
use super::interface::{landing_cookie, COOKIE_AFTER_RETURN, COOKIE_ALSO_EXIT};
use super::interface::{skel::types, COOKIE_NOT_GO, COOKIE_NO_RETURN_VALUE, COOKIE_RETURN_PROBED};
use super::{AttachMode, AttachedProbes, LoadedProbes, Programs};
use crate::elf::ExitProbe;
use crate::plan::{Landings, Route};
use crate::table::{FunctionId, FunctionKind, FunctionTable, TracedFunction};
use crate::value;

/// Links that watch the process for the recorder (dlopen's and dlclose's returns, the
/// unwinder's entries): dropping it removes the watch, as [`AttachedProbes`] are released.
pub struct Watch {
    links: Vec<Link>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        super::release::release(vec![std::mem::take(&mut self.links)]);
    }
}

/// When a probe's program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hook {
    /// When the probed instruction is reached.
    Site,
    /// When the function that starts there returns (a uretprobe).
    Return,
    /// Both, the entry deciding whether the return is probed (a uprobe session).
    Session,
}

/// Where a set of probes goes.
#[derive(Clone, Copy)]
struct Target<'a> {
    /// The file, as it is opened.
    file: &'a Path,
    /// The file, as messages name it.
    name: &'a str,
    /// The process the probes are filtered to.
    pid: u32,
}

impl<'obj> LoadedProbes<'obj> {
    /// Attaches entry and exit probes for every function of `table` in `modules`, filtered to
    /// `pid`: each module index with the path that opens its file. `exits` says, per function
    /// id, where its exit is probed, and `sites` which exit sites come before a return value.
    pub fn attach(
        &self,
        table: &FunctionTable,
        exits: &[ExitProbe],
        sites: &ExitSites,
        landings: &Landings,
        modules: &[(usize, &Path)],
        pid: u32,
    ) -> Result<AttachedProbes, ProbeError> {
        let started = Instant::now();
        let mut attached = AttachedProbes::default();
        for &(module_index, file) in modules {
            let target = Target {
                file,
                name: &table.modules[module_index],
                pid,
            };
            let sessions = self.strategy.sessions;
            let module = module_index as u32;
            self.set_value_specs(table, module)?;
            let go = self.go_functions.as_ref();
            let generations = self.generations.borrow();
            let plan = ModuleProbes::new(
                table,
                exits,
                sites,
                landings,
                (module, sessions, go),
                &generations,
            );
            let progs = self.programs();
            // Sessions make return probes: they are released with the return links.
            attached.return_links.extend(self.attach_sites(
                &self.skel.progs.function_call,
                target,
                plan.calls,
                Hook::Session,
                "entry and return",
            )?);
            let kinds = [
                (
                    progs.returns,
                    plan.uretprobes,
                    Hook::Return,
                    "return",
                    &mut attached.return_links,
                ),
                (
                    progs.exit_sites,
                    plan.exit_sites,
                    Hook::Site,
                    "exit",
                    &mut attached.exit_site_links,
                ),
                (
                    progs.entries,
                    plan.entries,
                    Hook::Site,
                    "entry",
                    &mut attached.entry_links,
                ),
            ];
            for (program, probes, hook, what, links) in kinds {
                links.extend(self.attach_sites(program, target, probes, hook, what)?);
            }
        }
        attached.attach_time = started.elapsed();
        Ok(attached.kept())
    }

    /// Tells the probes which values the functions of `module` capture (before they are
    /// attached: a probe without its spec captures nothing).
    fn set_value_specs(&self, table: &FunctionTable, module: u32) -> Result<(), ProbeError> {
        let functions = table.functions.iter().enumerate();
        for (id, function) in functions.filter(|(_, f)| f.module == module) {
            // Events write their values themselves (src/bpf/kernel_events.bpf.h).
            if (function.values.is_empty() && !function.user_stack)
                || !function.kind.is_probed_code()
            {
                continue;
            }
            self.set_value_spec(id as FunctionId, function, function.user_stack)?;
        }
        Ok(())
    }

    /// Tells the probes what function `id` captures: its values, then the user stack's id when
    /// `user_stack`.
    pub(super) fn set_value_spec(
        &self,
        id: FunctionId,
        function: &TracedFunction,
        user_stack: bool,
    ) -> Result<(), ProbeError> {
        let mut spec = types::value_spec::default();
        let items = value::bpf_items(&function.values, user_stack);
        spec.items[..items.len()].copy_from_slice(&items);
        spec.count = items.len() as u32;
        // SAFETY: `value_spec` is plain old data generated from interface.h.
        let bytes = unsafe { plain_bytes(&spec) };
        self.skel
            .maps
            .value_specs
            .update(&id.to_ne_bytes(), bytes, MapFlags::ANY)
            .map_err(|error| ProbeError::ValueSpecs {
                function: function.name.clone(),
                error,
            })
    }

    /// Attaches the probes of the PLT and GOT calls of `landings` in their libraries, filtered to
    /// `pid`. Their session links make return probes: they go with the return links.
    pub fn attach_landings(
        &self,
        landings: &Landings,
        pid: u32,
    ) -> Result<AttachedProbes, ProbeError> {
        let started = Instant::now();
        let mut attached = AttachedProbes::default();
        if !landings.is_empty() && !self.strategy.sessions {
            return Err(ProbeError::Unsupported {
                what: "probing library calls where they land",
                needs: "uprobe sessions on uprobe_multi",
            });
        }
        self.set_calling_libraries(landings)?;
        for (library, calls) in landings.libraries() {
            let name = library.display().to_string();
            let target = Target {
                file: library,
                name: &name,
                pid,
            };
            let progs = &self.skel.progs;
            let mut executable_stubs = Vec::new();
            let mut library_stubs = Vec::new();
            let mut executable_got = Vec::new();
            let generations = self.generations.borrow();
            for call in calls
                .iter()
                .filter(|c| !generations.is_detached(c.function))
            {
                let (calls, route) = match call.route {
                    Route::ExecutableStub(stub) => (&mut executable_stubs, stub),
                    Route::LibraryStub { stub, .. } => (&mut library_stubs, stub),
                    Route::ExecutableGot(slot) => (&mut executable_got, slot),
                };
                let cookie = landing_cookie(call.function, route);
                let generation = generations.cookie_bit(call.function);
                calls.push((call.offset as usize, cookie | generation));
            }
            drop(generations);
            for (program, calls) in [
                (&progs.plt_call, executable_stubs),
                (&progs.library_plt_call, library_stubs),
                (&progs.got_call, executable_got),
            ] {
                // One link per set of distinct offsets: two stubs can land in one function
                // (aliases such as `strdup` and `__strdup`, or the same call in two files).
                let mut rest: Vec<(usize, u64)> = calls;
                while !rest.is_empty() {
                    let mut seen = HashSet::new();
                    let (batch, later): (Vec<_>, Vec<_>) = rest
                        .into_iter()
                        .partition(|(offset, _)| seen.insert(*offset));
                    rest = later;
                    let links =
                        self.attach_sites(program, target, batch, Hook::Session, "library call")?;
                    attached.return_links.extend(links);
                }
            }
        }
        // A tail jump to such a stub is that call's entry, in the file of the stub.
        for (file, jumps) in landings.tail_jumps() {
            let name = file.display().to_string();
            let target = Target {
                file,
                name: &name,
                pid,
            };
            let generations = self.generations.borrow();
            let sites = (jumps.iter())
                .filter(|jump| !generations.is_detached(jump.function))
                .map(|jump| {
                    let generation = generations.cookie_bit(jump.function);
                    (jump.offset as usize, u64::from(jump.function) | generation)
                })
                .collect();
            drop(generations);
            let program = &self.skel.progs.function_call;
            let links =
                self.attach_sites(program, target, sites, Hook::Session, "PLT tail jump")?;
            attached.return_links.extend(links);
        }
        attached.attach_time = started.elapsed();
        Ok(attached.kept())
    }

    /// Tells the BPF program the traced libraries whose stubs' calls land: each one's inode in
    /// its slot, and each stub's slot.
    fn set_calling_libraries(&self, landings: &Landings) -> Result<(), ProbeError> {
        let maps = &self.skel.maps;
        for (slot, library) in (0u32..).zip(landings.calling_libraries()) {
            let code = types::library_code {
                inode: library.inode,
                base: 0,
            };
            // SAFETY: `library_code` is plain old data generated from interface.h.
            let bytes = unsafe { plain_bytes(&code) };
            (maps
                .library_code
                .update(&slot.to_ne_bytes(), bytes, MapFlags::ANY))
            .map_err(|error| ProbeError::CallingLibrary {
                path: library.path.clone(),
                error,
            })?;
        }
        let calls = landings.libraries().iter().flat_map(|(_, calls)| calls);
        for call in calls {
            let Route::LibraryStub { library: slot, .. } = call.route else {
                continue;
            };
            let library = &landings.calling_libraries()[slot as usize];
            (maps.library_stubs.update(
                &call.function.to_ne_bytes(),
                &slot.to_ne_bytes(),
                MapFlags::ANY,
            ))
            .map_err(|error| ProbeError::CallingLibrary {
                path: library.path.clone(),
                error,
            })?;
        }
        Ok(())
    }

    /// Puts the watch of dlopen and dlclose on `offsets` of `library` (those the process binds
    /// to).
    pub fn watch_dlopen_dlclose(
        &self,
        library: &Path,
        offsets: Vec<usize>,
        pid: u32,
    ) -> Result<Watch, ProbeError> {
        let program = &self.skel.progs.libraries_changed;
        self.watch(
            program,
            library,
            offsets,
            Hook::Return,
            pid,
            "dlopen and dlclose return",
        )
    }

    /// Puts the unwinder watch on `offsets` of `file`: the entry points of the unwinder it
    /// defines, where the shadow stack gives traced frames their return addresses back.
    pub fn watch_unwinder(
        &self,
        file: &Path,
        offsets: Vec<usize>,
        pid: u32,
    ) -> Result<Watch, ProbeError> {
        let program = self.programs().unwinder;
        self.watch(program, file, offsets, Hook::Site, pid, "unwinder entry")
    }

    /// Attaches `program` at `offsets` of `file`, filtered to `pid`; `what` names the probes in
    /// an error.
    fn watch(
        &self,
        program: &ProgramMut,
        file: &Path,
        offsets: Vec<usize>,
        hook: Hook,
        pid: u32,
        what: &'static str,
    ) -> Result<Watch, ProbeError> {
        let name = file.display().to_string();
        let target = Target {
            file,
            name: &name,
            pid,
        };
        let sites = offsets.into_iter().map(|offset| (offset, 0)).collect();
        let links = self.attach_sites(program, target, sites, hook, what)?;
        super::link_keeper::keep(super::link_keeper::LinkKind::Watch, &links);
        Ok(Watch { links })
    }

    /// The programs of the variant this kernel loads (see src/bpf/compat.bpf.h).
    fn programs(&self) -> ProbePrograms<'_, 'obj> {
        let progs = &self.skel.progs;
        match self.strategy.programs {
            Programs::Current => ProbePrograms {
                entries: &progs.function_entry,
                exit_sites: &progs.function_exit_site,
                returns: &progs.function_exit,
                unwinder: &progs.unwinder_entered,
            },
            Programs::Legacy => ProbePrograms {
                entries: &progs.function_entry_legacy,
                exit_sites: &progs.function_exit_site_legacy,
                returns: &progs.function_exit_legacy,
                unwinder: &progs.unwinder_entered_legacy,
            },
        }
    }

    /// Tells the legacy programs, which get no cookie, the cookie of each of `sites` in `file`
    /// (see src/bpf/compat.bpf.h); a return probe finds its cookie where its entry left it.
    fn set_site_cookies(&self, file: &Path, sites: &[(usize, u64)]) -> Result<(), ProbeError> {
        let error = |cause: std::io::Error| ProbeError::SiteCookies {
            path: file.display().to_string(),
            error: cause.to_string(),
        };
        let inode = std::fs::metadata(file).map_err(error)?.ino();
        let map = &self.skel.maps.site_cookies;
        for &(offset, cookie) in sites {
            let site = types::site_key {
                inode,
                offset: offset as u64,
            };
            // SAFETY: `site_key` is plain old data generated from interface.h.
            let key = unsafe { plain_bytes(&site) };
            map.update(key, &cookie.to_ne_bytes(), MapFlags::ANY)
                .map_err(|cause| error(std::io::Error::other(cause.to_string())))?;
        }
        Ok(())
    }

    /// Attaches `program` at each (file offset, cookie) of `sites` in `target`: with one
    /// `uprobe_multi` link for all, or one uprobe (a perf-event link) each. `what` names the
    /// probes in an error.
    fn attach_sites(
        &self,
        program: &ProgramMut,
        target: Target,
        sites: Vec<(usize, u64)>,
        hook: Hook,
        what: &'static str,
    ) -> Result<Vec<Link>, ProbeError> {
        let mode = self.strategy.mode;
        let error = |count, cause| ProbeError::Attach {
            count,
            direction: what,
            path: target.name.to_owned(),
            mode,
            error: cause,
        };
        if sites.is_empty() {
            return Ok(Vec::new());
        }
        if self.strategy.programs == Programs::Legacy && hook == Hook::Site {
            self.set_site_cookies(target.file, &sites)?;
        }
        match mode {
            AttachMode::Multi => {
                let count = sites.len();
                let (offsets, cookies) = sites.into_iter().unzip();
                let opts = UprobeMultiOpts {
                    offsets,
                    cookies,
                    retprobe: hook == Hook::Return,
                    session: hook == Hook::Session,
                    ..Default::default()
                };
                let link = program
                    .attach_uprobe_multi_with_opts(target.pid as i32, target.file, "", opts)
                    .map_err(|e| error(count, e))?;
                Ok(vec![link])
            }
            // Sessions never come here: without uprobe_multi, PLT calls are probed at their
            // stubs (see `attach_landings`). A kernel without cookies refuses any but 0: the
            // legacy programs have their cookies in the map instead.
            AttachMode::Single => sites
                .into_iter()
                .map(|(offset, cookie)| {
                    let opts = UprobeOpts {
                        cookie: match self.strategy.programs {
                            Programs::Current => cookie,
                            Programs::Legacy => 0,
                        },
                        retprobe: hook == Hook::Return,
                        ..Default::default()
                    };
                    program
                        .attach_uprobe_with_opts(target.pid as i32, target.file, offset, opts)
                        .map_err(|e| {
                            log::debug!("{}: no {what} probe at {offset:#x}: {e}", target.name);
                            error(1, e)
                        })
                })
                .collect(),
        }
    }
}

/// The probe programs of one variant.
struct ProbePrograms<'a, 'obj> {
    entries: &'a ProgramMut<'obj>,
    exit_sites: &'a ProgramMut<'obj>,
    returns: &'a ProgramMut<'obj>,
    unwinder: &'a ProgramMut<'obj>,
}

/// The exit sites (module, file offset) where a function that captures its return value leaves
/// before it has one (see [`ProbePlan`](crate::plan::ProbePlan)).
pub type ExitSites = HashSet<(u32, u64)>;

/// The bytes of `value`, a type without padding generated from interface.h.
///
/// # Safety
/// `T` must be plain old data without padding.
unsafe fn plain_bytes<T>(value: &T) -> &[u8] {
    std::slice::from_raw_parts((value as *const T).cast::<u8>(), std::mem::size_of::<T>())
}

/// The probes of one module, as (file offset, cookie) pairs per kind.
struct ModuleProbes {
    /// Entry and return as one session (functions whose exit a return probe sees, where the
    /// kernel has sessions).
    calls: Vec<(usize, u64)>,
    entries: Vec<(usize, u64)>,
    uretprobes: Vec<(usize, u64)>,
    exit_sites: Vec<(usize, u64)>,
}

impl ModuleProbes {
    /// The probes of `module`'s functions, but those detached, each with its generation; `how`
    /// is the module, whether the kernel has sessions, and a Go program's Go functions.
    fn new(
        table: &FunctionTable,
        exits: &[ExitProbe],
        sites: &ExitSites,
        landings: &Landings,
        how: (u32, bool, Option<&HashSet<FunctionId>>),
        generations: &Generations,
    ) -> ModuleProbes {
        let (module, sessions, go_functions) = how;
        let mut probes = ModuleProbes {
            calls: Vec::new(),
            entries: Vec::new(),
            uretprobes: Vec::new(),
            exit_sites: Vec::new(),
        };
        for (id, function) in table.functions.iter().enumerate() {
            if function.module != module
                || landings.contains(id as u32)
                || !function.kind.is_probed_code()
                || generations.is_detached(id as FunctionId)
            {
                continue;
            }
            let generation = generations.cookie_bit(id as FunctionId);
            let not_go = go_functions.is_some_and(|go| !go.contains(&(id as FunctionId)));
            let id = id as u64;
            let entry = function.offset as usize;
            let cookie_of_function = id | generation | if not_go { COOKIE_NOT_GO } else { 0 };
            let mut cookie = cookie_of_function;
            let exit_cookie = match function.kind {
                FunctionKind::Plt => cookie_of_function | COOKIE_AFTER_RETURN,
                _ => cookie_of_function,
            };
            match &exits[id as usize] {
                ExitProbe::Uretprobe(_) if sessions => {
                    probes.calls.push((entry, cookie_of_function));
                    continue;
                }
                ExitProbe::Uretprobe(_) => {
                    probes.uretprobes.push((entry, cookie_of_function));
                    cookie |= COOKIE_RETURN_PROBED;
                }
                ExitProbe::Sites(offsets) => {
                    for &offset in offsets {
                        if offset as usize == entry {
                            cookie |= COOKIE_ALSO_EXIT;
                        } else if sites.contains(&(module, offset)) {
                            let cookie = exit_cookie | COOKIE_NO_RETURN_VALUE;
                            probes.exit_sites.push((offset as usize, cookie));
                        } else {
                            probes.exit_sites.push((offset as usize, exit_cookie));
                        }
                    }
                }
            }
            probes.entries.push((entry, cookie));
        }
        probes
    }
}
