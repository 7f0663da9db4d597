//! Events → finished calls: one call stack per thread. This is the one engine every report
//! shares (uftrace's `fstack`): a report is a [`CallSink`] that receives each call as it ends,
//! with the path of its callers, and, when it needs them (the call tree, Chrome traces), each
//! call as it starts.
//!
//! An exit is paired with its entry by the return-address slot both carry ([`Event::stack`]):
//! the stack grows down, so a deeper call has a lower slot, and a slot that is returned through or
//! called at again tells that every frame at or below it is gone, whether its return was seen or
//! not. What real traces contain, and what the replayer does with it:
//! - an exit whose slot and function match no open frame (a call already running at attach) is
//!   ignored and counted in [`ReplayStats::unmatched_exits`];
//! - frames deeper than the one an exit matches had their returns skipped (longjmp, exceptions,
//!   returns beyond the kernel's 64 nested uretprobes, lost events): they are closed with
//!   `time_known == false`, no duration, and counted in [`ReplayStats::unknown_time_calls`];
//! - an entry at or above the slot of open frames means those frames are gone (a longjmp landed
//!   above them): they are closed the same way. A call at the very slot of the frame on top is a
//!   tail call (that frame is still open, its uretprobe fires with the callee's), also of the
//!   same function (a `jmp` to its own start), whose exit must then come right after the
//!   callee's, or it was left by a longjmp; the same function at the slot of a frame below
//!   frames that are gone is a new call after a longjmp;
//! - an [`Event::UNWOUND`] note says where an exception or a panic landed: the frames below its
//!   stack pointer are closed with unknown time;
//! - a call of a function that switches stacks (`swapcontext`, see [`Replayer::for_table`])
//!   followed by any event but its own exit left its stack for another: the calls made there
//!   nest under it, their slots never compared with those of the stack it left. An exit that
//!   lands back on a call below it, at its very slot, resumes that stack: the frames above that
//!   call, on the stack left, are closed with unknown time (they are suspended, or gone);
//! - entries without exits (the process exited, or we detached) stay open until
//!   [`Replayer::finish`] closes them at the end of the trace with `complete == false`;
//! - events without a slot (`stack == 0`: synthetic events, files of older versions) pair by
//!   function: an exit for a function deeper in the stack unwinds the frames above it, which end
//!   at the exit's time with `complete == false`;
//! - an event whose function id is beyond the function table is ignored and counted: corrupt
//!   input must not panic.
//!
//! Memory grows with the number of threads × the stack depth, plus the number of functions ×
//! the number of threads that are inside a traced call *at the same time*; never with the length
//! of the trace. Once the stacks have grown, replaying an event allocates nothing.

use crate::elf::contexts::switches_stacks;
use crate::event::Event;
use crate::fast_hash::FastHashMap;
use crate::probe_cost::{ProbeCost, ProbeCosts};
use crate::table::{FunctionId, FunctionKind, FunctionTable};

/// One call that has ended (or was closed), as the replayer hands it to a [`CallSink`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishedCall {
    pub function: FunctionId,
    pub tid: u32,
    /// The process (tgid) of the thread; 0 when unknown.
    pub pid: u32,
    /// The CPU the call returned on (where it was entered, when its exit was never seen).
    pub cpu: u32,
    /// Entry time, CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    /// Exit time (or when the call was closed), CLOCK_MONOTONIC ns: as recorded, so
    /// `end_ns - start_ns` is the raw duration.
    pub end_ns: u64,
    /// From entry to exit, less the probe costs when they are corrected
    /// ([`Replayer::correct_probe_costs`]).
    pub duration_ns: u64,
    /// The duration minus the durations of the direct children.
    pub self_ns: u64,
    /// The time the thread spent off the CPU during the call (`-E offcpu`; by default, the time
    /// it spent preempted), taken out of `duration_ns` as probe costs are; 0 when unknown or
    /// under raw times.
    pub off_cpu_ns: u64,
    /// The time utrace held the thread stopped during the call (`[utrace: stack repair]`),
    /// taken out of `duration_ns` too; 0 under raw times.
    pub stopped_ns: u64,
    /// 0 for the outermost call observed on the thread.
    pub depth: u32,
    /// False when the exit was never seen: the call was closed by [`Replayer::finish`], or by an
    /// exit of a function deeper in the stack (unwinding), or its time is unknown.
    pub complete: bool,
    /// False when the call's return was skipped (longjmp, exceptions, the kernel's uretprobe
    /// nesting limit, lost events): when it ended is not known, so `duration_ns` and `self_ns`
    /// are 0; its caller's self time holds its time but that of its timed children. Still a
    /// call.
    pub time_known: bool,
    /// The same function is already active below this call on this thread's stack.
    pub recursive: bool,
    /// Low 32 bits of the address of its return-address slot, as its events carry it; 0 when
    /// unknown.
    pub slot: u32,
    /// For a call of unknown time that is not recursive: the summed durations of the outermost
    /// timed calls of the same function inside it, which stand for it in the function's total
    /// time (so a total never falls below the self times it covers). 0 otherwise.
    pub recursion_ns: u64,
    /// The values its probes captured (`-A`, `-R`), as the probes wrote them (see
    /// [`crate::value`]).
    pub values: CallValues,
}

/// The captured values of a call, as the probes wrote them: `None` where nothing was captured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallValues {
    pub arguments: Option<Box<[u8]>>,
    pub returned: Option<Box<[u8]>>,
}

/// One call that has just started, as the replayer hands it to [`CallSink::call_entered`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallEntry<'a> {
    pub function: FunctionId,
    pub tid: u32,
    /// The process (tgid) of the thread; 0 when unknown.
    pub pid: u32,
    /// The CPU the call was entered on.
    pub cpu: u32,
    /// Entry time, CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    /// 0 for the outermost call observed on the thread.
    pub depth: u32,
    /// Low 32 bits of the address of its return-address slot; 0 when unknown.
    pub slot: u32,
    /// The arguments its entry probe captured, as written (see [`crate::value`]).
    pub arguments: Option<&'a [u8]>,
}

/// A consumer of calls: a report, a live printer, a test's collector.
///
/// Per thread, the calls come in the order of a depth-first walk of the call tree: every
/// `call_entered` is matched by exactly one later `call_finished` of the same frame, and frames
/// end innermost first. Threads are interleaved as their events were.
pub trait CallSink {
    /// `stack` is the path from the thread's outermost frame to this call, inclusive, so
    /// `stack.last() == Some(&call.function)` and `stack.len() == call.depth + 1`.
    fn call_finished(&mut self, call: &FinishedCall, stack: &[FunctionId]);

    /// A call has started; `stack` is as for [`call_finished`](Self::call_finished). Most
    /// reports only need finished calls, hence the default that does nothing.
    fn call_entered(&mut self, _entry: &CallEntry, _stack: &[FunctionId]) {}

    /// `note` (an [`Event::PROCESS_EXECED`]) came, after the calls it ended were finished. Only
    /// a sink that writes the events back needs it.
    fn process_execed(&mut self, _note: &Event) {}

    /// `note` (an [`Event::UNWOUND`]) came, after the frames it closed were finished. Only a
    /// sink that writes the events back needs it.
    fn unwound(&mut self, _note: &Event) {}
}

/// A closure is a sink, which keeps one-off consumers and tests short.
impl<F: FnMut(&FinishedCall, &[FunctionId])> CallSink for F {
    fn call_finished(&mut self, call: &FinishedCall, stack: &[FunctionId]) {
        self(call, stack)
    }
}

/// What the replayer saw that the calls alone do not tell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Events of the time preempted (`linux:preempted`), which are no calls.
    pub preemption_events: u64,
    /// Exits with no matching entry on the thread's stack: calls in flight at attach.
    pub unmatched_exits: u64,
    /// Calls whose exit was never seen: closed by `finish` or by unwinding, timed up to there.
    pub unfinished_calls: u64,
    /// Calls whose return was skipped, found by their stack slot: counted, but not timed.
    pub unknown_time_calls: u64,
    /// Events whose function id is beyond the function table (corrupt input), ignored.
    pub unknown_function_events: u64,
    /// Pieces of captured values ([`Event::VALUES`]): not events of their own.
    pub value_pieces: u64,
    /// Threads seen.
    pub threads: usize,
    /// The earliest timestamp of any event replayed (0 when none was).
    pub first_timestamp_ns: u64,
    /// The latest timestamp of any event replayed (0 when none was).
    pub last_timestamp_ns: u64,
    /// Durations that the probe-cost correction would have made negative, or shorter than their
    /// children's: kept at 0 or at their children's.
    pub clamped_times: u64,
    /// The durations of every thread's outermost timed calls, added up (corrected as every
    /// duration is): the time the trace covers, every thread counted, before any filter. No
    /// function's total exceeds it, as each of its calls lies in one of them.
    pub outermost_ns: u64,
}

impl ReplayStats {
    /// From the first event to the last: the time the trace covers.
    pub fn span_ns(&self) -> u64 {
        self.last_timestamp_ns
            .saturating_sub(self.first_timestamp_ns)
    }
}

/// Turns entry and exit events into [`FinishedCall`]s, one call stack per thread.
pub struct Replayer {
    function_count: usize,
    /// Call stacks in the order their threads were first seen.
    stacks: Vec<CallStack>,
    /// Thread id → index into `stacks`.
    index: FastHashMap<u32, usize>,
    /// (thread id, index) of threads seen lately, by the low bits of the thread id: events come
    /// in runs from one thread, or from a few threads in turn (one per CPU), and a hash lookup
    /// per event would cost as much as the rest of replaying it.
    recent_threads: [(u32, usize); RECENT_THREADS],
    /// Zeroed per-function counters, taken by a thread when it enters its outermost call and
    /// given back when that call ends, so threads that are idle hold none.
    spare_active: Vec<Vec<u32>>,
    /// Events with a known function replayed so far: tells the first timestamp from a default 0.
    events_seen: u64,
    /// What each function's probes add, by function id: taken out of durations. Empty when
    /// durations are raw; a function beyond it costs nothing.
    costs: Vec<ProbeCost>,
    /// By function id, whether its calls are time apart from the calls around them, taken out
    /// whole of them. Empty when durations are raw.
    apart: Vec<Apart>,
    /// By function id, what the replayer knows of its code; a function beyond it is a plain
    /// function of no module known.
    code: Vec<FunctionCode>,
    /// Modules of the tables added so far: the next table's are numbered on from there.
    modules_seen: u32,
    /// `linux:preempted`, whose events are no calls: see [`Replayer::preempted`].
    preemption: Option<FunctionId>,
    stats: ReplayStats,
}

impl Replayer {
    /// A replayer for a function table of `function_count` functions: ids from 0 to
    /// `function_count - 1` are valid.
    pub fn new(function_count: usize) -> Replayer {
        Replayer {
            function_count,
            stacks: Vec::new(),
            index: FastHashMap::default(),
            recent_threads: [(NO_THREAD, 0); RECENT_THREADS],
            spare_active: Vec::new(),
            events_seen: 0,
            costs: Vec::new(),
            apart: Vec::new(),
            code: Vec::new(),
            modules_seen: 0,
            preemption: None,
            stats: ReplayStats::default(),
        }
    }

    /// A replayer for the functions of `table`, which follows the threads from stack to stack
    /// at the calls of its functions that switch stacks (`swapcontext@plt`, see
    /// src/elf/contexts.rs).
    pub fn for_table(table: &FunctionTable) -> Replayer {
        let mut replayer = Replayer::new(0);
        replayer.add_functions(table);
        replayer
    }

    /// Takes utrace's own probe costs out of every duration and self time from now on: those of
    /// the call's own probes that lie between its timestamps, and the whole probes of the traced
    /// calls below it (see [`crate::probe_cost`]); and, out of the calls around them, the whole
    /// of the time utrace held a thread stopped (calls of [`FunctionKind::Tracer`] functions)
    /// and of the time a thread spent off the CPU (`linux:schedule`, `-E offcpu`), which each
    /// call then counts in [`FinishedCall::off_cpu_ns`].
    pub fn correct_probe_costs(&mut self, table: &FunctionTable, costs: &ProbeCosts) {
        self.costs = costs.by_function(table);
        self.apart = (table.functions.iter())
            .map(|function| match function.kind {
                FunctionKind::Tracer => Apart::TracerStop,
                _ if function.is_off_cpu() => Apart::OffCpu,
                _ => Apart::No,
            })
            .collect();
    }

    /// Replays one event; the calls it ends go to `sink`, innermost first.
    pub fn push<S: CallSink>(&mut self, event: &Event, sink: &mut S) {
        if event.function == Event::PROCESS_EXECED {
            self.close_process(event.pid, event.timestamp_ns, sink);
            sink.process_execed(event);
            return;
        }
        if event.function == Event::UNWOUND {
            self.close_unwound(event, sink);
            sink.unwound(event);
            return;
        }
        if event.function == Event::VALUES {
            let (bytes, len) = event.piece_bytes();
            let thread = self.thread_index(event.tid(), event.pid);
            self.stacks[thread].pending_values.extend(&bytes[..len]);
            self.stats.value_pieces += 1;
            return;
        }
        let function = event.function_id();
        if function as usize >= self.function_count {
            self.stats.unknown_function_events += 1;
            return;
        }
        let ts = event.timestamp_ns;
        if self.events_seen == 0 || ts < self.stats.first_timestamp_ns {
            self.stats.first_timestamp_ns = ts;
        }
        self.events_seen += 1;
        self.stats.last_timestamp_ns = self.stats.last_timestamp_ns.max(ts);
        let thread = self.thread_index(event.tid(), event.pid);
        if self.preemption == Some(function) {
            self.stats.preemption_events += 1;
            let corrected = !self.apart.is_empty();
            self.stacks[thread].preempted(event, corrected);
            return;
        }
        let stack = &mut self.stacks[thread];
        // The values that came right before the event are its own.
        let values = stack.take_pending_values();
        let mut ending = Ending {
            costs: &self.costs,
            spare_active: &mut self.spare_active,
            clamped: &mut self.stats.clamped_times,
            outermost: &mut self.stats.outermost_ns,
            apart: &self.apart,
        };
        let returned = FrameEnd::Returned {
            end_ns: ts,
            cpu: event.cpu(),
        };
        if stack.awaiting_exit {
            stack.awaiting_exit = false;
            if !(event.is_exit() && stack.is_on_top(function, event.stack)) {
                stack.pop(FrameEnd::Unknown, sink, &mut ending);
                self.stats.unknown_time_calls += 1;
            }
        }
        if event.stack != 0 {
            stack.note_switch(function, event, &self.code);
        }
        if event.is_exit() && event.stack == 0 {
            if !stack.is_active(function) {
                self.stats.unmatched_exits += 1;
                return;
            }
            // The function is on the stack, so this loop stops at it.
            while stack.top() != Some(function) {
                stack.pop(FrameEnd::Closed { end_ns: ts }, sink, &mut ending);
                self.stats.unfinished_calls += 1;
            }
            if let Some(frame) = stack.frames.last_mut() {
                frame.values.returned = values;
            }
            stack.pop(returned, sink, &mut ending);
        } else if event.is_exit() {
            let (gone, matched) = stack.frames_returned_through(function, event.stack);
            for _ in 0..gone {
                stack.pop(FrameEnd::Unknown, sink, &mut ending);
            }
            self.stats.unknown_time_calls += gone as u64;
            if matched {
                if let Some(frame) = stack.frames.last_mut() {
                    frame.values.returned = values;
                }
                stack.pop(returned, sink, &mut ending);
                stack.awaiting_exit = stack.is_on_top(function, event.stack);
            } else {
                self.stats.unmatched_exits += 1;
            }
        } else {
            if event.stack != 0 {
                let gone = stack.frames_called_over(function, event.stack, &self.code);
                for _ in 0..gone {
                    stack.pop(FrameEnd::Unknown, sink, &mut ending);
                }
                self.stats.unknown_time_calls += gone as u64;
            }
            let function_count = self.function_count;
            stack.enter(function, ts, event.cpu(), event.stack, || {
                ending
                    .spare_active
                    .pop()
                    .unwrap_or_else(|| vec![0; function_count])
            });
            let frame = stack.frames.last_mut().expect("a frame was entered");
            frame.values.arguments = values;
            let entry = CallEntry {
                function,
                tid: event.tid(),
                pid: stack.pid,
                cpu: event.cpu(),
                start_ns: ts,
                depth: (stack.path.len() - 1) as u32,
                slot: event.stack,
                arguments: frame.values.arguments.as_deref(),
            };
            sink.call_entered(&entry, &stack.path);
        }
    }

    /// Makes room for the functions of `more`, numbered on from the table's (a library probed
    /// during the recording).
    pub fn add_functions(&mut self, more: &FunctionTable) {
        let count = more.functions.len();
        let mut functions = more.functions.iter().enumerate();
        if let Some((id, _)) = functions.rfind(|(_, f)| f.is_preemption()) {
            self.preemption = Some((self.function_count + id) as FunctionId);
        }
        let modules_seen = self.modules_seen;
        self.code
            .resize(self.function_count, FunctionCode::default());
        self.code
            .extend(more.functions.iter().map(|function| FunctionCode {
                switches_stacks: function.kind.is_probed_code() && switches_stacks(&function.name),
                plt_stub: function.kind == FunctionKind::Plt,
                module: Some(modules_seen + function.module),
            }));
        self.modules_seen += more.modules.len() as u32;
        self.function_count += count;
        let size = self.function_count;
        for stack in &mut self.stacks {
            if !stack.active.is_empty() {
                stack.active.resize(size, 0);
            }
        }
        for spare in &mut self.spare_active {
            spare.resize(size, 0);
        }
    }

    /// Replays a block of events in order.
    pub fn push_all<S: CallSink>(&mut self, events: &[Event], sink: &mut S) {
        for event in events {
            self.push(event, sink);
        }
    }

    /// The statistics so far.
    pub fn stats(&self) -> ReplayStats {
        ReplayStats {
            threads: self.stacks.len(),
            ..self.stats
        }
    }

    /// Closes every open frame at `end_ns` (`complete == false`), innermost first, thread by
    /// thread in order of thread id. A frame that started after `end_ns` gets a duration of 0.
    pub fn finish<S: CallSink>(mut self, end_ns: u64, sink: &mut S) -> ReplayStats {
        self.stacks.sort_by_key(|stack| stack.tid);
        let mut ending = Ending {
            costs: &self.costs,
            spare_active: &mut self.spare_active,
            clamped: &mut self.stats.clamped_times,
            outermost: &mut self.stats.outermost_ns,
            apart: &self.apart,
        };
        for stack in &mut self.stacks {
            self.stats.unfinished_calls += stack.close(end_ns, sink, &mut ending);
        }
        self.stats()
    }

    /// Process `pid` exec'ed at `ts`: the calls open in its threads will never return (its
    /// old program is gone), so they end there, unfinished.
    fn close_process<S: CallSink>(&mut self, pid: u32, ts: u64, sink: &mut S) {
        let mut ending = Ending {
            costs: &self.costs,
            spare_active: &mut self.spare_active,
            clamped: &mut self.stats.clamped_times,
            outermost: &mut self.stats.outermost_ns,
            apart: &self.apart,
        };
        for stack in self.stacks.iter_mut().filter(|stack| stack.pid == pid) {
            self.stats.unfinished_calls += stack.close(ts, sink, &mut ending);
        }
    }

    /// The unwinder landed on the note's thread at the stack pointer in `note.stack`: the open
    /// frames below it were skipped by the exception and never return. They end there, with
    /// unknown time.
    fn close_unwound<S: CallSink>(&mut self, note: &Event, sink: &mut S) {
        let Some(&index) = self.index.get(&note.tid()) else {
            return;
        };
        let stack = &mut self.stacks[index];
        let mut ending = Ending {
            costs: &self.costs,
            spare_active: &mut self.spare_active,
            clamped: &mut self.stats.clamped_times,
            outermost: &mut self.stats.outermost_ns,
            apart: &self.apart,
        };
        while stack.frames.last().is_some_and(|frame| {
            frame.slot != 0 && !frame.switched && height(note.stack, frame.slot) > 0
        }) {
            stack.pop(FrameEnd::Unknown, sink, &mut ending);
            self.stats.unknown_time_calls += 1;
        }
    }

    fn thread_index(&mut self, tid: u32, pid: u32) -> usize {
        let recent = &mut self.recent_threads[tid as usize % RECENT_THREADS];
        if recent.0 == tid {
            return recent.1;
        }
        let stacks = &mut self.stacks;
        let index = *self.index.entry(tid).or_insert_with(|| {
            stacks.push(CallStack::new(tid, pid));
            stacks.len() - 1
        });
        *recent = (tid, index);
        index
    }
}

/// How many threads [`Replayer::thread_index`] remembers without a hash lookup.
const RECENT_THREADS: usize = 16;
/// Not a thread id: they have at most [`Event::TID_BITS`] bits.
const NO_THREAD: u32 = u32::MAX;

/// One open call.
struct Frame {
    start_ns: u64,
    /// Low 32 bits of the address of its return-address slot; 0 when unknown.
    slot: u32,
    /// The CPU the call was entered on.
    cpu: u32,
    /// Sum of the durations of the direct children that have ended.
    child_ns: u64,
    /// Sum of the whole probe costs of the calls below this one that have ended: all of it lies
    /// inside this call's duration.
    probes_below_ns: u64,
    /// The time off the CPU below this call so far, taken out of its duration.
    off_cpu_ns: u64,
    /// The time utrace held the thread stopped below this call so far, taken out of it.
    stopped_ns: u64,
    /// Sum of the durations of the outermost timed calls of the same function inside it, as
    /// far as they have ended (see [`FinishedCall::recursion_ns`]).
    recursion_ns: u64,
    recursive: bool,
    /// A call of a function that switches stacks, after which the thread ran on another stack:
    /// the frames above it are there, and their slots tell nothing of this one's or below.
    switched: bool,
    /// What its probes captured.
    values: CallValues,
}

/// What closing a frame needs besides the stack: the probe costs by function, where the
/// counters of an emptied stack go, the count of times clamped at 0, the outermost calls'
/// durations added up, and which functions' calls are apart from the calls around them.
struct Ending<'a> {
    costs: &'a [ProbeCost],
    spare_active: &'a mut Vec<Vec<u32>>,
    clamped: &'a mut u64,
    outermost: &'a mut u64,
    apart: &'a [Apart],
}

/// Whether a function's calls are time apart from the program's calls around them, which those
/// leave out whole, as they leave out the probes' costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Apart {
    /// A call of the program's: part of the calls around it.
    No,
    /// utrace held the thread stopped (`[utrace: stack repair]`).
    TracerStop,
    /// The thread was off the CPU (`linux:schedule`): counted in the calls' off-CPU time.
    OffCpu,
}

impl Ending<'_> {
    /// `raw - taken`, or `floor` (counted) when the correction takes more than that leaves.
    fn correct(&mut self, raw: u64, taken: u64, floor: u64) -> u64 {
        match raw.checked_sub(taken) {
            Some(corrected) if corrected >= floor => corrected,
            _ => {
                *self.clamped += 1;
                floor
            }
        }
    }
}

/// One thread's open calls, outermost first.
struct CallStack {
    tid: u32,
    /// The process of the thread, from its first event.
    pid: u32,
    /// The functions of `frames`, kept apart so the path is a slice to hand to sinks.
    path: Vec<FunctionId>,
    frames: Vec<Frame>,
    /// The frame on top called itself at its own slot (`jmp` to its own start, or a longjmp
    /// back into its caller that called it again) and that call has returned: with uretprobes, a
    /// tail call's return comes right after its callee's, so any other event means the frame
    /// was left by a longjmp and is gone.
    awaiting_exit: bool,
    /// How many frames of each function are open, indexed by function id; empty while the
    /// stack is empty (the vector then sits in the replayer's spares), so recursion and "is
    /// this exit's function on the stack" are O(1) without a table per idle thread.
    active: Vec<u32>,
    /// Captured values that came before the thread's next event, which takes them.
    pending_values: Vec<u8>,
    /// When the thread was preempted, while it is.
    preempted_since: Option<u64>,
}

impl CallStack {
    fn new(tid: u32, pid: u32) -> CallStack {
        CallStack {
            tid,
            pid,
            path: Vec::new(),
            frames: Vec::new(),
            awaiting_exit: false,
            active: Vec::new(),
            pending_values: Vec::new(),
            preempted_since: None,
        }
    }

    /// The values that wait for the next event, if any.
    fn take_pending_values(&mut self) -> Option<Box<[u8]>> {
        if self.pending_values.is_empty() {
            return None;
        }
        let values = self.pending_values.as_slice().into();
        self.pending_values.clear();
        Some(values)
    }

    fn top(&self) -> Option<FunctionId> {
        self.path.last().copied()
    }

    /// Whether the frame on top is a call of `function` at `slot`.
    fn is_on_top(&self, function: FunctionId, slot: u32) -> bool {
        self.top() == Some(function) && self.frames.last().is_some_and(|frame| frame.slot == slot)
    }

    fn is_active(&self, function: FunctionId) -> bool {
        self.active.get(function as usize).is_some_and(|&n| n > 0)
    }

    /// For an exit of `function` through `slot`: how many frames from the top lie at or below
    /// the slot without being that call (their returns were skipped), and whether the call
    /// itself is the next frame. Looks no deeper into the stack than the slot, nor past a call
    /// that left the stack (see [`CallStack::note_switch`]), except for that very call at that
    /// very slot: a `swapcontext` resumed, or the caller of a `getcontext` that a `setcontext`
    /// went back to. Every frame above it is then on the stack it left, suspended or gone.
    fn frames_returned_through(&self, function: FunctionId, slot: u32) -> (usize, bool) {
        let mut gone = 0;
        for (frame, &open) in self.frames.iter().zip(&self.path).rev() {
            if frame.switched {
                break;
            }
            match height(slot, frame.slot) {
                ..0 => break,
                0 if open == function => return (gone, true),
                _ => gone += 1,
            }
        }
        let Some(left) = self.frames.iter().rposition(|frame| frame.switched) else {
            return (gone, false);
        };
        let resumed = (self.frames[..=left].iter().zip(&self.path))
            .rposition(|(frame, &open)| frame.slot == slot && open == function);
        match resumed {
            Some(index) => (self.frames.len() - 1 - index, true),
            None => (gone, false),
        }
    }

    /// Before an event of `function` (`event`): if the frame on top is a call of a function
    /// that switches stacks and the event is not that call's return, the thread runs on another
    /// stack now.
    fn note_switch(&mut self, function: FunctionId, event: &Event, code: &[FunctionCode]) {
        let (Some(top), Some(&open)) = (self.frames.last_mut(), self.path.last()) else {
            return;
        };
        let returns = event.is_exit() && open == function && top.slot == event.stack;
        if !returns
            && code
                .get(open as usize)
                .is_some_and(|code| code.switches_stacks)
        {
            top.switched = true;
        }
    }

    /// For an entry of `function` whose return address goes to `slot`: how many frames from the
    /// top are gone, since the call reuses their stack (a longjmp landed above them). The frame
    /// on top at the same slot is a caller that tail-called, even `function` itself (a self tail
    /// call, whose return comes right after the callee's: see [`CallStack::awaiting_exit`]);
    /// below frames that are gone, `function` again at the same slot is a new call after a
    /// longjmp, and the old one is gone too. A PLT stub at the same slot tail-calls only its
    /// library's function: a function of the stub's own module entered there (the stub reached
    /// by a tail jump, whose return went to a caller it never saw) means the stub has returned.
    /// A call that left the stack (see [`CallStack::note_switch`]) and the frames below it are
    /// on another stack: never gone for a call on this one.
    fn frames_called_over(&self, function: FunctionId, slot: u32, code: &[FunctionCode]) -> usize {
        let deeper = self
            .frames
            .iter()
            .rev()
            .take_while(|frame| !frame.switched && height(slot, frame.slot) > 0)
            .count();
        let below = self.frames.len() - deeper;
        let at_slot = below
            .checked_sub(1)
            .filter(|&i| !self.frames[i].switched && height(slot, self.frames[i].slot) == 0);
        let gone_at_slot = at_slot.is_some_and(|i| {
            let open = self.path[i];
            (deeper > 0 && open == function) || stub_returned(code, open, function)
        });
        deeper + usize::from(gone_at_slot)
    }

    /// Opens a frame; `take_active` provides zeroed counters when the stack has none.
    fn enter(
        &mut self,
        function: FunctionId,
        ts: u64,
        cpu: u32,
        slot: u32,
        take_active: impl FnOnce() -> Vec<u32>,
    ) {
        if self.active.is_empty() {
            self.active = take_active();
        }
        let count = &mut self.active[function as usize];
        let recursive = *count > 0;
        *count += 1;
        self.path.push(function);
        self.frames.push(Frame {
            start_ns: ts,
            slot,
            cpu,
            child_ns: 0,
            probes_below_ns: 0,
            off_cpu_ns: 0,
            stopped_ns: 0,
            recursion_ns: 0,
            recursive,
            switched: false,
            values: CallValues::default(),
        });
    }

    /// An event of `linux:preempted`: the thread left the CPU runnable (its entry) or came back
    /// (its exit). No call: where durations are `corrected`, the interval is taken out of the
    /// open calls and counted in their [`FinishedCall::off_cpu_ns`], as a `linux:schedule` call
    /// is; in raw durations it stays in them. An exit without its entry (lost) tells nothing.
    fn preempted(&mut self, event: &Event, corrected: bool) {
        if !event.is_exit() {
            self.preempted_since = Some(event.timestamp_ns);
            return;
        }
        let Some(since) = self.preempted_since.take() else {
            return;
        };
        if let Some(frame) = self.frames.last_mut().filter(|_| corrected) {
            let interval = event.timestamp_ns.saturating_sub(since);
            frame.probes_below_ns = frame.probes_below_ns.saturating_add(interval);
            frame.off_cpu_ns = frame.off_cpu_ns.saturating_add(interval);
        }
    }

    /// Closes every open frame at `end_ns`, innermost first, unfinished; returns how many.
    fn close<S: CallSink>(&mut self, end_ns: u64, sink: &mut S, ending: &mut Ending) -> u64 {
        let mut closed = 0;
        while self.top().is_some() {
            self.pop(FrameEnd::Closed { end_ns }, sink, ending);
            closed += 1;
        }
        closed
    }

    /// Closes the top frame as `end` says and hands it to `sink`. The stack must not be empty.
    fn pop<S: CallSink>(&mut self, end: FrameEnd, sink: &mut S, ending: &mut Ending) {
        self.awaiting_exit = false;
        let frame = self.frames.pop().expect("pop on an empty call stack");
        let depth = self.frames.len();
        let function = self.path[depth];
        let (end_ns, exit_cpu) = match end {
            FrameEnd::Returned { end_ns, cpu } => (Some(end_ns), Some(cpu)),
            FrameEnd::Closed { end_ns } => (Some(end_ns), None),
            FrameEnd::Unknown => (None, None),
        };
        let cost = ending
            .costs
            .get(function as usize)
            .copied()
            .unwrap_or_default();
        let raw_ns = end_ns.map_or(0, |end_ns| end_ns.saturating_sub(frame.start_ns));
        let taken_ns = cost.inside_ns + frame.probes_below_ns;
        let (duration_ns, self_ns) = match end_ns {
            // A call lasted at least as long as its children: where more was taken out than
            // that, the duration stays at theirs, so self times add up to the outermost duration.
            Some(_) => {
                let duration_ns = ending.correct(raw_ns, taken_ns, frame.child_ns);
                (duration_ns, duration_ns - frame.child_ns)
            }
            None => (0, 0),
        };
        if frame.recursive {
            // The call's time, or what stands for it, goes to the frame of the same function
            // below, in case that one's time turns out unknown.
            let same = end_ns.map_or(frame.recursion_ns, |_| duration_ns);
            if let Some(below) = self.path[..depth].iter().rposition(|&f| f == function) {
                let below = &mut self.frames[below].recursion_ns;
                *below = below.saturating_add(same);
            }
        }
        let apart = (ending.apart.get(function as usize).copied()).unwrap_or(Apart::No);
        // utrace's own time taken out is not the program's: no part of the whole either.
        if depth == 0 && end_ns.is_some() && apart != Apart::TracerStop {
            *ending.outermost = ending.outermost.saturating_add(duration_ns);
        }
        let call = FinishedCall {
            function,
            tid: self.tid,
            pid: self.pid,
            cpu: exit_cpu.unwrap_or(frame.cpu),
            start_ns: frame.start_ns,
            end_ns: end_ns.unwrap_or(frame.start_ns).max(frame.start_ns),
            duration_ns,
            self_ns,
            off_cpu_ns: frame.off_cpu_ns,
            stopped_ns: frame.stopped_ns,
            depth: depth as u32,
            complete: exit_cpu.is_some(),
            time_known: end_ns.is_some(),
            recursive: frame.recursive,
            slot: frame.slot,
            recursion_ns: match (end_ns, frame.recursive) {
                (None, false) => frame.recursion_ns,
                _ => 0,
            },
            values: frame.values,
        };
        sink.call_finished(&call, &self.path);
        self.path.pop();
        self.active[function as usize] -= 1;
        match self.frames.last_mut() {
            // Of a call of unknown time, the parent knows the time of its timed children: the rest
            // stays in the parent's self time, and no time is counted twice.
            // utrace held the thread stopped, or it was off the CPU: none of that time is the
            // caller's, nor of any call around it, as a probe's whole cost is not.
            Some(parent) if apart != Apart::No => {
                parent.probes_below_ns = parent.probes_below_ns.saturating_add(raw_ns);
                let kept = match apart {
                    Apart::OffCpu => &mut parent.off_cpu_ns,
                    _ => &mut parent.stopped_ns,
                };
                *kept = kept.saturating_add(raw_ns);
            }
            Some(parent) => {
                parent.off_cpu_ns = parent.off_cpu_ns.saturating_add(frame.off_cpu_ns);
                parent.stopped_ns = parent.stopped_ns.saturating_add(frame.stopped_ns);
                let known_ns = end_ns.map_or(frame.child_ns, |_| duration_ns);
                parent.child_ns = parent.child_ns.saturating_add(known_ns);
                // A duration kept at its floor (0 or its children's) had more taken out than it
                // could: those probes cost less than measured, and the caller is not charged
                // the difference either, so self times still add up to the outermost duration.
                let overtaken_ns = match end_ns {
                    Some(_) => taken_ns.saturating_sub(raw_ns.saturating_sub(duration_ns)),
                    None => 0,
                };
                parent.probes_below_ns = parent.probes_below_ns.saturating_add(
                    (frame.probes_below_ns + cost.full_ns).saturating_sub(overtaken_ns),
                );
            }
            // Every counter is back to zero: lend the vector to the next thread that enters.
            None => ending.spare_active.push(std::mem::take(&mut self.active)),
        }
    }
}

/// How a frame ends.
#[derive(Clone, Copy)]
enum FrameEnd {
    /// Its exit was seen.
    Returned { end_ns: u64, cpu: u32 },
    /// Its exit was never seen; it is timed up to `end_ns` (the end of the trace, or an outer
    /// return when events carry no slots).
    Closed { end_ns: u64 },
    /// Its return was skipped: when it ended is not known.
    Unknown,
}

/// How far `slot` lies above `other` on the downward-growing stack, from the low 32 bits of both
/// addresses: positive when `slot` is the shallower one. A thread's stack spans far less than
/// 2 GiB, so the wrapping difference is exact.
fn height(slot: u32, other: u32) -> i32 {
    slot.wrapping_sub(other) as i32
}

/// What the replayer knows of a function's code.
#[derive(Clone, Copy, Debug, Default)]
struct FunctionCode {
    /// It switches stacks (`swapcontext@plt`, see src/elf/contexts.rs).
    switches_stacks: bool,
    /// It is a PLT stub.
    plt_stub: bool,
    /// Its module, numbered across the tables added.
    module: Option<u32>,
}

/// Whether the PLT stub `open`, at the slot where `function` is entered, has returned: the stub
/// jumps to its library's function only, so `function` of the stub's own module is no callee
/// of it.
fn stub_returned(code: &[FunctionCode], open: FunctionId, function: FunctionId) -> bool {
    let (Some(stub), Some(entered)) = (code.get(open as usize), code.get(function as usize)) else {
        return false;
    };
    stub.plt_stub && stub.module.is_some() && stub.module == entered.module
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAIN: FunctionId = 0;
    const A: FunctionId = 1;
    const B: FunctionId = 2;
    const C: FunctionId = 3;

    /// Replays `events` with `finish(end_ns)` and returns every call with its path, in the
    /// order the sink saw them, and the statistics.
    fn replay(
        function_count: usize,
        events: &[Event],
        end_ns: u64,
    ) -> (Vec<(FinishedCall, Vec<FunctionId>)>, ReplayStats) {
        let mut calls = Vec::new();
        let mut sink = |call: &FinishedCall, stack: &[FunctionId]| {
            assert_eq!(stack.last(), Some(&call.function));
            assert_eq!(stack.len(), call.depth as usize + 1);
            calls.push((call.clone(), stack.to_vec()));
        };
        let mut replayer = Replayer::new(function_count);
        replayer.push_all(events, &mut sink);
        let stats = replayer.finish(end_ns, &mut sink);
        (calls, stats)
    }

    #[allow(clippy::too_many_arguments)]
    fn call(
        function: FunctionId,
        tid: u32,
        start_ns: u64,
        duration_ns: u64,
        self_ns: u64,
        depth: u32,
        complete: bool,
        recursive: bool,
    ) -> FinishedCall {
        FinishedCall {
            function,
            tid,
            pid: 0,
            cpu: 0,
            start_ns,
            end_ns: start_ns + duration_ns,
            duration_ns,
            self_ns,
            off_cpu_ns: 0,
            stopped_ns: 0,
            depth,
            complete,
            time_known: true,
            recursive,
            slot: 0,
            recursion_ns: 0,
            values: Default::default(),
        }
    }

    /// A call whose return was skipped: no time, not complete.
    fn skipped(function: FunctionId, start_ns: u64, depth: u32, recursive: bool) -> FinishedCall {
        FinishedCall {
            time_known: false,
            ..call(function, 1, start_ns, 0, 0, depth, false, recursive)
        }
    }

    #[test]
    fn replay_small_tree_gives_exact_total_and_self_times() {
        let events = [
            Event::entry(0, 1, MAIN),
            Event::entry(10, 1, A),
            Event::entry(20, 1, B),
            Event::exit(50, 1, B),
            Event::exit(60, 1, A),
            Event::entry(70, 1, C),
            Event::exit(100, 1, C),
            Event::exit(120, 1, MAIN),
        ];
        let (calls, stats) = replay(4, &events, 1000);
        assert_eq!(
            calls,
            vec![
                (call(B, 1, 20, 30, 30, 2, true, false), vec![MAIN, A, B]),
                (call(A, 1, 10, 50, 20, 1, true, false), vec![MAIN, A]),
                (call(C, 1, 70, 30, 30, 1, true, false), vec![MAIN, C]),
                (call(MAIN, 1, 0, 120, 40, 0, true, false), vec![MAIN]),
            ]
        );
        assert_eq!(
            stats,
            ReplayStats {
                preemption_events: 0,
                unmatched_exits: 0,
                unfinished_calls: 0,
                unknown_time_calls: 0,
                unknown_function_events: 0,
                value_pieces: 0,
                threads: 1,
                first_timestamp_ns: 0,
                last_timestamp_ns: 120,
                clamped_times: 0,
                outermost_ns: 120,
            }
        );
    }

    /// (function, duration, self) of each call of `events`, replayed with MAIN's and A's probes
    /// corrected as emulated (100 ns inside, 300 in all) and B's and C's as single-stepped (1000
    /// inside, 2500 in all).
    fn replay_corrected(events: &[Event]) -> (Vec<(FunctionId, u64, u64)>, ReplayStats) {
        use crate::table::{Execution, ExitKind, ProbeClass};
        let mut table = FunctionTable::of_names(&["main", "a", "b", "c"]);
        let stepped = ProbeClass::new(Execution::SingleStepped, ExitKind::Uretprobe);
        table.functions[B as usize].probes = stepped;
        table.functions[C as usize].probes = stepped;
        let costs = ProbeCosts {
            classes: vec![
                (
                    ProbeClass::default(),
                    ProbeCost {
                        inside_ns: 100,
                        full_ns: 300,
                        inside_spread_ns: None,
                    },
                ),
                (
                    stepped,
                    ProbeCost {
                        inside_ns: 1_000,
                        full_ns: 2_500,
                        inside_spread_ns: None,
                    },
                ),
            ],
        };
        let mut replayer = Replayer::new(4);
        replayer.correct_probe_costs(&table, &costs);
        let mut calls = Vec::new();
        replayer.push_all(events, &mut |call: &FinishedCall, _: &[FunctionId]| {
            calls.push((call.function, call.duration_ns, call.self_ns));
        });
        (calls, replayer.stats())
    }

    #[test]
    fn replay_takes_probe_costs_out_of_durations_and_self_times() {
        // main → a → b, then main → c. Raw: b 2000, a 5000 (self 3000), c 3000,
        // main 20000 (self 10000).
        let events = [
            Event::entry(0, 1, MAIN),
            Event::entry(1_000, 1, A),
            Event::entry(2_000, 1, B),
            Event::exit(4_000, 1, B),
            Event::exit(6_000, 1, A),
            Event::entry(10_000, 1, C),
            Event::exit(13_000, 1, C),
            Event::exit(20_000, 1, MAIN),
        ];
        let (calls, stats) = replay_corrected(&events);
        assert_eq!(
            calls,
            [
                // Its own inside cost only.
                (B, 2_000 - 1_000, 2_000 - 1_000),
                // Its inside cost and b's whole probes; b's corrected duration below it.
                (A, 5_000 - 100 - 2_500, 5_000 - 100 - 2_500 - 1_000),
                (C, 3_000 - 1_000, 3_000 - 1_000),
                // Every probe below it whole: a's, b's and c's.
                (
                    MAIN,
                    20_000 - 100 - (300 + 2_500 + 2_500),
                    20_000 - 100 - (300 + 2_500 + 2_500) - 2_400 - 2_000
                ),
            ]
        );
        assert_eq!(stats.clamped_times, 0);
    }

    #[test]
    fn replay_correction_never_goes_below_zero_and_counts_the_clamps() {
        // b lasts less than its own inside cost: 500 ns too much would be taken out.
        let events = [
            Event::entry(0, 1, A),
            Event::entry(100, 1, B),
            Event::exit(600, 1, B),
            Event::exit(3_000, 1, A),
        ];
        let (calls, stats) = replay_corrected(&events);
        // b: 500 − 1000 → 0; a is charged b's whole probes less those 500 ns:
        // 3000 − 100 − (2500 − 500), all of it its own.
        assert_eq!(calls, [(B, 0, 0), (A, 900, 900)]);
        assert_eq!(stats.clamped_times, 1);
    }

    /// Records entries and exits in the order the sink sees them.
    #[derive(Default)]
    struct Walk(Vec<String>);

    impl CallSink for Walk {
        fn call_finished(&mut self, call: &FinishedCall, stack: &[FunctionId]) {
            assert_eq!(stack.len(), call.depth as usize + 1);
            self.0
                .push(format!("exit {} t{} {:?}", call.function, call.tid, stack));
        }

        fn call_entered(&mut self, entry: &CallEntry, stack: &[FunctionId]) {
            assert_eq!(stack.last(), Some(&entry.function));
            assert_eq!(stack.len(), entry.depth as usize + 1);
            self.0.push(format!(
                "enter {} t{} @{} {:?}",
                entry.function, entry.tid, entry.start_ns, stack
            ));
        }
    }

    #[test]
    fn replay_hands_entries_before_their_exits_with_the_path() {
        let events = [
            Event::entry(0, 1, MAIN),
            Event::entry(5, 2, C),
            Event::entry(10, 1, A),
            // Not on the stack: no entry was handed, so no exit either.
            Event::exit(12, 1, B),
            Event::exit(20, 1, A),
            Event::entry(30, 1, B),
        ];
        let mut walk = Walk::default();
        let mut replayer = Replayer::new(4);
        replayer.push_all(&events, &mut walk);
        let stats = replayer.finish(40, &mut walk);
        assert_eq!(
            walk.0,
            [
                "enter 0 t1 @0 [0]",
                "enter 3 t2 @5 [3]",
                "enter 1 t1 @10 [0, 1]",
                "exit 1 t1 [0, 1]",
                "enter 2 t1 @30 [0, 2]",
                "exit 2 t1 [0, 2]",
                "exit 0 t1 [0]",
                "exit 3 t2 [3]",
            ]
        );
        assert_eq!((stats.first_timestamp_ns, stats.span_ns()), (0, 30));
    }

    #[test]
    fn replay_direct_recursion_marks_inner_calls() {
        // fib(3) → fib(2) → fib(1), then fib(3) → fib(1).
        let fib = 0;
        let events = [
            Event::entry(0, 1, fib),
            Event::entry(10, 1, fib),
            Event::entry(20, 1, fib),
            Event::exit(30, 1, fib),
            Event::exit(40, 1, fib),
            Event::entry(50, 1, fib),
            Event::exit(70, 1, fib),
            Event::exit(100, 1, fib),
        ];
        let (calls, stats) = replay(1, &events, 100);
        let calls: Vec<_> = calls.into_iter().map(|(call, _)| call).collect();
        assert_eq!(
            calls,
            vec![
                call(fib, 1, 20, 10, 10, 2, true, true),
                call(fib, 1, 10, 30, 20, 1, true, true),
                call(fib, 1, 50, 20, 20, 1, true, true),
                call(fib, 1, 0, 100, 50, 0, true, false),
            ]
        );
        // Self times add up to the outermost call's duration: nothing counted twice.
        assert_eq!(calls.iter().map(|c| c.self_ns).sum::<u64>(), 100);
        assert_eq!(stats.unfinished_calls, 0);
    }

    #[test]
    fn replay_mutual_recursion_marks_calls_already_active_below() {
        let (even, odd) = (0, 1);
        let events = [
            Event::entry(0, 1, even),
            Event::entry(10, 1, odd),
            Event::entry(20, 1, even),
            Event::entry(25, 1, odd),
            Event::exit(27, 1, odd),
            Event::exit(30, 1, even),
            Event::exit(40, 1, odd),
            Event::exit(50, 1, even),
            // Once the recursion is over, a new call is not recursive.
            Event::entry(60, 1, odd),
            Event::exit(65, 1, odd),
        ];
        let (calls, _) = replay(2, &events, 100);
        assert_eq!(
            calls,
            vec![
                (
                    call(odd, 1, 25, 2, 2, 3, true, true),
                    vec![even, odd, even, odd]
                ),
                (
                    call(even, 1, 20, 10, 8, 2, true, true),
                    vec![even, odd, even]
                ),
                (call(odd, 1, 10, 30, 20, 1, true, false), vec![even, odd]),
                (call(even, 1, 0, 50, 20, 0, true, false), vec![even]),
                (call(odd, 1, 60, 5, 5, 0, true, false), vec![odd]),
            ]
        );
    }

    #[test]
    fn replay_keeps_interleaved_threads_apart() {
        let events = [
            Event::entry(0, 100, MAIN),
            Event::entry(5, 200, A),
            Event::entry(10, 100, A),
            Event::entry(12, 200, B),
            Event::exit(15, 200, B),
            Event::exit(20, 100, A),
            Event::exit(25, 200, A),
            Event::exit(30, 100, MAIN),
            // The same function on two threads at once is not recursion.
            Event::entry(40, 100, C),
            Event::entry(41, 200, C),
            Event::exit(42, 200, C),
            Event::exit(43, 100, C),
        ];
        let (calls, stats) = replay(4, &events, 100);
        assert_eq!(
            calls,
            vec![
                (call(B, 200, 12, 3, 3, 1, true, false), vec![A, B]),
                (call(A, 100, 10, 10, 10, 1, true, false), vec![MAIN, A]),
                (call(A, 200, 5, 20, 17, 0, true, false), vec![A]),
                (call(MAIN, 100, 0, 30, 20, 0, true, false), vec![MAIN]),
                (call(C, 200, 41, 1, 1, 0, true, false), vec![C]),
                (call(C, 100, 40, 3, 3, 0, true, false), vec![C]),
            ]
        );
        assert_eq!(stats.threads, 2);
        assert_eq!(stats.last_timestamp_ns, 43);
    }

    #[test]
    fn replay_ignores_and_counts_exits_without_entry() {
        let events = [
            // Running at attach: nothing on the stack.
            Event::exit(5, 1, A),
            Event::entry(10, 1, MAIN),
            // Not on the (non-empty) stack either.
            Event::exit(15, 1, B),
            Event::exit(20, 1, MAIN),
            // main itself was called before attach on another thread.
            Event::exit(30, 2, MAIN),
        ];
        let (calls, stats) = replay(3, &events, 100);
        assert_eq!(
            calls,
            vec![(call(MAIN, 1, 10, 10, 10, 0, true, false), vec![MAIN])]
        );
        assert_eq!(stats.unmatched_exits, 3);
        assert_eq!(stats.unfinished_calls, 0);
        assert_eq!(stats.threads, 2);
    }

    #[test]
    fn replay_finish_closes_open_calls_innermost_first() {
        let events = [
            Event::entry(0, 1, MAIN),
            Event::entry(10, 1, A),
            Event::entry(20, 1, B),
            Event::exit(30, 1, B),
            Event::entry(40, 2, C),
        ];
        let (calls, stats) = replay(4, &events, 100);
        assert_eq!(
            calls,
            vec![
                (call(B, 1, 20, 10, 10, 2, true, false), vec![MAIN, A, B]),
                (call(A, 1, 10, 90, 80, 1, false, false), vec![MAIN, A]),
                (call(MAIN, 1, 0, 100, 10, 0, false, false), vec![MAIN]),
                (call(C, 2, 40, 60, 60, 0, false, false), vec![C]),
            ]
        );
        assert_eq!(stats.unfinished_calls, 3);
        assert_eq!(stats.last_timestamp_ns, 40);
    }

    #[test]
    fn replay_finish_before_a_start_gives_zero_duration() {
        let (calls, _) = replay(1, &[Event::entry(50, 1, MAIN)], 10);
        assert_eq!(calls[0].0, call(MAIN, 1, 50, 0, 0, 0, false, false));
    }

    #[test]
    fn replay_exit_deeper_in_the_stack_unwinds_the_frames_above() {
        let events = [
            Event::entry(0, 1, MAIN),
            Event::entry(10, 1, A),
            Event::entry(20, 1, B),
            Event::entry(30, 1, C),
            // The returns of c and b were lost (longjmp, uretprobe nesting limit).
            Event::exit(50, 1, A),
            Event::exit(60, 1, MAIN),
        ];
        let (calls, stats) = replay(4, &events, 100);
        assert_eq!(
            calls,
            vec![
                (call(C, 1, 30, 20, 20, 3, false, false), vec![MAIN, A, B, C]),
                (call(B, 1, 20, 30, 10, 2, false, false), vec![MAIN, A, B]),
                (call(A, 1, 10, 40, 10, 1, true, false), vec![MAIN, A]),
                (call(MAIN, 1, 0, 60, 20, 0, true, false), vec![MAIN]),
            ]
        );
        assert_eq!(stats.unfinished_calls, 2);
        assert_eq!(stats.unmatched_exits, 0);
    }

    #[test]
    fn replay_unwinds_to_the_innermost_frame_of_a_recursive_function() {
        let events = [
            Event::entry(0, 1, A),
            Event::entry(10, 1, A),
            Event::entry(20, 1, B),
            Event::exit(30, 1, A),
        ];
        let (calls, stats) = replay(3, &events, 40);
        assert_eq!(
            calls,
            vec![
                (call(B, 1, 20, 10, 10, 2, false, false), vec![A, A, B]),
                (call(A, 1, 10, 20, 10, 1, true, true), vec![A, A]),
                (call(A, 1, 0, 40, 20, 0, false, false), vec![A]),
            ]
        );
        assert_eq!(stats.unfinished_calls, 2);
    }

    #[test]
    fn replay_ignores_and_counts_out_of_range_function_ids() {
        let events = [
            Event::entry(0, 1, MAIN),
            Event::entry(5, 1, 4),
            Event::exit(6, 1, 4),
            Event::exit(7, 1, 0x7fff_ffff),
            Event {
                timestamp_ns: u64::MAX,
                tid: 1,
                function: u32::MAX,
                ..Event::default()
            },
            Event::exit(10, 1, MAIN),
        ];
        let (calls, stats) = replay(4, &events, 100);
        assert_eq!(
            calls,
            vec![(call(MAIN, 1, 0, 10, 10, 0, true, false), vec![MAIN])]
        );
        assert_eq!(stats.unknown_function_events, 4);
        assert_eq!(stats.last_timestamp_ns, 10);
    }

    #[test]
    fn replay_with_an_empty_table_ignores_everything() {
        let (calls, stats) = replay(0, &[Event::entry(0, 1, 0), Event::exit(1, 1, 0)], 5);
        assert!(calls.is_empty());
        assert_eq!(stats.unknown_function_events, 2);
        assert_eq!(stats.threads, 0);
    }

    #[test]
    fn replay_lent_counters_come_back_zeroed() {
        // Thread 1's counters go back to the spares after its outermost call and are lent to
        // thread 2: a leftover count would make thread 2's call look recursive.
        let events = [
            Event::entry(0, 1, A),
            Event::entry(1, 1, A),
            Event::exit(2, 1, A),
            Event::exit(3, 1, A),
            Event::entry(4, 2, A),
            Event::exit(5, 2, A),
            Event::entry(6, 1, A),
            Event::exit(7, 1, A),
        ];
        let (calls, _) = replay(2, &events, 10);
        let recursive: Vec<bool> = calls.iter().map(|(c, _)| c.recursive).collect();
        assert_eq!(recursive, vec![true, false, false, false]);
    }

    #[test]
    fn replay_deep_stack_does_not_overflow() {
        let depth = 100_000u64;
        let mut events = Vec::new();
        for i in 0..depth {
            events.push(Event::entry(i, 1, 0));
        }
        for i in 0..depth {
            events.push(Event::exit(depth + i, 1, 0));
        }
        let mut outermost = None;
        let mut replayer = Replayer::new(1);
        replayer.push_all(&events, &mut |call: &FinishedCall, _: &[FunctionId]| {
            if call.depth == 0 {
                outermost = Some(call.clone());
            }
        });
        let outermost = outermost.unwrap();
        assert_eq!(outermost.duration_ns, 2 * depth - 1);
        assert_eq!(outermost.self_ns, 2);
        assert!(!outermost.recursive);
    }

    /// Replays events with slots as [`replay`] does, and checks that every call carries the
    /// slot `slots` gives for its function and depth; returns the calls with their slots zeroed,
    /// to compare with [`call`] and [`skipped`].
    fn replay_slots(
        function_count: usize,
        events: &[Event],
        end_ns: u64,
    ) -> (Vec<(FinishedCall, Vec<FunctionId>)>, ReplayStats) {
        let (calls, stats) = replay(function_count, events, end_ns);
        let calls = calls
            .into_iter()
            .map(|(call, path)| {
                let entered = events.iter().any(|e| {
                    !e.is_exit() && e.timestamp_ns == call.start_ns && e.stack == call.slot
                });
                assert!(entered, "{call:?} has the slot of no entry at its start");
                (FinishedCall { slot: 0, ..call }, path)
            })
            .collect();
        (calls, stats)
    }

    /// An entry of `function` on thread 1 whose return address sits at `slot`.
    fn entry_at(ts: u64, function: FunctionId, slot: u32) -> Event {
        Event::entry(ts, 1, function).at_stack(slot)
    }

    fn exit_at(ts: u64, function: FunctionId, slot: u32) -> Event {
        Event::exit(ts, 1, function).at_stack(slot)
    }

    #[test]
    fn replay_pairs_by_slot_and_leaves_skipped_frames_untimed() {
        let events = [
            entry_at(0, MAIN, 0x1000),
            entry_at(10, A, 0x0f00),
            entry_at(20, B, 0x0e00),
            entry_at(25, C, 0x0d00),
            exit_at(27, C, 0x0d00),
            entry_at(30, C, 0x0d00),
            // The returns of c and b were skipped (the kernel's uretprobe limit, an exception).
            exit_at(50, A, 0x0f00),
            exit_at(60, MAIN, 0x1000),
        ];
        let (calls, stats) = replay_slots(4, &events, 100);
        assert_eq!(
            calls,
            vec![
                (call(C, 1, 25, 2, 2, 3, true, false), vec![MAIN, A, B, C]),
                (skipped(C, 30, 3, false), vec![MAIN, A, B, C]),
                // b's known child does not make b's time known.
                (skipped(B, 20, 2, false), vec![MAIN, A, B]),
                // a's time is exact; the untimed b but its timed child stays in its self time.
                (call(A, 1, 10, 40, 38, 1, true, false), vec![MAIN, A]),
                (call(MAIN, 1, 0, 60, 20, 0, true, false), vec![MAIN]),
            ]
        );
        assert_eq!(
            (
                stats.unknown_time_calls,
                stats.unfinished_calls,
                stats.unmatched_exits
            ),
            (2, 0, 0)
        );
    }

    #[test]
    fn replay_closes_frames_a_longjmp_left_at_the_next_call_above_them() {
        // main calls setjmp, then a → b → c, and c longjmps back into main, which calls a again
        // at the same slot: a, b and c of the first round are gone.
        let events = [
            entry_at(0, MAIN, 0x1000),
            entry_at(10, A, 0x0f00),
            entry_at(20, B, 0x0e00),
            entry_at(30, C, 0x0d00),
            entry_at(40, A, 0x0f00),
            entry_at(45, B, 0x0e00),
            exit_at(50, B, 0x0e00),
            exit_at(60, A, 0x0f00),
            // A call above the frames on the stack (main's caller's slot reused) ends them too.
            entry_at(70, C, 0x1008),
            exit_at(80, C, 0x1008),
        ];
        let (calls, stats) = replay_slots(4, &events, 100);
        assert_eq!(
            calls,
            vec![
                (skipped(C, 30, 3, false), vec![MAIN, A, B, C]),
                (skipped(B, 20, 2, false), vec![MAIN, A, B]),
                (skipped(A, 10, 1, false), vec![MAIN, A]),
                (call(B, 1, 45, 5, 5, 2, true, false), vec![MAIN, A, B]),
                (call(A, 1, 40, 20, 15, 1, true, false), vec![MAIN, A]),
                (skipped(MAIN, 0, 0, false), vec![MAIN]),
                (call(C, 1, 70, 10, 10, 0, true, false), vec![C]),
            ]
        );
        assert_eq!(stats.unknown_time_calls, 4);
    }

    #[test]
    fn replay_keeps_a_tail_call_at_its_callers_slot_inside_it() {
        // a jumps to b, so b's return address is a's; with uretprobes both exits come at b's
        // return, b's first. Then a jumps to itself (a self tail call, as SQLite's
        // sqlite3WhereSplit): nested and timed the same way.
        let events = [
            entry_at(0, MAIN, 0x1000),
            entry_at(10, A, 0x0f00),
            entry_at(15, B, 0x0f00),
            exit_at(30, B, 0x0f00),
            exit_at(31, A, 0x0f00),
            entry_at(40, A, 0x0f00),
            entry_at(42, C, 0x0e00),
            exit_at(43, C, 0x0e00),
            entry_at(45, A, 0x0f00),
            exit_at(50, A, 0x0f00),
            exit_at(51, A, 0x0f00),
            exit_at(60, MAIN, 0x1000),
        ];
        let (calls, stats) = replay_slots(4, &events, 100);
        assert_eq!(
            calls,
            vec![
                (call(B, 1, 15, 15, 15, 2, true, false), vec![MAIN, A, B]),
                (call(A, 1, 10, 21, 6, 1, true, false), vec![MAIN, A]),
                (call(C, 1, 42, 1, 1, 2, true, false), vec![MAIN, A, C]),
                (call(A, 1, 45, 5, 5, 2, true, true), vec![MAIN, A, A]),
                (call(A, 1, 40, 11, 5, 1, true, false), vec![MAIN, A]),
                (call(MAIN, 1, 0, 60, 28, 0, true, false), vec![MAIN]),
            ]
        );
        assert_eq!((stats.unknown_time_calls, stats.unmatched_exits), (0, 0));
    }

    #[test]
    fn replay_tells_a_call_again_after_a_longjmp_from_a_self_tail_call() {
        // a at 0x0f00 calls b, which longjmps back into main; main calls a again at the same
        // slot: the first a and its b are gone. Then a longjmps itself (b untraced) and main
        // calls a again: nested under the first as a tail call would be, until any event but
        // the first one's exit comes right after the second one's exit.
        let events = [
            entry_at(0, MAIN, 0x1000),
            entry_at(10, A, 0x0f00),
            entry_at(15, B, 0x0e00),
            entry_at(20, A, 0x0f00),
            entry_at(30, A, 0x0f00),
            exit_at(35, A, 0x0f00),
            entry_at(40, C, 0x0f00),
            exit_at(45, C, 0x0f00),
            exit_at(60, MAIN, 0x1000),
        ];
        let (calls, stats) = replay_slots(4, &events, 100);
        assert_eq!(
            calls,
            vec![
                (skipped(B, 15, 2, false), vec![MAIN, A, B]),
                (skipped(A, 10, 1, false), vec![MAIN, A]),
                (call(A, 1, 30, 5, 5, 2, true, true), vec![MAIN, A, A]),
                // Untimed, and the recursive call inside it stands for it.
                (
                    FinishedCall {
                        recursion_ns: 5,
                        ..skipped(A, 20, 1, false)
                    },
                    vec![MAIN, A],
                ),
                (call(C, 1, 40, 5, 5, 1, true, false), vec![MAIN, C]),
                (call(MAIN, 1, 0, 60, 50, 0, true, false), vec![MAIN]),
            ]
        );
        assert_eq!((stats.unknown_time_calls, stats.unmatched_exits), (3, 0));
    }

    #[test]
    fn replay_counts_exits_whose_slot_matches_no_frame() {
        let events = [
            // Running at attach, and deeper than nothing.
            exit_at(5, A, 0x0f00),
            entry_at(10, B, 0x0e00),
            // The same function at another slot is another call: not b's exit.
            exit_at(15, B, 0x0d00),
            // Returning through a slot above b's: b is gone, and this is no exit of it either.
            exit_at(20, C, 0x1000),
            entry_at(30, B, 0x0e00),
            exit_at(40, B, 0x0e00),
        ];
        let (calls, stats) = replay_slots(4, &events, 100);
        assert_eq!(
            calls,
            vec![
                (skipped(B, 10, 0, false), vec![B]),
                (call(B, 1, 30, 10, 10, 0, true, false), vec![B]),
            ]
        );
        assert_eq!((stats.unmatched_exits, stats.unknown_time_calls), (3, 1));
    }

    #[test]
    fn replay_times_exactly_the_frames_whose_returns_came_in_deep_recursion() {
        // Recursion 200 deep; only the outer 64 returns are seen, as with uretprobes.
        let depth = 200u32;
        let slot = |level: u32| 0x8000_0000u32 - 0x40 * level;
        let mut events: Vec<Event> = (0..depth)
            .map(|level| entry_at(u64::from(level), A, slot(level)))
            .collect();
        events.extend(
            (0..64)
                .rev()
                .map(|level| exit_at(1000 - u64::from(level), A, slot(level))),
        );
        let (calls, stats) = replay_slots(2, &events, 2000);
        assert_eq!(calls.len(), depth as usize);
        assert!(calls[..136].iter().all(|(call, _)| !call.time_known));
        for (call, _) in &calls[136..] {
            let level = u64::from(call.depth);
            assert!(call.time_known && call.complete);
            assert_eq!(call.duration_ns, 1000 - level - level);
        }
        assert_eq!((stats.unknown_time_calls, stats.unmatched_exits), (136, 0));
    }

    #[test]
    fn replay_compares_slots_across_the_wrap_of_their_low_bits() {
        // The stack straddles a multiple of 4 GiB: deeper frames have larger low 32 bits.
        let events = [
            entry_at(0, MAIN, 0x0000_0010),
            entry_at(10, A, 0xffff_fff0),
            entry_at(20, B, 0xffff_ff00),
            exit_at(30, A, 0xffff_fff0),
            entry_at(40, C, 0xffff_fff0),
            exit_at(50, C, 0xffff_fff0),
            exit_at(60, MAIN, 0x0000_0010),
        ];
        let (calls, stats) = replay_slots(4, &events, 100);
        let functions: Vec<(FunctionId, bool)> = calls
            .iter()
            .map(|(call, _)| (call.function, call.time_known))
            .collect();
        assert_eq!(functions, [(B, false), (A, true), (C, true), (MAIN, true)]);
        assert_eq!(stats.unmatched_exits, 0);
    }

    #[test]
    fn replay_hands_the_timed_recursion_inside_an_untimed_call_to_it() {
        // a → a → a, the innermost one ends, the middle one too; then the outer one's return is
        // skipped. Its recursion_ns is the middle one's duration: the outermost timed a inside.
        let events = [
            entry_at(0, MAIN, 0x1000),
            entry_at(10, A, 0x0f00),
            entry_at(20, A, 0x0e00),
            entry_at(30, A, 0x0d00),
            exit_at(35, A, 0x0d00),
            exit_at(50, A, 0x0e00),
            entry_at(60, A, 0x0e00),
            entry_at(70, B, 0x0d00),
            entry_at(80, A, 0x0c00),
            exit_at(85, A, 0x0c00),
            exit_at(100, MAIN, 0x1000),
        ];
        let (calls, _) = replay_slots(3, &events, 200);
        let got: Vec<(FunctionId, bool, bool, u64, u64)> = calls
            .iter()
            .map(|(c, _)| {
                (
                    c.function,
                    c.time_known,
                    c.recursive,
                    c.duration_ns,
                    c.recursion_ns,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (A, true, true, 5, 0),
                (A, true, true, 30, 0),
                (A, true, true, 5, 0),
                (B, false, false, 0, 0),
                // Untimed and recursive: what it holds goes to the outer a.
                (A, false, true, 0, 0),
                (A, false, false, 0, 35),
                (MAIN, true, false, 100, 0),
            ]
        );
    }

    #[test]
    fn replay_an_exec_ends_the_calls_open_in_its_process_only() {
        let (pid, other) = (5, 9);
        let exec = Event {
            function: Event::PROCESS_EXECED,
            ..Event::entry(30, 5, 0).in_process(pid)
        };
        let events = [
            Event::entry(0, 5, MAIN).in_process(pid),
            Event::entry(10, 6, A).in_process(pid),
            Event::entry(15, 9, B).in_process(other),
            Event::entry(20, 5, A).in_process(pid),
            exec,
            // The new program starts a new tree on the same thread.
            Event::entry(40, 5, C).in_process(pid),
            Event::exit(50, 5, C).in_process(pid),
            Event::exit(60, 9, B).in_process(other),
        ];
        let (calls, stats) = replay(4, &events, 60);
        let ended: Vec<(FunctionId, u32, u64, u32, bool)> = calls
            .iter()
            .map(|(c, _)| (c.function, c.tid, c.duration_ns, c.depth, c.complete))
            .collect();
        assert_eq!(
            ended,
            [
                // Closed at the exec: both threads of the process, innermost first.
                (A, 5, 10, 1, false),
                (MAIN, 5, 30, 0, false),
                (A, 6, 20, 0, false),
                (C, 5, 10, 0, true),
                (B, 9, 45, 0, true),
            ]
        );
        assert!(calls
            .iter()
            .all(|(c, _)| c.pid == if c.tid == 9 { other } else { pid }));
        assert_eq!(
            (stats.unfinished_calls, stats.unknown_function_events),
            (3, 0)
        );
    }

    /// Two coroutines, ping and pong, each on a stack of its own, pass control to each other
    /// with `swapcontext` under a scheduler on the main stack; pong ends into the scheduler. The
    /// coroutines' stacks lie at `ping` and `pong`, below or above the main stack's 0x8000_0000:
    /// either way the calls follow the switches and no frame of the main stack is closed early.
    fn replay_coroutines(ping_at: u32, pong_at: u32) {
        let [schedule, swap, ping, pong, work, pass]: [FunctionId; 6] = [1, 2, 3, 4, 5, 6];
        let table = FunctionTable::of_names(&[
            "main",
            "schedule",
            "swapcontext@plt",
            "ping",
            "pong",
            "work",
            "pass_to",
        ]);
        let main = 0x8000_0000;
        let events = [
            entry_at(0, MAIN, main),
            entry_at(1, schedule, main - 0x40),
            entry_at(2, swap, main - 0x80),
            // makecontext's function starts on its own stack.
            entry_at(3, ping, ping_at),
            entry_at(4, work, ping_at - 0x40),
            exit_at(5, work, ping_at - 0x40),
            entry_at(6, pass, ping_at - 0x40),
            entry_at(7, swap, ping_at - 0x80),
            entry_at(8, pong, pong_at),
            entry_at(9, pass, pong_at - 0x40),
            entry_at(10, swap, pong_at - 0x80),
            // Back in ping, whose swapcontext returns.
            exit_at(11, swap, ping_at - 0x80),
            exit_at(12, pass, ping_at - 0x40),
            entry_at(13, pass, ping_at - 0x40),
            entry_at(14, swap, ping_at - 0x80),
            // Back in pong, whose calls were closed when it was left.
            exit_at(15, swap, pong_at - 0x80),
            exit_at(16, pass, pong_at - 0x40),
            entry_at(17, work, pong_at - 0x40),
            exit_at(18, work, pong_at - 0x40),
            exit_at(19, pong, pong_at),
            // pong's uc_link resumes the scheduler.
            exit_at(20, swap, main - 0x80),
            exit_at(21, schedule, main - 0x40),
            exit_at(22, MAIN, main),
        ];
        let mut calls = Vec::new();
        let mut sink = |call: &FinishedCall, stack: &[FunctionId]| {
            let time = call.time_known.then_some(call.duration_ns);
            calls.push((call.start_ns, stack.to_vec(), time));
        };
        let mut replayer = Replayer::for_table(&table);
        replayer.push_all(&events, &mut sink);
        let stats = replayer.finish(100, &mut sink);
        let (in_main, in_schedule) = (vec![MAIN, schedule], vec![MAIN, schedule, swap]);
        let in_ping = [in_schedule.clone(), vec![ping]].concat();
        let ping_passes = [in_ping.clone(), vec![pass, swap]].concat();
        let in_pong = [ping_passes.clone(), vec![pong]].concat();
        let expected = vec![
            (4, [in_ping.clone(), vec![work]].concat(), Some(1)),
            (10, [in_pong.clone(), vec![pass, swap]].concat(), None),
            (9, [in_pong.clone(), vec![pass]].concat(), None),
            (8, in_pong.clone(), None),
            (7, ping_passes.clone(), Some(4)),
            (6, [in_ping.clone(), vec![pass]].concat(), Some(6)),
            // pong, resumed, runs under the swapcontext that switched to it.
            (17, [ping_passes.clone(), vec![work]].concat(), Some(1)),
            (14, ping_passes.clone(), None),
            (13, [in_ping.clone(), vec![pass]].concat(), None),
            (3, in_ping, None),
            (2, in_schedule, Some(18)),
            (1, in_main, Some(20)),
            (0, vec![MAIN], Some(22)),
        ];
        assert_eq!(
            calls, expected,
            "ping at {ping_at:#x}, pong at {pong_at:#x}"
        );
        // pong's swapcontext and pass_to, and pong itself, had been closed when it was left.
        assert_eq!((stats.unmatched_exits, stats.unknown_time_calls), (3, 6));
    }

    #[test]
    fn replay_follows_coroutines_on_stacks_below_the_main_one() {
        replay_coroutines(0x1000_0000, 0x2000_0000);
        replay_coroutines(0x2000_0000, 0x1000_0000);
    }

    #[test]
    fn replay_follows_coroutines_on_stacks_above_the_main_one() {
        replay_coroutines(0xf000_0000, 0xe000_0000);
        replay_coroutines(0xe000_0000, 0xf000_0000);
        replay_coroutines(0x1000_0000, 0xf000_0000);
    }

    #[test]
    fn replay_without_a_switch_keeps_a_swapcontext_that_returns_at_once() {
        // swapcontext failed (or switched to its own context): its exit comes at its slot.
        let table = FunctionTable::of_names(&["main", "swapcontext@plt", "work"]);
        let events = [
            entry_at(0, MAIN, 0x1000),
            entry_at(1, 1, 0x0f00),
            exit_at(2, 1, 0x0f00),
            entry_at(3, 2, 0x0f00),
            exit_at(4, 2, 0x0f00),
            exit_at(5, MAIN, 0x1000),
        ];
        let mut paths = Vec::new();
        let mut sink = |call: &FinishedCall, stack: &[FunctionId]| {
            assert!(call.time_known);
            paths.push(stack.to_vec());
        };
        let mut replayer = Replayer::for_table(&table);
        replayer.push_all(&events, &mut sink);
        replayer.finish(10, &mut sink);
        assert_eq!(paths, vec![vec![MAIN, 1], vec![MAIN, 2], vec![MAIN]]);
    }

    #[test]
    fn a_plt_stub_reached_by_a_tail_jump_is_gone_at_the_next_call_of_its_own_module() {
        // cron calls zfree, which jumps to free@plt (its exit seen at the jump, the stub's never:
        // it returns to cron); then cron calls stop at the same slot. Or the stub's jump lands
        // in libc's free, traced, at the same slot: a callee of the stub.
        let mut table =
            FunctionTable::of_names(&["main", "cron", "zfree", "free@plt", "stop", "free"]);
        let (cron, zfree, stub, stop, free) = (1, 2, 3, 4, 5);
        table.functions[stub as usize].kind = FunctionKind::Plt;
        table.functions[free as usize].module = table.push_module("/lib/libc.so.6".into());
        let replay = |next: FunctionId| {
            let events = [
                entry_at(0, MAIN, 0x1000),
                entry_at(1, cron, 0x0f00),
                entry_at(2, zfree, 0x0e00),
                exit_at(3, zfree, 0x0e00),
                entry_at(4, stub, 0x0e00),
                entry_at(5, next, 0x0e00),
                exit_at(6, next, 0x0e00),
                exit_at(7, cron, 0x0f00),
                exit_at(8, MAIN, 0x1000),
            ];
            let mut calls = Vec::new();
            let mut sink = |call: &FinishedCall, stack: &[FunctionId]| {
                calls.push((stack.to_vec(), call.time_known));
            };
            let mut replayer = Replayer::for_table(&table);
            replayer.push_all(&events, &mut sink);
            replayer.finish(10, &mut sink);
            calls
        };
        let before = [(vec![MAIN, cron, zfree], true)];
        let after = [(vec![MAIN, cron], true), (vec![MAIN], true)];
        let mut stop_after_stub = before.to_vec();
        stop_after_stub.push((vec![MAIN, cron, stub], false));
        stop_after_stub.push((vec![MAIN, cron, stop], true));
        stop_after_stub.extend(after.clone());
        assert_eq!(replay(stop), stop_after_stub);
        let mut free_under_stub = before.to_vec();
        free_under_stub.push((vec![MAIN, cron, stub, free], true));
        free_under_stub.push((vec![MAIN, cron, stub], false));
        free_under_stub.extend(after);
        assert_eq!(replay(free), free_under_stub);
    }

    #[test]
    fn replay_closes_what_a_setcontext_back_to_a_getcontext_left_where_its_caller_returns() {
        // main → f, which saves its context (getcontext) and calls g; g goes back to it
        // (setcontext), and f calls h, then returns.
        let table =
            FunctionTable::of_names(&["main", "f", "getcontext@plt", "g", "setcontext@plt", "h"]);
        let (f, get, g, set, h) = (1, 2, 3, 4, 5);
        let events = [
            entry_at(0, MAIN, 0x1000),
            entry_at(1, f, 0x0f00),
            entry_at(2, get, 0x0e00),
            exit_at(3, get, 0x0e00),
            entry_at(4, g, 0x0e00),
            entry_at(5, set, 0x0d00),
            // getcontext returns again, at its call's slot.
            exit_at(6, get, 0x0e00),
            entry_at(7, h, 0x0e00),
            exit_at(8, h, 0x0e00),
            exit_at(9, f, 0x0f00),
            exit_at(10, MAIN, 0x1000),
        ];
        let mut calls = Vec::new();
        let mut sink = |call: &FinishedCall, stack: &[FunctionId]| {
            calls.push((stack.to_vec(), call.time_known.then_some(call.duration_ns)));
        };
        let mut replayer = Replayer::for_table(&table);
        replayer.push_all(&events, &mut sink);
        let stats = replayer.finish(100, &mut sink);
        let expected = vec![
            (vec![MAIN, f, get], Some(1)),
            // Until f returns, h seems to run under the setcontext.
            (vec![MAIN, f, g, set, h], Some(1)),
            (vec![MAIN, f, g, set], None),
            (vec![MAIN, f, g], None),
            (vec![MAIN, f], Some(8)),
            (vec![MAIN], Some(10)),
        ];
        assert_eq!(calls, expected);
        assert_eq!((stats.unmatched_exits, stats.unknown_time_calls), (1, 2));
    }
}
