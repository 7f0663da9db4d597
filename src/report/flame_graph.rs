//! `flame-graph`: folded stacks, the text that `flamegraph.pl` and inferno read. One line per
//! distinct call path, `main;sort;cmp 1234`, weighted by the self time in ns spent in the
//! innermost function on that path, so the weights of all lines add up to the traced time; or,
//! with [`Weight::Calls`], by the number of calls of that path, so they add up to the calls.
//!
//! - Frames are the function names of the table, kernel functions marked `_[k]` as
//!   flamegraph.pl marks them. A `;` inside a name (which would split the
//!   frame) becomes `:`, and a line break becomes a space, so each line stays parseable; spaces
//!   are kept, since the weight is read after the last one.
//! - Paths with a weight of 0 are left out.
//! - Lines are sorted by their stack text, so the output is the same for the same trace;
//!   distinct paths that read the same (two functions of one name in different modules) are
//!   merged into one line.
//! - When the trace holds more than one process (`--follow`), each path starts with a frame for
//!   its process, named after the file of the path's outermost function: `prog [pid 123]`.

use std::borrow::Cow;
use std::io::{self, Write};
use std::str::FromStr;

use thiserror::Error;

use crate::fast_hash::FastHashMap;
use crate::replay::{CallSink, FinishedCall};
use crate::table::{FunctionId, FunctionKind, FunctionTable};
use crate::user_stack::KERNEL_FRAME_SUFFIX;

/// What a call adds to its path (`--weight`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Weight {
    /// Its self time in ns: where the time went.
    #[default]
    Time,
    /// 1: where the calls are made.
    Calls,
}

impl Weight {
    pub const ALL: [Weight; 2] = [Weight::Time, Weight::Calls];

    /// The name `--weight` takes.
    pub fn name(self) -> &'static str {
        match self {
            Weight::Time => "time",
            Weight::Calls => "calls",
        }
    }

    /// What the weights count, as an SVG flame graph names it.
    pub fn unit(self) -> &'static str {
        match self {
            Weight::Time => "ns",
            Weight::Calls => "calls",
        }
    }
}

/// A `--weight` value that is not one of [`Weight::ALL`].
#[derive(Debug, Error, PartialEq, Eq)]
#[error("unknown weight `{0}`: use time or calls")]
pub struct UnknownWeight(pub String);

impl FromStr for Weight {
    type Err = UnknownWeight;

    fn from_str(name: &str) -> Result<Weight, UnknownWeight> {
        Weight::ALL
            .into_iter()
            .find(|weight| weight.name() == name)
            .ok_or_else(|| UnknownWeight(name.to_owned()))
    }
}

/// A weight per call path and process; a [`CallSink`]. Memory grows with the number of distinct
/// paths, and a path is copied only the first time it is seen.
#[derive(Clone, Debug, Default)]
pub struct FoldedStacks {
    weight: Weight,
    /// Per process, the weight of each path.
    processes: FastHashMap<u32, FastHashMap<Vec<FunctionId>, u64>>,
}

impl FoldedStacks {
    pub fn new(weight: Weight) -> FoldedStacks {
        FoldedStacks {
            weight,
            processes: FastHashMap::default(),
        }
    }

    /// The weight of one path (outermost first) over every process, 0 if never seen.
    pub fn weight(&self, stack: &[FunctionId]) -> u64 {
        self.processes
            .values()
            .filter_map(|weights| weights.get(stack))
            .sum()
    }

    /// The folded lines, without line ends, sorted.
    pub fn lines(&self, table: &FunctionTable) -> Vec<String> {
        let several = self.processes.len() > 1;
        let mut stacks: Vec<(String, u64)> = self
            .processes
            .iter()
            .flat_map(|(&pid, weights)| {
                weights.iter().map(move |(stack, &weight)| {
                    let mut text = String::new();
                    if several {
                        text = process_frame(table, pid, stack);
                    }
                    push_stack_text(&mut text, table, stack);
                    (text, weight)
                })
            })
            .collect();
        stacks.sort_unstable();
        let mut lines: Vec<String> = Vec::with_capacity(stacks.len());
        let mut previous: Option<(String, u64)> = None;
        for (text, weight) in stacks {
            previous = match previous {
                Some((last, sum)) if last == text => Some((last, sum.saturating_add(weight))),
                Some((last, sum)) => {
                    lines.push(format!("{last} {sum}"));
                    Some((text, weight))
                }
                None => Some((text, weight)),
            };
        }
        if let Some((last, sum)) = previous {
            lines.push(format!("{last} {sum}"));
        }
        lines
    }

    /// Writes [`FoldedStacks::lines`], one per line.
    pub fn write_folded(&self, table: &FunctionTable, out: &mut dyn Write) -> io::Result<()> {
        for line in self.lines(table) {
            writeln!(out, "{line}")?;
        }
        Ok(())
    }
}

impl CallSink for FoldedStacks {
    fn call_finished(&mut self, call: &FinishedCall, stack: &[FunctionId]) {
        let add = match self.weight {
            Weight::Time => call.self_ns,
            Weight::Calls => 1,
        };
        if add == 0 {
            return;
        }
        let weights = self.processes.entry(call.pid).or_default();
        match weights.get_mut(stack) {
            Some(weight) => *weight = weight.saturating_add(add),
            None => {
                weights.insert(stack.to_vec(), add);
            }
        }
    }
}

/// The root frame of a path of process `pid`: `prog [pid 123];`, after the file of the path's
/// outermost function (a process that exec'ed has paths in both programs).
pub(crate) fn process_frame(table: &FunctionTable, pid: u32, stack: &[FunctionId]) -> String {
    let program = stack
        .first()
        .and_then(|&id| table.functions.get(id as usize))
        .map_or("?", |function| table.module_name(function));
    format!("{} [pid {pid}];", frame_name(program))
}

fn push_stack_text(text: &mut String, table: &FunctionTable, stack: &[FunctionId]) {
    for (i, &id) in stack.iter().enumerate() {
        if i > 0 {
            text.push(';');
        }
        let name = table.name_of(id);
        text.push_str(&frame_name(name));
        // Kernel frames as flamegraph.pl marks them, which colours them apart.
        if table
            .function(id)
            .is_some_and(|f| f.kind == FunctionKind::Kernel)
        {
            text.push_str(KERNEL_FRAME_SUFFIX);
        }
    }
}

/// A function name as a folded-stack frame: `;` becomes `:`, line breaks become spaces.
pub fn frame_name(name: &str) -> Cow<'_, str> {
    if name.contains([';', '\n', '\r']) {
        Cow::Owned(
            name.chars()
                .map(|c| match c {
                    ';' => ':',
                    '\n' | '\r' => ' ',
                    c => c,
                })
                .collect(),
        )
    } else {
        Cow::Borrowed(name)
    }
}
