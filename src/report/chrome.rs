//! `chrome`: the Chrome trace-event format, for Perfetto (ui.perfetto.dev) and
//! `chrome://tracing`.
//!
//! ```json
//! {"traceEvents":[
//! {"ph":"M","pid":42,"tid":42,"name":"process_name","args":{"name":"./sort 5000"}},
//! {"ph":"M","pid":42,"tid":42,"name":"thread_name","args":{"name":"thread 42"}},
//! {"ph":"B","pid":42,"tid":42,"ts":0.120,"name":"main","cat":"function"},
//! {"ph":"E","pid":42,"tid":42,"ts":2.500,"name":"main","cat":"function"}
//! ],
//! "displayTimeUnit":"ns",
//! "metadata":{"command":"./sort 5000","pid":42,...}}
//! ```
//!
//! One `B` event per call entry and one `E` per exit, one event per line, written as the calls
//! come, so the trace is never held in memory. `ts` is in µs since the start of the recording,
//! written with all three decimals so no nanosecond is lost. A thread gets its `thread_name` event
//! before its first call. Calls whose exit was never seen get their `E` when the replayer closes
//! them at the end of the trace, so `B` and `E` balance on every thread. A call whose time is
//! unknown (its return was skipped) ends at the latest event of its thread written so far, which
//! keeps the nesting, with `"args":{"time":"unknown"}`. Captured values (`-A`, `-R`) are the
//! `args` of the `B` event (`{"arg1":"2","arg2":"3"}`) and of the `E` event (`{"retval":"5"}`),
//! as text as the call tree shows them. Under `report --srcline`, a `B` event's `args` also give
//! where its function starts in the source (`"srcline":"test/args.c:10"`), when `record
//! --srcline` found it.

use std::io::{self, Write};

use super::TraceInfo;
use crate::fast_hash::FastHashMap;
use crate::replay::{CallEntry, CallSink, FinishedCall, ReplayStats};
use crate::table::{FunctionId, FunctionTable};
use crate::value::{value_name, value_texts, ValueSpec};

/// Streams a Chrome trace; a [`CallSink`] that needs entries. Write errors are kept and returned
/// by [`finish`](Self::finish); after one, nothing more is written.
pub struct ChromeTrace<W: Write> {
    out: W,
    pid: u32,
    /// CLOCK_MONOTONIC at the start of the recording: `ts` 0.
    start_ns: u64,
    /// Each function's name as a JSON string, quotes included, escaped once here rather than on
    /// every event.
    names: Vec<String>,
    /// Each function's captured values; all empty under `--no-args`.
    values: Vec<Vec<ValueSpec>>,
    /// Each function's argument names, by argument number, where known (kernel functions').
    argument_names: Vec<Vec<String>>,
    /// Each function's `"srcline":"file:line"` field, ready to write; all `None` unless
    /// [`show_source_lines`](Self::show_source_lines) was called.
    source_lines: Vec<Option<String>>,
    /// Threads that have had their `thread_name` event, with the latest `ts` (ns) written on each
    /// as of when another thread's event came.
    named_threads: FastHashMap<u32, u64>,
    /// The thread of the previous event, named, and the latest `ts` written on it: spares a
    /// lookup per event.
    current: Option<(u32, u64)>,
    error: Option<io::Error>,
}

impl<W: Write> ChromeTrace<W> {
    /// Starts the trace on `out`: the opening and the process name. `info` needs the metadata
    /// only (command, pid, start).
    pub fn new(table: &FunctionTable, info: &TraceInfo, mut out: W) -> io::Result<Self> {
        let names = table
            .functions
            .iter()
            .map(|f| json_string(&f.name))
            .collect();
        write!(
            out,
            "{{\"traceEvents\":[\n{{\"ph\":\"M\",\"pid\":{pid},\"tid\":{pid},\"name\":\"process_name\",\"args\":{{\"name\":{command}}}}}",
            pid = info.pid,
            command = json_string(&info.command),
        )?;
        Ok(ChromeTrace {
            out,
            pid: info.pid,
            start_ns: info.start_monotonic_ns,
            names,
            values: table.functions.iter().map(|f| f.values.clone()).collect(),
            argument_names: table
                .functions
                .iter()
                .map(|f| f.argument_names.clone())
                .collect(),
            source_lines: vec![None; table.functions.len()],
            named_threads: FastHashMap::default(),
            current: None,
            error: None,
        })
    }

    /// Leaves the captured values out (`--no-args`).
    pub fn hide_values(&mut self) {
        self.values.iter_mut().for_each(Vec::clear);
    }

    /// Gives each `B` event its function's source line (`--srcline`).
    pub fn show_source_lines(&mut self, table: &FunctionTable) {
        self.source_lines = table
            .functions
            .iter()
            .map(|f| {
                let line = f.source.as_ref()?.to_string();
                Some(format!("\"srcline\":{}", json_string(&line)))
            })
            .collect();
    }

    /// The `args` of an event of `function` with captured `bytes` (and, on an entry, its source
    /// line): `,"args":{...}`, or nothing.
    fn event_args(&self, function: FunctionId, exit: bool, bytes: Option<&[u8]>) -> String {
        let source_line = match exit {
            false => self.source_lines.get(function as usize).cloned().flatten(),
            true => None,
        };
        let values = match (bytes, self.values.get(function as usize)) {
            (Some(bytes), Some(specs)) => value_texts(specs, exit, bytes),
            _ => Vec::new(),
        };
        let fields: Vec<String> = source_line
            .into_iter()
            .chain(values.into_iter().map(|(spec, text)| {
                let names = self.argument_names.get(function as usize);
                let name = value_name(spec, names.map_or(&[], Vec::as_slice));
                format!("\"{name}\":{}", json_string(&text))
            }))
            .collect();
        match fields.is_empty() {
            true => String::new(),
            false => format!(",\"args\":{{{}}}", fields.join(",")),
        }
    }

    /// Ends the trace with its metadata (`info` as read to the end of the file) and returns the
    /// writer. Every call must have been finished (the replayer's `finish` does that).
    pub fn finish(mut self, info: &TraceInfo, replay: &ReplayStats) -> io::Result<W> {
        if let Some(error) = self.error.take() {
            return Err(error);
        }
        // Only a damaged data file has the field.
        let damaged = match info.damaged_chunks {
            0 => String::new(),
            chunks => format!(",\"damaged_chunks\":{chunks}"),
        };
        writeln!(
            self.out,
            "\n],\n\"displayTimeUnit\":\"ns\",\n\"metadata\":{{\"command\":{},\"pid\":{},\"duration_ns\":{},\"events\":{},\"lost_events\":{}{damaged},\"unfinished_calls\":{},\"unknown_time_calls\":{},\"unmatched_exits\":{}}}}}",
            json_string(&info.command),
            info.pid,
            info.duration_ns,
            info.events,
            info.lost_events,
            replay.unfinished_calls,
            replay.unknown_time_calls,
            replay.unmatched_exits,
        )?;
        Ok(self.out)
    }

    /// One event of thread `tid` of process `pid` (0 when the trace does not say: the traced
    /// process's); `ts_ns` `None` for the end of a call whose time is unknown.
    fn event(
        &mut self,
        phase: char,
        (pid, tid): (u32, u32),
        ts_ns: Option<u64>,
        function: FunctionId,
        values: &str,
    ) {
        if self.error.is_some() {
            return;
        }
        let pid = if pid == 0 { self.pid } else { pid };
        let result = self.write_event(phase, (pid, tid), ts_ns, function, values);
        if let Err(error) = result {
            self.error = Some(error);
        }
    }

    fn write_event(
        &mut self,
        phase: char,
        (pid, tid): (u32, u32),
        ts_ns: Option<u64>,
        function: FunctionId,
        values: &str,
    ) -> io::Result<()> {
        let latest_ns = match self.current {
            Some((current, latest_ns)) if current == tid => latest_ns,
            _ => {
                if let Some((previous, latest_ns)) = self.current {
                    self.named_threads.insert(previous, latest_ns);
                }
                match self.named_threads.get(&tid) {
                    Some(&latest_ns) => latest_ns,
                    None => {
                        write!(
                            self.out,
                            ",\n{{\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"name\":\"thread_name\",\"args\":{{\"name\":\"thread {tid}\"}}}}"
                        )?;
                        0
                    }
                }
            }
        };
        let (ts_ns, args) = match ts_ns {
            Some(ts_ns) => (ts_ns, values),
            None => (latest_ns, ",\"args\":{\"time\":\"unknown\"}"),
        };
        self.current = Some((tid, latest_ns.max(ts_ns)));
        let ts = ts_ns.saturating_sub(self.start_ns);
        let name = self
            .names
            .get(function as usize)
            .map_or("\"?\"", String::as_str);
        write!(
            self.out,
            ",\n{{\"ph\":\"{phase}\",\"pid\":{pid},\"tid\":{tid},\"ts\":{}.{:03},\"name\":{name},\"cat\":\"function\"{args}}}",
            ts / 1_000,
            ts % 1_000,
        )
    }
}

/// `text` as a JSON string literal, quotes included.
fn json_string(text: &str) -> String {
    serde_json::to_string(text).expect("a string always serializes")
}

impl<W: Write> CallSink for ChromeTrace<W> {
    fn call_entered(&mut self, entry: &CallEntry, _stack: &[FunctionId]) {
        let values = self.event_args(entry.function, false, entry.arguments);
        self.event(
            'B',
            (entry.pid, entry.tid),
            Some(entry.start_ns),
            entry.function,
            &values,
        );
    }

    fn call_finished(&mut self, call: &FinishedCall, _stack: &[FunctionId]) {
        // A timeline: where the exit happened, probe costs and all.
        let end_ns = call.time_known.then_some(call.end_ns);
        let values = self.event_args(call.function, true, call.values.returned.as_deref());
        self.event('E', (call.pid, call.tid), end_ns, call.function, &values);
    }
}
