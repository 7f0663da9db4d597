//! `graph`: uftrace's text call graph. For each function `-f` shows, the tree of everything it
//! called, merged over all its calls: each node is a call path below the function, with its
//! calls and total time.
//!
//! ```text
//! # Function call graph for 'b' (pid 4242)
//! # TOTAL TIME   FUNCTION
//!    25.249 us : (20) b
//!    16.170 us :  +-(20) c
//!     7.424 us :    +-(20) target
//! ```
//!
//! - `-f` chooses the roots; their callees are every traced function (`--no-function` still
//!   hides frames, `--max-depth`, `--time-filter` and `--tid-filter` still hide calls). Without
//!   `-f`, every function that was called is a root, as in `stacks`, which asks for `-f` on a
//!   large table.
//! - A recursive root is merged at its outermost call: its inner calls are nodes of its tree.
//! - Children are sorted by total time, largest first, then by name.
//! - Calls of unknown time count as calls and add no time; a node with some says how many.
//! - With more than one process (`--follow`), each process has its own graphs.

use std::io::{self, Write};

use super::stacks::{count_call, PathCounts, PathStats};
use super::summary::HumanDuration;
use crate::fast_hash::FastHashMap;
use crate::filter::FilterSpec;
use crate::replay::{CallSink, FinishedCall};
use crate::table::{FunctionId, FunctionTable};

/// The callee trees of the shown functions, per process; a [`CallSink`]. Memory grows with the
/// distinct call paths below the shown functions.
pub struct CalleeGraphs {
    shown: Vec<bool>,
    /// Per process, per path from a shown function (first) down to a call, its calls.
    processes: FastHashMap<u32, PathCounts>,
    /// The calls of shown functions (a recursive one counted once, at its outermost call).
    shown_calls: u64,
}

impl CalleeGraphs {
    /// Graphs of the functions `filter`'s `-f`/`--no-function` show.
    pub fn new(filter: &FilterSpec, table: &FunctionTable) -> CalleeGraphs {
        CalleeGraphs {
            shown: filter.function_mask(table),
            processes: FastHashMap::default(),
            shown_calls: 0,
        }
    }

    /// The calls of the functions shown: with none, the report is empty.
    pub fn shown_calls(&self) -> u64 {
        self.shown_calls
    }

    /// Writes one graph per process and shown function, roots by total time, largest first.
    pub fn write_text(&self, table: &FunctionTable, out: &mut dyn Write) -> io::Result<()> {
        let mut pids: Vec<u32> = self.processes.keys().copied().collect();
        pids.sort_unstable();
        let mut first = true;
        for pid in pids {
            let paths = &self.processes[&pid];
            let mut roots: Vec<(&[FunctionId], PathStats)> = paths
                .iter()
                .filter(|(path, _)| path.len() == 1)
                .map(|(path, stats)| (path.as_slice(), *stats))
                .collect();
            sort_nodes(&mut roots, table);
            for (root, stats) in roots {
                if !first {
                    writeln!(out)?;
                }
                first = false;
                writeln!(
                    out,
                    "# Function call graph for '{}' (pid {pid})",
                    table.name_of(root[0])
                )?;
                writeln!(out, "# TOTAL TIME   FUNCTION")?;
                write_node(out, table, paths, root, stats, "", "")?;
            }
        }
        Ok(())
    }
}

/// Sorts nodes by total time, largest first, then by the name of their function.
fn sort_nodes(nodes: &mut [(&[FunctionId], PathStats)], table: &FunctionTable) {
    nodes.sort_by(|(a_path, a), (b_path, b)| {
        b.total_ns.cmp(&a.total_ns).then_with(|| {
            let name = |path: &[FunctionId]| table.name_of(*path.last().expect("not empty"));
            name(a_path).cmp(name(b_path))
        })
    });
}

/// Writes the node at `path` (its line starts with `lead`), then its children below it
/// (their lines start with `indent`).
fn write_node(
    out: &mut dyn Write,
    table: &FunctionTable,
    paths: &PathCounts,
    path: &[FunctionId],
    stats: PathStats,
    lead: &str,
    indent: &str,
) -> io::Result<()> {
    let function = table.name_of(*path.last().expect("not empty"));
    write!(
        out,
        "{:>12} : {lead}({}) {function}",
        HumanDuration(stats.total_ns),
        stats.calls
    )?;
    if stats.unknown_time > 0 {
        write!(out, "  ({} of unknown time)", stats.unknown_time)?;
    }
    writeln!(out)?;
    let mut children: Vec<(&[FunctionId], PathStats)> = paths
        .range(path.to_vec()..)
        .take_while(|(child, _)| child.starts_with(path))
        .filter(|(child, _)| child.len() == path.len() + 1)
        .map(|(child, stats)| (child.as_slice(), *stats))
        .collect();
    sort_nodes(&mut children, table);
    let last = children.len().saturating_sub(1);
    for (i, (child, stats)) in children.into_iter().enumerate() {
        let below = if i == last { "  " } else { "| " };
        write_node(
            out,
            table,
            paths,
            child,
            stats,
            &format!("{indent} +-"),
            &format!("{indent} {below}"),
        )?;
    }
    Ok(())
}

impl CallSink for CalleeGraphs {
    fn call_finished(&mut self, call: &FinishedCall, stack: &[FunctionId]) {
        let paths = self.processes.entry(call.pid).or_default();
        for (i, &function) in stack.iter().enumerate() {
            let shown = self.shown.get(function as usize).copied().unwrap_or(false);
            // A recursive function's tree starts at its outermost call.
            if !shown || stack[..i].contains(&function) {
                continue;
            }
            if i + 1 == stack.len() {
                self.shown_calls += 1;
            }
            count_call(paths, &stack[i..], call);
        }
    }
}
