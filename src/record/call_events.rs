//! Record-time filtering (`--max-depth`, `--time-filter`, `--tid-filter`): the drained events go
//! through the replayer and the same filter the reports use, and the calls it shows are written
//! back as events, so the file holds only what is shown and reads like any other: with their
//! return-address slots, so a call whose return was skipped stays one of unknown time.

use std::cell::RefCell;

use crate::event::Event;
use crate::replay::{CallEntry, CallSink, FinishedCall};
use crate::table::FunctionId;

/// A sink that turns calls back into entry and exit events, in the order it gets them (per
/// thread, the order they happened). A call whose exit was never seen gets no exit event, as in
/// the raw trace.
pub struct CallEvents<'a> {
    out: &'a RefCell<Vec<Event>>,
}

impl<'a> CallEvents<'a> {
    pub fn new(out: &'a RefCell<Vec<Event>>) -> CallEvents<'a> {
        CallEvents { out }
    }
}

impl CallSink for CallEvents<'_> {
    /// Kept, so the file's replay ends the exec'ed process's calls there too.
    fn process_execed(&mut self, note: &Event) {
        self.out.borrow_mut().push(*note);
    }

    /// Kept, so the file's replay closes the frames the unwinder skipped there too.
    fn unwound(&mut self, note: &Event) {
        self.out.borrow_mut().push(*note);
    }

    fn call_entered(&mut self, entry: &CallEntry, _stack: &[FunctionId]) {
        let event = Event::entry(entry.start_ns, entry.tid, entry.function)
            .on_cpu(entry.cpu)
            .at_stack(entry.slot)
            .in_process(entry.pid);
        push_with_values(&mut self.out.borrow_mut(), event, entry.arguments);
    }

    fn call_finished(&mut self, call: &FinishedCall, _stack: &[FunctionId]) {
        if call.complete {
            let event = Event::exit(call.end_ns, call.tid, call.function)
                .on_cpu(call.cpu)
                .at_stack(call.slot)
                .in_process(call.pid);
            let returned = call.values.returned.as_deref();
            push_with_values(&mut self.out.borrow_mut(), event, returned);
        }
    }
}

/// Pushes `event`, after the pieces of its captured `values` if it has any.
fn push_with_values(out: &mut Vec<Event>, event: Event, values: Option<&[u8]>) {
    if let Some(values) = values {
        out.extend(Event::value_pieces(&event, values));
    }
    out.push(event);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::{FilterSpec, FilteredSink};
    use crate::replay::Replayer;
    use crate::table::FunctionTable;

    #[test]
    fn the_shown_calls_come_back_as_the_same_events() {
        let (main, a, b) = (0, 1, 2);
        let events = [
            Event::entry(0, 7, main),
            Event::entry(10, 7, a),
            Event::entry(20, 7, b),
            Event::exit(25, 7, b),
            Event::exit(40, 7, a),
            Event::exit(100, 7, main),
        ];
        // Depth 2 hides b: its events go, the others stay exactly as they were.
        let kept: Vec<Event> = [0, 1, 4, 5].iter().map(|&i| events[i]).collect();
        assert_eq!(encode_two_deep(&events, 100), kept);
    }

    /// The events of main, a and b (ids 0 to 2) that `--max-depth 2` keeps, as the encoder
    /// writes them, the trace closed at `end_ns`.
    fn encode_two_deep(events: &[Event], end_ns: u64) -> Vec<Event> {
        let table = FunctionTable::of_names(&["main", "a", "b"]);
        let out = RefCell::new(Vec::new());
        let mut encoder = CallEvents::new(&out);
        let spec = FilterSpec::parse(&[], &[], Some(2), None, &[]).unwrap();
        let mut filtered = FilteredSink::new(&spec, &table, &mut encoder);
        let mut replayer = Replayer::new(3);
        replayer.push_all(events, &mut filtered);
        replayer.finish(end_ns, &mut filtered);
        out.into_inner()
    }

    #[test]
    fn a_call_of_unknown_time_stays_one_with_its_slot() {
        // main → a → b, and a longjmp back into main, which calls a again.
        let (main, a, b) = (0, 1, 2);
        let events = [
            Event::entry(0, 7, main).at_stack(0x1000),
            Event::entry(10, 7, a).at_stack(0x0f00),
            Event::entry(20, 7, b).at_stack(0x0e00),
            Event::entry(30, 7, a).at_stack(0x0f00),
            Event::exit(40, 7, a).at_stack(0x0f00),
            Event::exit(50, 7, main).at_stack(0x1000),
        ];
        let kept = encode_two_deep(&events, 50);
        let expected: Vec<Event> = [0, 1, 3, 4, 5].iter().map(|&i| events[i]).collect();
        assert_eq!(kept, expected);
        let mut again = Replayer::new(3);
        again.push_all(
            &kept,
            &mut |_: &crate::replay::FinishedCall, _: &[FunctionId]| {},
        );
        assert_eq!(
            again
                .finish(50, &mut |_: &_, _: &[_]| {})
                .unknown_time_calls,
            1
        );
    }

    #[test]
    fn a_call_that_never_returned_keeps_only_its_entry() {
        let out = RefCell::new(Vec::new());
        let mut encoder = CallEvents::new(&out);
        let mut replayer = Replayer::new(1);
        replayer.push(&Event::entry(5, 1, 0), &mut encoder);
        replayer.finish(50, &mut encoder);
        assert_eq!(out.into_inner(), [Event::entry(5, 1, 0)]);
    }

    #[test]
    fn an_exec_note_is_kept_where_it_came() {
        let out = RefCell::new(Vec::new());
        let mut encoder = CallEvents::new(&out);
        let exec = Event {
            function: Event::PROCESS_EXECED,
            ..Event::entry(20, 1, 0).in_process(1)
        };
        let mut replayer = Replayer::new(2);
        for event in [
            Event::entry(5, 1, 0).in_process(1),
            exec,
            Event::entry(30, 1, 1).in_process(1),
        ] {
            replayer.push(&event, &mut encoder);
        }
        assert_eq!(
            out.into_inner(),
            [
                Event::entry(5, 1, 0).in_process(1),
                exec,
                Event::entry(30, 1, 1).in_process(1)
            ]
        );
    }
}
