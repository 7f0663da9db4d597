//! [`FilteredSink`]: the filters as a layer between the replayer and a report. Each report stays
//! unaware of filtering: it sees the calls of a trace in which only the shown functions were
//! traced.

use super::FilterSpec;
use crate::event::Event;
use crate::fast_hash::FastHashMap;
use crate::replay::{CallEntry, CallSink, FinishedCall};
use crate::table::{FunctionId, FunctionTable};

/// Passes the shown calls to `inner`, with depths, paths and self times as if the hidden calls
/// had never been traced: a hidden call's time stays in the self time of its nearest shown
/// caller.
///
/// With `--time-filter`, a call is only known to be long enough once that much time has passed
/// on its thread, so its entry is handed on at the first event of the thread that proves it (or
/// at its exit), not at its own entry. Per thread, the entries waiting for that proof are the
/// innermost shown frames, so memory stays bounded by the stack depth.
pub struct FilteredSink<'s, S> {
    inner: &'s mut S,
    /// Whether `--function`/`--no-function` let each function id through.
    shown_functions: Vec<bool>,
    max_depth: usize,
    min_duration_ns: u64,
    spec_tids: Vec<u32>,
    threads: Vec<ThreadView>,
    /// Thread id → index into `threads`.
    index: FastHashMap<u32, usize>,
    /// The thread of the previous call and its index: calls come in runs from one thread.
    last_thread: Option<(u32, usize)>,
}

/// One thread's calls as the filters see them.
struct ThreadView {
    tid: u32,
    /// The process of the thread.
    pid: u32,
    /// Whether `--tid-filter` lets the thread through; nothing else is kept when it does not.
    shown: bool,
    /// For each frame open on the thread, outermost first: whether it is shown (or may be,
    /// pending the time filter).
    open: Vec<bool>,
    /// The functions of the shown frames, outermost first: the path the inner sink sees.
    path: Vec<FunctionId>,
    frames: Vec<ShownFrame>,
    /// How many of `frames`, from the outermost, the inner sink has been told of.
    entered: usize,
}

struct ShownFrame {
    start_ns: u64,
    /// The CPU it was entered on.
    cpu: u32,
    /// The durations of the shown calls it made directly (in the filtered tree).
    child_ns: u64,
    /// Its return-address slot, as the replayer gave it.
    slot: u32,
    /// Its captured arguments: the entry may be handed on later (`--time-filter`).
    arguments: Option<Box<[u8]>>,
}

impl<'s, S: CallSink> FilteredSink<'s, S> {
    /// Takes in functions added to the table during the recording: `shown` says, for each, whether
    /// the function globs show it (`FilterSpec::function_mask` of the added functions).
    pub fn add_functions(&mut self, shown: Vec<bool>) {
        self.shown_functions.extend(shown);
    }

    /// The sink the shown calls go to.
    pub fn inner_mut(&mut self) -> &mut S {
        self.inner
    }

    pub fn new(spec: &FilterSpec, table: &FunctionTable, inner: &'s mut S) -> FilteredSink<'s, S> {
        FilteredSink {
            inner,
            shown_functions: spec.function_mask(table),
            max_depth: spec.max_depth.map_or(usize::MAX, |d| d as usize),
            min_duration_ns: spec.min_duration_ns,
            spec_tids: spec.tids.clone(),
            threads: Vec::new(),
            index: FastHashMap::default(),
            last_thread: None,
        }
    }

    fn thread_index(&mut self, tid: u32, pid: u32) -> usize {
        if let Some((last_tid, index)) = self.last_thread {
            if last_tid == tid {
                return index;
            }
        }
        let threads = &mut self.threads;
        let spec_tids = &self.spec_tids;
        let index = *self.index.entry(tid).or_insert_with(|| {
            threads.push(ThreadView {
                tid,
                pid,
                shown: spec_tids.is_empty() || spec_tids.contains(&tid),
                open: Vec::new(),
                path: Vec::new(),
                frames: Vec::new(),
                entered: 0,
            });
            threads.len() - 1
        });
        self.last_thread = Some((tid, index));
        index
    }
}

impl ThreadView {
    /// Tells `inner` of the waiting shown frames that have lasted `min_duration_ns` by `now_ns`.
    /// They are the outermost of the waiting ones, since those started first.
    fn enter_proven<S: CallSink>(&mut self, now_ns: u64, min_duration_ns: u64, inner: &mut S) {
        while let Some(frame) = self.frames.get(self.entered) {
            if frame.start_ns.saturating_add(min_duration_ns) > now_ns {
                break;
            }
            let depth = self.entered;
            let entry = CallEntry {
                function: self.path[depth],
                tid: self.tid,
                pid: self.pid,
                cpu: frame.cpu,
                start_ns: frame.start_ns,
                depth: depth as u32,
                slot: frame.slot,
                arguments: frame.arguments.as_deref(),
            };
            inner.call_entered(&entry, &self.path[..=depth]);
            self.entered += 1;
        }
    }
}

impl<S: CallSink> CallSink for FilteredSink<'_, S> {
    fn process_execed(&mut self, note: &Event) {
        self.inner.process_execed(note);
    }

    fn unwound(&mut self, note: &Event) {
        self.inner.unwound(note);
    }

    fn call_entered(&mut self, entry: &CallEntry, _stack: &[FunctionId]) {
        let index = self.thread_index(entry.tid, entry.pid);
        let thread = &mut self.threads[index];
        if !thread.shown {
            return;
        }
        thread.enter_proven(entry.start_ns, self.min_duration_ns, self.inner);
        let shown =
            self.shown_functions[entry.function as usize] && thread.path.len() < self.max_depth;
        thread.open.push(shown);
        if shown {
            thread.path.push(entry.function);
            thread.frames.push(ShownFrame {
                start_ns: entry.start_ns,
                cpu: entry.cpu,
                child_ns: 0,
                slot: entry.slot,
                arguments: entry.arguments.map(Box::from),
            });
            thread.enter_proven(entry.start_ns, self.min_duration_ns, self.inner);
        }
    }

    fn call_finished(&mut self, call: &FinishedCall, _stack: &[FunctionId]) {
        let index = self.thread_index(call.tid, call.pid);
        let thread = &mut self.threads[index];
        if !thread.shown {
            return;
        }
        let end_ns = call.end_ns;
        // A call that is too short proves nothing about itself, but its end may prove its callers.
        thread.enter_proven(end_ns, self.min_duration_ns, self.inner);
        // The replayer hands every frame it opened back exactly once, innermost first.
        if !thread.open.pop().expect("a finished call was entered") {
            return;
        }
        let frame = thread.frames.pop().expect("a shown frame per shown call");
        let depth = thread.frames.len();
        // A call of unknown time proves nothing: it is shown if it was already entered.
        let shown = match call.time_known {
            true => call.duration_ns >= self.min_duration_ns,
            false => depth < thread.entered,
        };
        if shown {
            let shown = FinishedCall {
                self_ns: call.duration_ns.saturating_sub(frame.child_ns),
                depth: depth as u32,
                ..call.clone()
            };
            self.inner.call_finished(&shown, &thread.path);
            if let Some(parent) = thread.frames.last_mut() {
                parent.child_ns = parent.child_ns.saturating_add(call.duration_ns);
            }
        }
        // Too short: it was never entered, and its time stays in its caller's self time.
        thread.path.pop();
        thread.entered = thread.entered.min(thread.frames.len());
    }
}
