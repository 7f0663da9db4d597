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
//! - For functions recorded with `record --stack`, the user stacks unwound at their entries
//!   follow their paths, under their own heading: the frames the replayer cannot know (callers
//!   that were not traced), outermost first, counted per distinct stack; a frame that could not
//!   be named shows as `[module+0xoff]` or `[unknown]`, and calls whose stack was lost are
//!   counted apart. `--folded` gives them as lines under a `[user stack]` root frame.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::Arc;

use super::flame_graph::{frame_name, process_frame};
use super::summary::HumanDuration;
use super::Format;
use crate::diagnostics::plural;
use crate::fast_hash::FastHashMap;
use crate::filter::FilterSpec;
use crate::replay::{CallSink, FinishedCall};
use crate::table::{FunctionId, FunctionTable};
use crate::user_stack::{stack_of, StackRef, UserStacks};

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
    /// The user stacks unwound at record time, when the file has them.
    unwound: Option<UnwoundStacks>,
}

/// The user stacks of a recording (`record --stack`) and the calls of shown functions per
/// stack.
struct UnwoundStacks {
    stacks: Arc<UserStacks>,
    /// Per process and function, per stack, its calls.
    calls: FastHashMap<(u32, FunctionId), FastHashMap<StackRef, u64>>,
}

/// One unwound stack as shown: its frames outermost first, or why there is none (0: its id is
/// not in the stack table; else the kernel's error).
type UnwoundRow = (Result<Vec<String>, i32>, u64);

/// The root frame of unwound stacks in folded output, apart from the replayer's paths.
const USER_STACK_ROOT: &str = "[user stack]";

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
            unwound: None,
        }
    }

    /// Counts the calls of shown functions per user stack unwound at record time too.
    pub fn add_user_stacks(&mut self, stacks: Arc<UserStacks>) {
        self.unwound = Some(UnwoundStacks {
            stacks,
            calls: FastHashMap::default(),
        });
    }

    /// The user stacks unwound at the calls of `function` in process `pid` with their calls,
    /// most first.
    fn unwound_stacks(&self, pid: u32, function: FunctionId) -> Vec<UnwoundRow> {
        let Some(unwound) = &self.unwound else {
            return Vec::new();
        };
        let Some(calls) = unwound.calls.get(&(pid, function)) else {
            return Vec::new();
        };
        let mut rows: Vec<UnwoundRow> = calls
            .iter()
            .map(|(stack, &calls)| {
                let frames = match *stack {
                    StackRef::Id(id) => match unwound.stacks.stack(id) {
                        Some(stack) => Ok(stack.frames.iter().rev().map(|f| f.name()).collect()),
                        None => Err(0),
                    },
                    StackRef::Lost(error) => Err(error),
                };
                (frames, calls)
            })
            .collect();
        rows.sort_by(|(a, a_calls), (b, b_calls)| b_calls.cmp(a_calls).then_with(|| a.cmp(b)));
        rows
    }

    /// Writes the unwound stacks of `function` in process `pid`, if it has any.
    fn write_unwound(&self, pid: u32, function: FunctionId, out: &mut dyn Write) -> io::Result<()> {
        let rows = self.unwound_stacks(pid, function);
        if rows.is_empty() {
            return Ok(());
        }
        let distinct = rows.iter().filter(|(frames, _)| frames.is_ok()).count();
        writeln!(
            out,
            "  Unwound user stacks (record --stack): {}",
            plural(distinct as u64, "stack", "stacks")
        )?;
        writeln!(out, "  {:>10}  Stack", "Calls")?;
        for (frames, calls) in rows {
            match frames {
                Ok(frames) => writeln!(out, "  {calls:>10}  {}", frames.join(" → "))?,
                Err(0) => writeln!(out, "  {calls:>10}  (stack not in the file)")?,
                Err(error) => writeln!(out, "  {calls:>10}  (stack lost: error {error})")?,
            }
        }
        Ok(())
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
            self.write_unwound(pid, function, out)?;
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
        if let Some(unwound) = &self.unwound {
            for &(pid, function) in unwound.calls.keys() {
                for (frames, calls) in self.unwound_stacks(pid, function) {
                    let Ok(frames) = frames else { continue };
                    let mut text = if several {
                        process_frame(table, pid, &[function])
                    } else {
                        String::new()
                    };
                    text.push_str(USER_STACK_ROOT);
                    for frame in frames {
                        text.push(';');
                        text.push_str(&frame_name(&frame));
                    }
                    lines.push((text, calls));
                }
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
        if let Some(unwound) = &mut self.unwound {
            unwound.count(call);
        }
    }
}

impl UnwoundStacks {
    /// Counts `call` under the stack its entry carries, if its function captured one.
    fn count(&mut self, call: &FinishedCall) {
        if !self.stacks.captured_by(call.function) {
            return;
        }
        let Some(stack) = call.values.arguments.as_deref().and_then(stack_of) else {
            return;
        };
        let calls = self.calls.entry((call.pid, call.function)).or_default();
        *calls.entry(stack).or_default() += 1;
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
