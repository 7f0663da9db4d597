//! Attaching: the probes of a plan's functions (entries, exits, PLT calls where they land) and
//! the watches (dlopen's return, the unwinder's entries), each filtered to one process.

use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;

use libbpf_rs::{Link, ProgramMut, UprobeMultiOpts};

use super::error::ProbeError;
use super::interface::{landing_cookie, COOKIE_AFTER_RETURN, COOKIE_ALSO_EXIT};
use super::{AttachedProbes, Landings, LoadedProbes};
use crate::elf::ExitProbe;
use crate::table::{FunctionKind, FunctionTable};

impl LoadedProbes<'_> {
    /// Attaches entry and exit probes for every function of `table` in `modules`, filtered to
    /// `pid`: each module index with the path that opens its file. `exits` says, per function
    /// id, where its exit is probed.
    pub fn attach(
        &self,
        table: &FunctionTable,
        exits: &[ExitProbe],
        landings: &Landings,
        modules: &[(usize, &Path)],
        pid: u32,
    ) -> Result<AttachedProbes, ProbeError> {
        let started = Instant::now();
        let mut attached = AttachedProbes::default();
        for &(module_index, file) in modules {
            let module = &table.modules[module_index];
            let plan = ModuleProbes::new(table, exits, landings, module_index as u32);
            let progs = &self.skel.progs;
            let kinds = [
                (
                    &progs.function_exit,
                    &plan.uretprobes,
                    true,
                    "return",
                    &mut attached.return_links,
                ),
                (
                    &progs.function_exit_site,
                    &plan.exit_sites,
                    false,
                    "exit",
                    &mut attached.exit_site_links,
                ),
                (
                    &progs.function_entry,
                    &plan.entries,
                    false,
                    "entry",
                    &mut attached.entry_links,
                ),
            ];
            for (program, probes, retprobe, direction, links) in kinds {
                if probes.is_empty() {
                    continue;
                }
                let (offsets, cookies): (Vec<usize>, Vec<u64>) = probes.iter().copied().unzip();
                let opts = UprobeMultiOpts {
                    offsets,
                    cookies,
                    retprobe,
                    ..Default::default()
                };
                links.push(attach_multi(
                    program,
                    file,
                    opts,
                    pid,
                    direction,
                    module.clone(),
                )?);
            }
        }
        attached.attach_time = started.elapsed();
        Ok(attached)
    }

    /// Attaches the probes of the PLT calls of `landings` in their libraries, filtered to
    /// `pid`. Their session links make return probes: they go with the return links.
    pub fn attach_landings(
        &self,
        landings: &Landings,
        pid: u32,
    ) -> Result<AttachedProbes, ProbeError> {
        let started = Instant::now();
        let mut attached = AttachedProbes::default();
        for (library, probes) in landings.libraries() {
            // One link per set of distinct offsets: two stubs can land in one function
            // (aliases such as `strdup` and `__strdup`).
            let mut rest: Vec<(usize, u64)> = probes
                .iter()
                .map(|landing| {
                    (
                        landing.offset,
                        landing_cookie(landing.function, landing.stub),
                    )
                })
                .collect();
            while !rest.is_empty() {
                let mut seen = HashSet::new();
                let (batch, later): (Vec<_>, Vec<_>) = rest
                    .into_iter()
                    .partition(|(offset, _)| seen.insert(*offset));
                rest = later;
                let (offsets, cookies): (Vec<usize>, Vec<u64>) = batch.into_iter().unzip();
                let opts = UprobeMultiOpts {
                    offsets,
                    cookies,
                    session: true,
                    ..Default::default()
                };
                let path = library.display().to_string();
                let program = &self.skel.progs.plt_call;
                let link = attach_multi(program, library, opts, pid, "PLT call", path)?;
                attached.return_links.push(link);
            }
        }
        attached.attach_time = started.elapsed();
        Ok(attached)
    }

    /// Puts the dlopen watch on `offsets` of `library` (the dlopen the process binds to).
    pub fn watch_dlopen(
        &self,
        library: &Path,
        offsets: Vec<usize>,
        pid: u32,
    ) -> Result<Link, ProbeError> {
        let program = &self.skel.progs.library_loaded;
        watch(program, library, offsets, true, pid, "dlopen return")
    }

    /// Puts the unwinder watch on `offsets` of `file`: the entry points of the unwinder it
    /// defines, where the shadow stack gives traced frames their return addresses back.
    pub fn watch_unwinder(
        &self,
        file: &Path,
        offsets: Vec<usize>,
        pid: u32,
    ) -> Result<Link, ProbeError> {
        let program = &self.skel.progs.unwinder_entered;
        watch(program, file, offsets, false, pid, "unwinder entry")
    }
}

/// Attaches `program` at `offsets` of `file` (at their returns with `retprobe`), filtered to
/// `pid`; `what` names the probes in an error.
fn watch(
    program: &ProgramMut,
    file: &Path,
    offsets: Vec<usize>,
    retprobe: bool,
    pid: u32,
    what: &'static str,
) -> Result<Link, ProbeError> {
    let opts = UprobeMultiOpts {
        offsets,
        retprobe,
        ..Default::default()
    };
    attach_multi(program, file, opts, pid, what, file.display().to_string())
}

/// Attaches `program` with one `uprobe_multi` link at the offsets of `opts` in `file`, filtered to
/// `pid`; `direction` and `path` name the probes in an error.
fn attach_multi(
    program: &ProgramMut,
    file: &Path,
    opts: UprobeMultiOpts,
    pid: u32,
    direction: &'static str,
    path: String,
) -> Result<Link, ProbeError> {
    let count = opts.offsets.len();
    program
        .attach_uprobe_multi_with_opts(pid as i32, file, "", opts)
        .map_err(|error| ProbeError::Attach {
            count,
            direction,
            path,
            error,
        })
}

/// The probes of one module, as (file offset, cookie) pairs per kind.
struct ModuleProbes {
    entries: Vec<(usize, u64)>,
    uretprobes: Vec<(usize, u64)>,
    exit_sites: Vec<(usize, u64)>,
}

impl ModuleProbes {
    fn new(
        table: &FunctionTable,
        exits: &[ExitProbe],
        landings: &Landings,
        module: u32,
    ) -> ModuleProbes {
        let mut probes = ModuleProbes {
            entries: Vec::new(),
            uretprobes: Vec::new(),
            exit_sites: Vec::new(),
        };
        for (id, function) in table.functions.iter().enumerate() {
            if function.module != module || landings.contains(id as u32) {
                continue;
            }
            let id = id as u64;
            let entry = function.offset as usize;
            let mut cookie = id;
            let exit_cookie = match function.kind {
                FunctionKind::Plt => id | COOKIE_AFTER_RETURN,
                _ => id,
            };
            match &exits[id as usize] {
                ExitProbe::Uretprobe(_) => probes.uretprobes.push((entry, id)),
                ExitProbe::Sites(offsets) => {
                    for &offset in offsets {
                        if offset as usize == entry {
                            cookie |= COOKIE_ALSO_EXIT;
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
