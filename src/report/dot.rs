//! `dot`: the call graph in graphviz's language, for `dot -Tsvg`. One node per function that was
//! called (its name, calls, total and self time, as the summary counts them), one edge per
//! caller→callee pair with the number of calls it carried, and a heat map: each node is filled
//! from cold blue (no total time) to hot red (the largest total), and its edges take the
//! callee's colour.
//!
//! The filters apply as in every report: a hidden function's calls are edges of its nearest shown
//! caller. With more than one process (`--follow`), each process is a cluster of its own, its
//! nodes named `p<pid>_f<id>`; otherwise nodes are `f<id>`.

use std::fmt::Write as _;
use std::io::{self, Write};

use super::summary::{GroupedSummaries, Grouping, HumanDuration, Summary};
use crate::fast_hash::FastHashMap;
use crate::replay::{CallSink, FinishedCall};
use crate::table::{FunctionId, FunctionKind, FunctionTable};

/// The call graph: the summary per process and the calls per edge; a [`CallSink`]. Memory grows
/// with processes × functions and with the distinct caller→callee pairs.
pub struct CallGraph {
    nodes: GroupedSummaries,
    /// (process, caller, callee) → calls.
    edges: FastHashMap<(u32, FunctionId, FunctionId), u64>,
}

impl CallGraph {
    pub fn new(function_count: usize) -> CallGraph {
        CallGraph {
            nodes: GroupedSummaries::new(Grouping::Process, function_count),
            edges: FastHashMap::default(),
        }
    }

    /// The calls from `caller` to `callee` in process `pid`.
    pub fn edge_calls(&self, pid: u32, caller: FunctionId, callee: FunctionId) -> u64 {
        self.edges.get(&(pid, caller, callee)).copied().unwrap_or(0)
    }

    /// Writes the graph named after `command`.
    pub fn write_dot(
        &self,
        table: &FunctionTable,
        command: &str,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        let processes = self.nodes.sorted();
        let by_pid: FastHashMap<u32, &Summary> = processes
            .iter()
            .map(|(group, summary)| (group.pid, summary))
            .collect();
        let several = processes.len() > 1;
        let hottest = processes
            .iter()
            .flat_map(|(_, summary)| summary.rows(table, Default::default()))
            .map(|row| row.stats.total_ns)
            .max()
            .unwrap_or(0);
        writeln!(out, "digraph {} {{", quoted(&format!("utrace: {command}")))?;
        writeln!(out, "  rankdir=TB;")?;
        writeln!(
            out,
            "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];"
        )?;
        writeln!(out, "  edge [fontname=\"Helvetica\", fontsize=9];")?;
        for (group, summary) in &processes {
            let pid = group.pid;
            let indent = if several { "    " } else { "  " };
            if several {
                writeln!(out, "  subgraph cluster_{pid} {{")?;
                writeln!(out, "    label=\"pid {pid}\";")?;
            }
            for row in summary.rows(table, Default::default()) {
                let s = row.stats;
                let mut label = format!(
                    "{}\ncalls {}\ntotal {}\nself {}",
                    row.function.name,
                    s.calls,
                    HumanDuration(s.total_ns),
                    HumanDuration(s.self_ns)
                );
                if s.unknown_time > 0 {
                    let _ = write!(label, "\n{} of unknown time", s.unknown_time);
                }
                writeln!(
                    out,
                    "{indent}{} [label={}, fillcolor=\"{}\"{}];",
                    node_name(several, pid, row.id),
                    quoted(&label),
                    heat(s.total_ns, hottest),
                    node_shape(row.function.kind),
                )?;
            }
            if several {
                writeln!(out, "  }}")?;
            }
        }
        let mut edges: Vec<(&(u32, FunctionId, FunctionId), &u64)> = self.edges.iter().collect();
        edges.sort_unstable();
        for (&(pid, caller, callee), &calls) in edges {
            let callee_total = by_pid
                .get(&pid)
                .and_then(|summary| summary.stats(callee))
                .map_or(0, |stats| stats.total_ns);
            // A user function's call into the kernel (a system call, time off the CPU).
            let kind = |id| table.function(id).map(|f| f.kind);
            let into_kernel = kind(callee) == Some(FunctionKind::Kernel)
                && kind(caller) != Some(FunctionKind::Kernel);
            writeln!(
                out,
                "  {} -> {} [label=\"{calls}\", color=\"{}\"{}];",
                node_name(several, pid, caller),
                node_name(several, pid, callee),
                heat(callee_total, hottest),
                if into_kernel { ", style=dashed" } else { "" },
            )?;
        }
        writeln!(out, "}}")
    }
}

impl CallSink for CallGraph {
    fn call_finished(&mut self, call: &FinishedCall, stack: &[FunctionId]) {
        self.nodes.call_finished(call, stack);
        if let [.., caller, callee] = stack {
            *self.edges.entry((call.pid, *caller, *callee)).or_default() += 1;
        }
    }
}

fn node_name(several: bool, pid: u32, id: FunctionId) -> String {
    if several {
        format!("p{pid}_f{id}")
    } else {
        format!("f{id}")
    }
}

/// A colour from cold blue (0) to hot red (`hottest`), as graphviz's "H S V" text.
fn heat(total_ns: u64, hottest: u64) -> String {
    let share = if hottest == 0 {
        0.0
    } else {
        total_ns as f64 / hottest as f64
    };
    // Hue 0.667 is blue, 0 is red; the saturation keeps the labels readable.
    format!("{:.3} 0.550 1.000", 0.667 * (1.0 - share))
}

/// The shape of a node that is no user function: kernel pseudo-functions (`sys_write`,
/// `linux:schedule`) are hexagons, USDT probes notes, utrace's own time a dashed box; user
/// functions keep the default box.
fn node_shape(kind: FunctionKind) -> &'static str {
    match kind {
        // Never a call: no node.
        FunctionKind::Kernel | FunctionKind::Preemption => ", shape=hexagon",
        FunctionKind::Event => ", shape=note",
        FunctionKind::Tracer => ", style=dashed",
        FunctionKind::Function | FunctionKind::Plt | FunctionKind::Got => "",
    }
}

/// `text` as a graphviz quoted string: `"` and `\` escaped, line breaks as `\n`.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_quotes_names_and_grades_the_heat() {
        assert_eq!(quoted("a \"b\"\\c\nd"), "\"a \\\"b\\\"\\\\c\\nd\"");
        assert_eq!(heat(0, 100), "0.667 0.550 1.000");
        assert_eq!(heat(100, 100), "0.000 0.550 1.000");
        assert_eq!(heat(0, 0), "0.667 0.550 1.000");
    }
}
