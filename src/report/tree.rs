//! `replay`: the call tree as it happened, uftrace-style.
//!
//! ```text
//! # DURATION   FUNCTION
//!            | main() {
//!     500 ns |   fib();
//!   3.000 us | } /* main */
//! ```
//!
//! A call with children opens a block (`fib() {`) and closes it with its duration
//! (`} /* fib */`); a call without children is one line (`fib();`). When the trace has several
//! threads, a thread id column (`[  1234]`) follows the duration; when it has several processes
//! (`--follow`), a process id column comes before it. A call whose exit was never seen is marked
//! `/* no exit */` (`fib(); /* no exit */`, `} /* fib: no exit */`); one whose return was
//! skipped (longjmp, exceptions, the kernel's uretprobe limit) has no duration and is marked
//! `/* time unknown */`. Captured values (`-A`, `-R`) show as uftrace shows them: the arguments
//! in the parentheses (`add(2, 3) = 5;`), the return value after the call or its block
//! (`} = 5; /* fib */`). A point event (a USDT probe, `-E usdt:…`) is a comment line where it
//! happened, with its arguments and no duration (`/* usdt:myapp:tick(3, 6) */`).
//!
//! With `--srcline`, a call's first line ends with where its function starts in the source, as
//! uftrace's `replay --srcline` shows it: `add(2, 3) = 5; /* test/args.c:10 */`,
//! `fib(5) { /* test/args.c:46 */`, after any mark (`fib(); /* no exit */ /* test/args.c:46 */`).
//! The closing line of a block stays `} /* fib */`. Functions whose line `record` did not find
//! (no DWARF, PLT stubs) show none.
//!
//! With the probe costs taken out, a duration below what the correction resolves for its
//! function shows as the bound the summary shows (`<90 ns |   cmp();`, see
//! [`CorrectedDuration`]).
//!
//! [`TreePrinter`] is fed call by call, so the same printer serves a data file and, later, the
//! live ring buffer, with the same output. A call is only known to be a leaf at its exit, so
//! each thread holds back at most one line: the entry it saw last. The next call of that thread
//! decides it: its own exit prints the one-line form, anything else prints the open line first.
//! Lines come in the order the calls were decided, threads interleaved; memory grows with the
//! number of threads, not with the trace.

use std::borrow::Cow;
use std::io::{self, Write};

use super::summary::{replay_note, CorrectedDuration};
use crate::fast_hash::FastHashMap;
use crate::probe_cost::Resolutions;
use crate::replay::{CallEntry, CallSink, FinishedCall, ReplayStats};
use crate::table::{FunctionId, FunctionKind, FunctionTable, SourceLine};
use crate::value::format_values;

/// Prints the call tree; a [`CallSink`] that needs entries. Write errors are kept and returned by
/// [`finish`](Self::finish), since a sink cannot return them; after one, nothing more is written.
pub struct TreePrinter<'t, W: Write> {
    /// Owned once functions are added (live mode under `--follow`).
    table: Cow<'t, FunctionTable>,
    /// `"()"` after names that have no parameter list of their own (C, Rust), `""` after
    /// demangled C++ names that already end in one.
    parens: Vec<&'static str>,
    /// The optional columns shown.
    columns: Columns,
    /// Live mode: turn the thread id column on when a second thread shows up, the process id
    /// column when a second process does.
    columns_when_needed: bool,
    /// The process of the first thread seen.
    first_pid: Option<u32>,
    out: W,
    /// The header line is written before the first call's line: a tree of no call has none.
    header_due: bool,
    /// Per thread, the entry whose line is held back, with its arguments as text.
    pending: Vec<(u32, Option<Held>)>,
    /// Show the captured values (not under `--no-args`).
    values: bool,
    /// Show each call's source line (`--srcline`).
    source_lines: bool,
    /// Below what each function's durations show as a bound: 0 for all until
    /// [`show_bounds`](Self::show_bounds).
    resolutions: Resolutions,
    /// Thread id → index into `pending`.
    index: FastHashMap<u32, usize>,
    error: Option<io::Error>,
}

/// An entry whose line is held back.
struct Held {
    entry: CallEntry<'static>,
    arguments: Option<String>,
}

/// What one line shows after the duration and the thread id.
enum Line {
    Open,
    Leaf(Ending),
    Close(Ending),
}

/// How a call ended, as its last line says.
#[derive(Clone, Copy)]
enum Ending {
    Returned,
    NoExit,
    TimeUnknown,
}

impl Ending {
    fn of(call: &FinishedCall) -> Ending {
        match (call.complete, call.time_known) {
            (true, _) => Ending::Returned,
            (false, true) => Ending::NoExit,
            (false, false) => Ending::TimeUnknown,
        }
    }

    /// What follows the name in a comment: `no exit`, `time unknown`, or nothing.
    fn mark(self) -> Option<&'static str> {
        match self {
            Ending::Returned => None,
            Ending::NoExit => Some("no exit"),
            Ending::TimeUnknown => Some("time unknown"),
        }
    }
}

impl<'t, W: Write> TreePrinter<'t, W> {
    /// A printer that writes to `out`, the header line before the first call's (nothing at all
    /// when no call comes). `columns.thread_ids` adds the thread id column: set it when the trace
    /// (as filtered) has more than one thread.
    pub fn new(table: &'t FunctionTable, columns: Columns, out: W) -> io::Result<Self> {
        let parens = table
            .functions
            .iter()
            .map(|f| parens_after(&f.name))
            .collect();
        Ok(TreePrinter {
            table: Cow::Borrowed(table),
            parens,
            columns,
            columns_when_needed: false,
            first_pid: None,
            out,
            header_due: true,
            pending: Vec::new(),
            index: FastHashMap::default(),
            values: true,
            source_lines: false,
            resolutions: Resolutions::default(),
            error: None,
        })
    }

    /// Leaves the captured values out (`--no-args`).
    pub fn hide_values(&mut self) {
        self.values = false;
    }

    /// Ends the first line of each call with its function's source line (`--srcline`).
    pub fn show_source_lines(&mut self) {
        self.source_lines = true;
    }

    /// Shows a duration below its function's resolution as a bound (probe costs taken out).
    pub fn show_bounds(&mut self, resolutions: Resolutions) {
        self.resolutions = resolutions;
    }

    /// The captured values of `function` in `bytes` as text, when they are shown.
    fn values_text(
        &self,
        function: FunctionId,
        exit: bool,
        bytes: Option<&[u8]>,
    ) -> Option<String> {
        let bytes = bytes.filter(|_| self.values)?;
        let function = self.table.function(function)?;
        let names = &function.argument_names;
        Some(format_values(&function.values, names, exit, bytes))
    }

    /// A printer for a stream whose threads are not known in advance (live mode): the thread id
    /// column comes on, under a new header line, when a second thread first calls, and the
    /// process id column when a second process does.
    /// The header comes first, at once, to show that tracing has started.
    pub fn live(table: &'t FunctionTable, columns: Columns, out: W) -> io::Result<Self> {
        let mut printer = TreePrinter::new(table, columns, out)?;
        printer.columns_when_needed = true;
        write_header(&mut printer.out, columns)?;
        printer.header_due = false;
        Ok(printer)
    }

    /// Takes in functions planned during the recording (a program a followed process exec'ed),
    /// numbered on from the table's.
    pub fn add_functions(&mut self, more: &FunctionTable) {
        self.parens
            .extend(more.functions.iter().map(|f| parens_after(&f.name)));
        self.table.to_mut().extend(more.clone());
    }

    /// Prints the held-back entries that started before `before_ns` as open blocks (`fib() {`),
    /// so a call that takes long does not hold its line back: live mode's bound on delay. Their
    /// exits then close the block, as for any call with children.
    pub fn open_entries_before(&mut self, before_ns: u64) {
        for index in 0..self.pending.len() {
            let due = self.pending[index].1.as_ref();
            if due.is_some_and(|held| held.entry.start_ns < before_ns) {
                let held = self.pending[index].1.take().expect("checked above");
                self.open_line(held);
            }
        }
    }

    /// A line of its own that says something of the trace at this point (`# note: text`), after
    /// what is printed so far (a held-back entry's line comes after it).
    pub fn note(&mut self, text: &str) -> io::Result<()> {
        writeln!(self.out, "# note: {text}")
    }

    /// Hands what was printed to the writer's destination.
    pub fn flush(&mut self) -> io::Result<()> {
        match self.error.take() {
            Some(error) => Err(error),
            None => self.out.flush(),
        }
    }

    /// Ends the tree: a note on what the replayer worked around, if anything, then the writer.
    /// Every call must have been finished (the replayer's `finish` does that).
    pub fn finish(mut self, replay: &ReplayStats) -> io::Result<W> {
        if let Some(error) = self.error.take() {
            return Err(error);
        }
        debug_assert!(self.pending.iter().all(|(_, entry)| entry.is_none()));
        // A tree of no call has no note either: the command says why there is none.
        if let Some(note) = replay_note(replay).filter(|_| !self.header_due) {
            writeln!(self.out, "\n# note: {note}")?;
        }
        Ok(self.out)
    }

    fn thread_index(&mut self, tid: u32, pid: u32) -> usize {
        let pending = &mut self.pending;
        let mut new_thread = false;
        let index = *self.index.entry(tid).or_insert_with(|| {
            new_thread = true;
            pending.push((tid, None));
            pending.len() - 1
        });
        if new_thread && self.columns_when_needed {
            let first_pid = *self.first_pid.get_or_insert(pid);
            let columns = Columns {
                thread_ids: self.columns.thread_ids || index > 0,
                process_ids: self.columns.process_ids || pid != first_pid,
                ..self.columns
            };
            if columns != self.columns {
                self.columns = columns;
                if let Err(error) = write_header(&mut self.out, columns) {
                    self.error.get_or_insert(error);
                }
            }
        }
        index
    }

    /// The line of a held-back entry that turned out to open a block.
    /// Whether `function` is a point event, shown as a comment line.
    fn is_point_event(&self, function: FunctionId) -> bool {
        self.table
            .function(function)
            .is_some_and(|f| f.kind == FunctionKind::Event)
    }

    fn open_line(&mut self, held: Held) {
        let place = Place::entry(&held.entry);
        let text = LineText {
            arguments: held.arguments,
            returned: None,
        };
        self.line(place, held.entry.function, Line::Open, text);
    }

    fn line(&mut self, place: Place, function: FunctionId, line: Line, text: LineText) {
        if self.error.is_some() {
            return;
        }
        if self.header_due {
            self.header_due = false;
            if let Err(error) = write_header(&mut self.out, self.columns) {
                self.error = Some(error);
                return;
            }
        }
        let name = self.table.name_of(function);
        let parens = self.parens.get(function as usize).copied().unwrap_or("()");
        let point_event = self.is_point_event(function);
        let source = match self.source_lines {
            true => self
                .table
                .function(function)
                .and_then(|f| f.source.as_ref()),
            false => None,
        };
        let call = CallText {
            name,
            parens,
            text,
            point_event,
            source,
        };
        let result = write_line(&mut self.out, &place, self.columns, &call, line);
        if let Err(error) = result {
            self.error = Some(error);
        }
    }
}

/// `"()"` after a name that has no parameter list of its own, `""` after one that has.
fn parens_after(name: &str) -> &'static str {
    if name.contains('(') {
        ""
    } else {
        "()"
    }
}

/// The optional columns of the tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Columns {
    /// The process id of each line.
    pub process_ids: bool,
    /// The thread id of each line (`[  1234]`).
    pub thread_ids: bool,
    /// When each line's event happened, CLOCK_MONOTONIC seconds (`1234.567890123`).
    pub timestamps: bool,
    /// The CPU each line's event happened on.
    pub cpus: bool,
}

fn write_header(out: &mut impl Write, columns: Columns) -> io::Result<()> {
    write!(out, "{:<10}", "# DURATION")?;
    if columns.timestamps {
        write!(out, " {:>20}", "TIMESTAMP")?;
    }
    if columns.process_ids {
        write!(out, " {:>6}", "PID")?;
    }
    if columns.thread_ids {
        write!(out, " {:^8}", "TID")?;
    }
    if columns.cpus {
        write!(out, " CPU")?;
    }
    writeln!(out, "   FUNCTION")
}

/// A line's captured values, as text.
struct LineText {
    arguments: Option<String>,
    returned: Option<String>,
}

/// What a line says of its function: its name, its values, and where it is in the source.
struct CallText<'a> {
    name: &'a str,
    parens: &'a str,
    text: LineText,
    /// A point event: its line is a comment.
    point_event: bool,
    /// Shown on the call's first line, under `--srcline`.
    source: Option<&'a SourceLine>,
}

impl CallText<'_> {
    /// `name(arguments)`: the name, then its arguments in parentheses, or `()` where they were
    /// not captured and the name has no parameter list of its own.
    fn write_call(&self, out: &mut impl Write) -> io::Result<()> {
        match &self.text.arguments {
            Some(arguments) => write!(out, "{}({arguments})", self.name),
            None => write!(out, "{}{}", self.name, self.parens),
        }
    }

    /// ` /* file:line */` and the end of the line, or only the end.
    fn end_first_line(&self, out: &mut impl Write) -> io::Result<()> {
        match self.source {
            Some(source) => writeln!(out, " /* {source} */"),
            None => writeln!(out),
        }
    }

    /// ` = value` where the return value was captured.
    fn write_returned(&self, out: &mut impl Write) -> io::Result<()> {
        match &self.text.returned {
            Some(value) => write!(out, " = {value}"),
            None => Ok(()),
        }
    }
}

/// What a line shows before the function: its columns and its indentation.
struct Place {
    /// Empty on lines that open a block.
    duration: Option<CorrectedDuration>,
    timestamp_ns: u64,
    pid: u32,
    tid: u32,
    cpu: u32,
    depth: u32,
}

impl Place {
    /// The line of an entry that opens a block.
    fn entry(entry: &CallEntry) -> Place {
        Place {
            duration: None,
            timestamp_ns: entry.start_ns,
            pid: entry.pid,
            tid: entry.tid,
            cpu: entry.cpu,
            depth: entry.depth,
        }
    }
}

fn write_line(
    out: &mut impl Write,
    place: &Place,
    columns: Columns,
    call: &CallText,
    line: Line,
) -> io::Result<()> {
    let Place {
        duration,
        timestamp_ns,
        pid,
        tid,
        cpu,
        depth,
    } = *place;
    match duration {
        Some(duration) => write!(out, "{duration:>10}")?,
        None => write!(out, "{:10}", "")?,
    }
    if columns.timestamps {
        let (seconds, nanoseconds) = (timestamp_ns / 1_000_000_000, timestamp_ns % 1_000_000_000);
        write!(out, " {seconds:>10}.{nanoseconds:09}")?;
    }
    if columns.process_ids {
        write!(out, " {pid:>6}")?;
    }
    if columns.thread_ids {
        write!(out, " [{tid:>6}]")?;
    }
    if columns.cpus {
        write!(out, " {cpu:>3}")?;
    }
    write!(out, " | {:indent$}", "", indent = 2 * depth as usize)?;
    let name = call.name;
    match line {
        Line::Open => {
            call.write_call(out)?;
            write!(out, " {{")?;
            call.end_first_line(out)
        }
        Line::Leaf(_) if call.point_event => {
            write!(out, "/* ")?;
            call.write_call(out)?;
            writeln!(out, " */")
        }
        Line::Leaf(ending) => {
            call.write_call(out)?;
            call.write_returned(out)?;
            match ending.mark() {
                None => write!(out, ";")?,
                Some(mark) => write!(out, "; /* {mark} */")?,
            }
            call.end_first_line(out)
        }
        Line::Close(ending) => {
            write!(out, "}}")?;
            if call.text.returned.is_some() {
                call.write_returned(out)?;
                write!(out, ";")?;
            }
            match ending.mark() {
                None => writeln!(out, " /* {name} */"),
                Some(mark) => writeln!(out, " /* {name}: {mark} */"),
            }
        }
    }
}

impl<W: Write> CallSink for TreePrinter<'_, W> {
    fn call_entered(&mut self, entry: &CallEntry, _stack: &[FunctionId]) {
        let index = self.thread_index(entry.tid, entry.pid);
        let held = Held {
            entry: CallEntry {
                arguments: None,
                ..*entry
            },
            arguments: self.values_text(entry.function, false, entry.arguments),
        };
        // The held-back entry has a child after all: it opens a block.
        if let Some(open) = self.pending[index].1.replace(held) {
            self.open_line(open);
        }
    }

    fn call_finished(&mut self, call: &FinishedCall, _stack: &[FunctionId]) {
        let index = self.thread_index(call.tid, call.pid);
        // Calls end innermost first, so a held-back entry on this thread is this very call.
        let ending = Ending::of(call);
        let (line, arguments) = match self.pending[index].1.take() {
            Some(held) => (Line::Leaf(ending), held.arguments),
            None => (Line::Close(ending), None),
        };
        let returned = call.values.returned.as_deref();
        let text = LineText {
            arguments,
            returned: self.values_text(call.function, true, returned),
        };
        // A leaf's line stands for its call, a closing line for its exit.
        let timestamp_ns = match line {
            Line::Leaf { .. } => call.start_ns,
            _ => call.end_ns,
        };
        // A point event takes no time of its own.
        let point_event = self.is_point_event(call.function);
        let duration = CorrectedDuration::of_call(call, self.resolutions.of(call.function));
        let place = Place {
            duration: (call.time_known && !point_event).then_some(duration),
            timestamp_ns,
            pid: call.pid,
            tid: call.tid,
            cpu: call.cpu,
            depth: call.depth,
        };
        self.line(place, call.function, line, text);
    }
}
