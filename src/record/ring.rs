//! What the BPF programs leave in the ring buffers, parsed once as it is consumed: the events of
//! traced calls, which go to the drain in batches, and the notes the session acts on (a library
//! loaded, a followed process forked or exec'ed, a request to write a stack), one kind each.

use std::cell::RefCell;

use super::follow::ProcessChange;
use super::seizer::ServedPause;
use super::stack_writes::{MalformedRequest, StackWriteRequest};
use super::strings::UnreadStrings;
use crate::event::Event;
use crate::plan::ProbePlan;

/// A ring buffer record the session acts on.
#[derive(Debug, PartialEq, Eq)]
pub enum Note {
    /// A dlopen or dlclose returned: a library may have been mapped or unmapped (the process
    /// may wait stopped).
    LibrariesChanged,
    /// A followed process forked or exec'ed, and waits stopped (`--follow`).
    ProcessChanged(ProcessChange),
    /// The shadow stack asks for return addresses to be written; the process waits stopped.
    StackWrite(Result<StackWriteRequest, MalformedRequest>),
}

/// What the ring buffer callbacks gathered since the session last looked.
#[derive(Default)]
pub struct Inbox {
    /// The events of traced calls, in the order they were consumed.
    pub events: RefCell<Vec<Event>>,
    pub notes: RefCell<Vec<Note>>,
    /// The threads paused for a stack write since the session last let them go.
    pauses: RefCell<Vec<Pause>>,
    /// Reads the strings the probes could not.
    unread_strings: RefCell<UnreadStrings>,
}

/// A thread the shadow stack paused for the recorder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pause {
    pub pid: u32,
    pub tid: u32,
    /// CLOCK_MONOTONIC (the clock of the events) when it stopped, as near as the recorder knows.
    pub since_ns: u64,
}

/// How long before its request is read a paused thread's last event may be and still mark when
/// it stopped. The probe that pauses it writes that event moments before its request (the
/// re-arm at a traced event), or the thread's last traced event came just before the unwinder's
/// entry (a `throw` calls it right away), and the recorder reads both in tens of µs; an older
/// event is of work the program did before (a throw after a long computation), and the pause is
/// then counted from when its request was read.
const PAUSE_LEAD_MAX_NS: u64 = 2_000_000;

impl Inbox {
    /// An inbox whose events get the strings their probes could not read from `unread_strings`.
    pub fn new(unread_strings: UnreadStrings) -> Inbox {
        Inbox {
            unread_strings: RefCell::new(unread_strings),
            ..Inbox::default()
        }
    }

    /// Takes in the functions and files planned since it last did (the first time: all).
    pub fn planned(&self, plan: &ProbePlan) {
        self.unread_strings.borrow_mut().learn(plan);
    }

    /// Takes one record of the events ring buffer. A short record cannot come from our
    /// programs; it is skipped rather than stopping the recording. The bytes after the event
    /// are the call's captured values: they go before it, as value pieces, with the strings the
    /// probe could not read read here.
    pub fn take_event_record(&self, bytes: &[u8]) {
        let mut event = Event::default();
        if plain::copy_from_bytes(&mut event, bytes).is_err() {
            return;
        }
        let values = &bytes[std::mem::size_of::<Event>()..];
        if !values.is_empty() {
            let read = self.unread_strings.borrow_mut().read_into(&event, values);
            let mut events = self.events.borrow_mut();
            events.extend(Event::value_pieces(
                &event,
                read.as_deref().unwrap_or(values),
            ));
            events.push(event);
            return;
        }
        if event.function == Event::LIBRARIES_CHANGED {
            self.notes.borrow_mut().push(Note::LibrariesChanged);
        } else if let Some(change) = ProcessChange::of(&event) {
            self.notes.borrow_mut().push(Note::ProcessChanged(change));
            // Kept in the trace: the replayer ends the calls the exec cut short.
            if event.function == Event::PROCESS_EXECED {
                self.events.borrow_mut().push(event);
            }
        } else {
            self.events.borrow_mut().push(event);
        }
    }

    /// Takes one record of the stack writes ring buffer: its thread waits paused, since its last
    /// event (read just before, from the events ring buffer) or since now.
    pub fn take_stack_write_record(&self, bytes: &[u8]) {
        let request = StackWriteRequest::parse(bytes);
        if let Ok(request) = &request {
            let read_ns = super::monotonic_now_ns();
            let (_, last_ns) = pause_place(&self.events.borrow(), request.tid, read_ns);
            self.pauses.borrow_mut().push(Pause {
                pid: request.pid,
                tid: request.tid,
                since_ns: last_ns.unwrap_or(read_ns),
            });
        }
        self.notes.borrow_mut().push(Note::StackWrite(request));
    }

    /// The threads have been let go at `resumed_ns`: each pause since the last look becomes a
    /// call of `function` (`[utrace: stack repair]`) on its thread, from when its request was
    /// read, among the events. The threads' own events all came before (they were stopped).
    pub fn pauses_ended(&self, function: crate::table::FunctionId, resumed_ns: u64) {
        let mut events = self.events.borrow_mut();
        for pause in self.pauses.take() {
            let entry = Event::entry(pause.since_ns, pause.tid, function).in_process(pause.pid);
            let exit = Event::exit(resumed_ns.max(pause.since_ns), pause.tid, function);
            events.extend([entry, exit.in_process(pause.pid)]);
        }
    }

    /// Pauses the ptrace tracer served (`-p`): each becomes a call of `function` on its thread,
    /// put among the thread's events where it happened. The thread ran on at once, so events of
    /// after the pause may be here already: the call goes before the first of them.
    pub fn place_served_pauses(&self, function: crate::table::FunctionId, pauses: &[ServedPause]) {
        let mut events = self.events.borrow_mut();
        for pause in pauses {
            let (at, since_ns) = pause_place(&events, pause.tid, pause.stopped_ns);
            let since_ns = since_ns.unwrap_or(pause.stopped_ns);
            let entry = Event::entry(since_ns, pause.tid, function).in_process(pause.pid);
            let exit = Event::exit(pause.resumed_ns.max(since_ns), pause.tid, function);
            events.splice(at..at, [entry, exit.in_process(pause.pid)]);
        }
    }

    /// The notes gathered so far, in the order they came.
    pub fn take_notes(&self) -> Vec<Note> {
        self.notes.take()
    }
}

/// Where among `events` the pause of thread `tid`, seen stopped at `seen_ns`, goes: before the
/// thread's first event after that (and the value pieces before it), at the end if none; and
/// when it stopped: at the thread's last event before, if recent enough to be the one whose probe
/// paused it (see [`PAUSE_LEAD_MAX_NS`]). One pass from the end, where a pause's neighbours are:
/// a program that throws pauses thousands of times a second.
fn pause_place(events: &[Event], tid: u32, seen_ns: u64) -> (usize, Option<u64>) {
    let mut at = events.len();
    let mut since_ns = None;
    for (index, event) in events.iter().enumerate().rev() {
        if event.tid() != tid || event.function == Event::VALUES {
            continue;
        }
        if event.timestamp_ns <= seen_ns {
            since_ns = Some(event.timestamp_ns).filter(|&last| seen_ns - last <= PAUSE_LEAD_MAX_NS);
            break;
        }
        at = index;
    }
    let pieces = (events[..at].iter().rev())
        .take_while(|event| event.tid() == tid && event.function == Event::VALUES)
        .count();
    (at - pieces, since_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(event: &Event) -> Vec<u8> {
        // SAFETY: `Event` is plain old data (see event.rs); its bytes are what BPF writes.
        unsafe { plain::as_bytes(event) }.to_vec()
    }

    #[test]
    fn records_are_sorted_into_events_and_notes() {
        let inbox = Inbox::default();
        let call = Event::entry(1, 7, 3).in_process(7);
        let loaded = Event {
            function: Event::LIBRARIES_CHANGED,
            ..call
        };
        let forked = Event {
            function: Event::PROCESS_FORKED,
            ..Event::entry(2, 7, 0).in_process(9).at_stack(7)
        };
        let execed = Event {
            function: Event::PROCESS_EXECED,
            ..Event::entry(3, 9, 0).in_process(9)
        };
        for event in [&call, &loaded, &forked, &execed] {
            inbox.take_event_record(&bytes(event));
        }
        let mut with_values = bytes(&call);
        with_values.extend(1..=9);
        inbox.take_event_record(&with_values);
        inbox.take_event_record(&[1, 2, 3]);
        inbox.take_stack_write_record(&[1]);
        let pieces: Vec<Event> = Event::value_pieces(&call, &with_values[24..]).collect();
        assert_eq!(pieces.len(), 2);
        assert_eq!(
            *inbox.events.borrow(),
            [call, execed, pieces[0], pieces[1], call]
        );
        assert_eq!(
            inbox.take_notes(),
            [
                Note::LibrariesChanged,
                Note::ProcessChanged(ProcessChange::Forked {
                    child: 9,
                    parent: 7
                }),
                Note::ProcessChanged(ProcessChange::Execed { pid: 9 }),
                Note::StackWrite(Err(MalformedRequest(1))),
            ]
        );
        assert!(inbox.take_notes().is_empty());
    }

    /// A pause becomes a call of the stack repair on the paused thread, from its last event (the
    /// one whose probe paused it) to when the threads were let go; from when its request was read
    /// when the thread has no recent event.
    #[test]
    fn a_pause_becomes_a_call_on_its_thread() {
        let inbox = Inbox::default();
        let request = |tid: u32| {
            let mut bytes = vec![0u8; 16];
            bytes[..4].copy_from_slice(&42u32.to_ne_bytes());
            bytes[8..12].copy_from_slice(&tid.to_ne_bytes());
            bytes
        };
        let now = crate::record::monotonic_now_ns();
        let paused_at = Event::entry(now - 5_000, 43, 3).in_process(42);
        inbox.take_event_record(&bytes(&paused_at));
        inbox.take_event_record(&bytes(&Event::entry(now - 1_000, 44, 3).in_process(42)));
        inbox.take_stack_write_record(&request(43));
        // Thread 45's last event is long gone: from when its request was read.
        inbox.take_event_record(&bytes(&Event::entry(now - 9_000_000, 45, 3).in_process(42)));
        inbox.take_stack_write_record(&request(45));
        let read = inbox.pauses.borrow()[1].since_ns;
        assert!(read >= now);
        inbox.events.borrow_mut().clear();
        inbox.pauses_ended(9, read + 300);
        assert_eq!(
            *inbox.events.borrow(),
            [
                Event::entry(now - 5_000, 43, 9).in_process(42),
                Event::exit(read + 300, 43, 9).in_process(42),
                Event::entry(read, 45, 9).in_process(42),
                Event::exit(read + 300, 45, 9).in_process(42),
            ]
        );
        inbox.pauses_ended(9, read + 400);
        assert_eq!(inbox.events.borrow().len(), 4);
    }

    /// A pause the ptrace tracer served goes among its thread's events where it happened: from
    /// the thread's last event before it (the one whose probe paused it) to its resume, before
    /// the thread's next event and that event's value pieces.
    #[test]
    fn a_served_pause_goes_where_it_happened() {
        let inbox = Inbox::default();
        let paused_at = Event::entry(1_000, 43, 3).in_process(42);
        let other_thread = Event::entry(2_000, 44, 3).in_process(42);
        let next = Event::entry(9_000, 43, 4).in_process(42);
        let pieces: Vec<Event> = Event::value_pieces(&next, &[1; 12]).collect();
        inbox.take_event_record(&bytes(&paused_at));
        inbox.take_event_record(&bytes(&other_thread));
        let mut with_values = bytes(&next);
        with_values.extend([1; 12]);
        inbox.take_event_record(&with_values);
        let pause = ServedPause {
            pid: 42,
            tid: 43,
            stopped_ns: 1_500,
            resumed_ns: 8_000,
        };
        inbox.place_served_pauses(9, &[pause]);
        let expected = [
            paused_at,
            other_thread,
            Event::entry(1_000, 43, 9).in_process(42),
            Event::exit(8_000, 43, 9).in_process(42),
            pieces[0],
            pieces[1],
            next,
        ];
        assert_eq!(*inbox.events.borrow(), expected);
        // Its next events not yet consumed: at the end, from when the tracer saw it.
        let later = ServedPause {
            stopped_ns: 20_000_000,
            resumed_ns: 20_000_500,
            ..pause
        };
        inbox.place_served_pauses(9, &[later]);
        assert_eq!(
            inbox.events.borrow()[expected.len()..],
            [
                Event::entry(20_000_000, 43, 9).in_process(42),
                Event::exit(20_000_500, 43, 9).in_process(42),
            ]
        );
    }
}
