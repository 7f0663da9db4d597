//! `stacks`: where each shown function is called from. For every call of a function that `-f`
//! shows, the path of its callers as the replayer's own per-thread stack has it (no unwinding:
//! it works on binaries built without frame pointers), counted per distinct path:
//!
//! ```text
//! target: 35 calls, 3 paths
//!        Calls  Total time  Path
//!           20    5.812 us  main → b → c → target
//!           10    2.204 us  main → a → target
//!            5    1.102 us  main → target
//! ```
//!
//! - Paths are sorted by calls, most first, then by total time, then by their text; functions by
//!   calls, then by name.
//! - `-f` chooses the functions whose paths are shown; the callers on a path are every traced
//!   function (`--no-function` still hides frames, `--max-depth`, `--time-filter` and
//!   `--tid-filter` still hide calls).
//! - Calls of unknown time count as calls and add no time; a path with some says how many.
//! - With more than one process (`--follow`), each function is shown per process
//!   (`target [pid 123]: …`).
//! - `--folded`: the same paths as folded stacks weighted by calls (`main;a;target 10`), the
//!   input of flamegraph.pl, with a process frame first when there are several processes.

use std::collections::BTreeMap;
use std::io::{self, Write};

use super::flame_graph::{frame_name, process_frame};
use super::summary::{plural, HumanDuration};
use super::Format;
use crate::fast_hash::FastHashMap;
use crate::filter::FilterSpec;
use crate::replay::{CallSink, FinishedCall};
use crate::table::{FunctionId, FunctionTable};

/// Without `-f`, the paths of every function would be shown: beyond this many functions in the
/// table, [`check_selection`] asks for `-f`.
pub const MAX_FUNCTIONS_WITHOUT_GLOB: usize = 64;

/// The calls of one distinct path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathStats {
    pub calls: u64,
    /// The durations of the calls whose time is known.
    pub total_ns: u64,
    /// The calls among `calls` whose time is unknown.
    pub unknown_time: u64,
}

impl PathStats {
    pub fn add(&mut self, call: &FinishedCall) {
        self.calls += 1;
        if call.time_known {
            self.total_ns = self.total_ns.saturating_add(call.duration_ns);
        } else {
            self.unknown_time += 1;
        }
    }
}

/// The distinct paths to the shown functions, per process; a [`CallSink`]. Memory grows with
/// the number of distinct paths to the shown functions.
pub struct CallPaths {
    /// Whether `-f` shows each function id.
    shown: Vec<bool>,
    /// Per process, per path (outermost first, ending with the shown function), its calls.
    processes: FastHashMap<u32, PathCounts>,
    /// The calls of shown functions.
    shown_calls: u64,
}

/// `--format=stacks` without `-f` on a large trace.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "--format={format} shows one table per function, and this trace has {functions} \
     functions: choose some with -f GLOB"
)]
pub struct TooManyFunctions {
    pub format: Format,
    pub functions: usize,
}

/// Whether `filter`'s `-f` chooses the functions to show on `table`, or the table is small
/// enough to show them all.
pub fn check_selection(
    format: Format,
    filter: &FilterSpec,
    table: &FunctionTable,
) -> Result<(), TooManyFunctions> {
    let functions = table.functions.len();
    if filter.functions.is_empty() && functions > MAX_FUNCTIONS_WITHOUT_GLOB {
        return Err(TooManyFunctions { format, functions });
    }
    Ok(())
}

/// The filters for the replay of a report that shows `-f`'s functions with their callers or
/// callees: every filter but `-f`, which the report applies itself.
pub fn without_function_globs(filter: &FilterSpec) -> FilterSpec {
    FilterSpec {
        functions: Vec::new(),
        ..filter.clone()
    }
}

impl CallPaths {
    /// Paths to the functions `filter`'s `-f`/`--no-function` show.
    pub fn new(filter: &FilterSpec, table: &FunctionTable) -> CallPaths {
        CallPaths {
            shown: filter.function_mask(table),
            processes: FastHashMap::default(),
            shown_calls: 0,
        }
    }

    /// The calls of the functions shown: with none, the report is empty.
    pub fn shown_calls(&self) -> u64 {
        self.shown_calls
    }

    /// The paths of process `pid` to `function`, most calls first.
    pub fn paths(&self, pid: u32, function: FunctionId) -> Vec<(&[FunctionId], PathStats)> {
        let mut paths: Vec<(&[FunctionId], PathStats)> = self
            .processes
            .get(&pid)
            .into_iter()
            .flatten()
            .filter(|(path, _)| path.last() == Some(&function))
            .map(|(path, stats)| (path.as_slice(), *stats))
            .collect();
        paths.sort_by(|(a_path, a), (b_path, b)| {
            (b.calls, b.total_ns)
                .cmp(&(a.calls, a.total_ns))
                .then_with(|| a_path.cmp(b_path))
        });
        paths
    }

    /// Per process (ascending), the shown functions that were called, most calls first.
    fn functions(&self, table: &FunctionTable) -> Vec<(u32, FunctionId, PathStats)> {
        let mut pids: Vec<u32> = self.processes.keys().copied().collect();
        pids.sort_unstable();
        let mut rows = Vec::new();
        for pid in pids {
            let mut totals: FastHashMap<FunctionId, PathStats> = FastHashMap::default();
            for (path, stats) in &self.processes[&pid] {
                let total = totals.entry(*path.last().expect("paths are never empty"));
                let total = total.or_default();
                total.calls += stats.calls;
                total.total_ns = total.total_ns.saturating_add(stats.total_ns);
                total.unknown_time += stats.unknown_time;
            }
            let mut functions: Vec<(u32, FunctionId, PathStats)> = totals
                .into_iter()
                .map(|(id, stats)| (pid, id, stats))
                .collect();
            functions.sort_by(|a, b| {
                b.2.calls
                    .cmp(&a.2.calls)
                    .then_with(|| table.name_of(a.1).cmp(table.name_of(b.1)))
            });
            rows.extend(functions);
        }
        rows
    }

    /// The text report: per shown function, its paths.
    pub fn write_text(&self, table: &FunctionTable, out: &mut dyn Write) -> io::Result<()> {
        let several = self.processes.len() > 1;
        for (i, (pid, function, stats)) in self.functions(table).into_iter().enumerate() {
            if i > 0 {
                writeln!(out)?;
            }
            let paths = self.paths(pid, function);
            let process = if several {
                format!(" [pid {pid}]")
            } else {
                String::new()
            };
            writeln!(
                out,
                "{}{process}: {}, {}",
                table.name_of(function),
                plural(stats.calls, "call", "calls"),
                plural(paths.len() as u64, "path", "paths"),
            )?;
            writeln!(out, "  {:>10}  {:>10}  Path", "Calls", "Total time")?;
            for (path, stats) in paths {
                let names: Vec<&str> = path.iter().map(|&id| table.name_of(id)).collect();
                write!(
                    out,
                    "  {:>10}  {:>10}  {}",
                    stats.calls,
                    HumanDuration(stats.total_ns),
                    names.join(" → ")
                )?;
                if stats.unknown_time > 0 {
                    write!(out, "  ({} of unknown time)", stats.unknown_time)?;
                }
                writeln!(out)?;
            }
        }
        Ok(())
    }

    /// The paths as folded stacks weighted by calls, sorted by their text.
    pub fn write_folded(&self, table: &FunctionTable, out: &mut dyn Write) -> io::Result<()> {
        let several = self.processes.len() > 1;
        let mut lines: Vec<(String, u64)> = Vec::new();
        for (&pid, paths) in &self.processes {
            for (path, stats) in paths {
                let mut text = if several {
                    process_frame(table, pid, path)
                } else {
                    String::new()
                };
                let frames: Vec<_> = path
                    .iter()
                    .map(|&id| frame_name(table.name_of(id)))
                    .collect();
                text.push_str(&frames.join(";"));
                lines.push((text, stats.calls));
            }
        }
        lines.sort_unstable();
        for (text, calls) in lines {
            writeln!(out, "{text} {calls}")?;
        }
        Ok(())
    }
}

impl CallSink for CallPaths {
    fn call_finished(&mut self, call: &FinishedCall, stack: &[FunctionId]) {
        if !self
            .shown
            .get(call.function as usize)
            .copied()
            .unwrap_or(false)
        {
            return;
        }
        self.shown_calls += 1;
        count_call(self.processes.entry(call.pid).or_default(), stack, call);
    }
}

/// Calls per call path, in the order of the paths (so a path's extensions follow it).
pub type PathCounts = BTreeMap<Vec<FunctionId>, PathStats>;

/// Adds `call` to the calls of `path`; the path is copied only the first time it is seen.
pub fn count_call(paths: &mut PathCounts, path: &[FunctionId], call: &FinishedCall) {
    match paths.get_mut(path) {
        Some(stats) => stats.add(call),
        None => {
            let mut stats = PathStats::default();
            stats.add(call);
            paths.insert(path.to_vec(), stats);
        }
    }
}
