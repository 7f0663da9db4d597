//! What the BPF programs leave in the ring buffers, parsed once as it is consumed: the events of
//! traced calls, which go to the drain in batches, and the notes the session acts on (a library
//! loaded, a followed process forked or exec'ed, a request to write a stack), one kind each.

use std::cell::RefCell;

use super::follow::ProcessChange;
use super::stack_writes::{MalformedRequest, StackWriteRequest};
use crate::event::Event;

/// A ring buffer record the session acts on.
#[derive(Debug, PartialEq, Eq)]
pub enum Note {
    /// A dlopen returned: a library may have been mapped (the process may wait stopped).
    LibraryLoaded,
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
}

impl Inbox {
    /// Takes one record of the events ring buffer. A short record cannot come from our
    /// programs; it is skipped rather than stopping the recording. The bytes after the event
    /// are the call's captured values: they go before it, as value pieces.
    pub fn take_event_record(&self, bytes: &[u8]) {
        let mut event = Event::default();
        if plain::copy_from_bytes(&mut event, bytes).is_err() {
            return;
        }
        let values = &bytes[std::mem::size_of::<Event>()..];
        if !values.is_empty() {
            let mut events = self.events.borrow_mut();
            events.extend(Event::value_pieces(&event, values));
            events.push(event);
            return;
        }
        if event.function == Event::LIBRARY_LOADED {
            self.notes.borrow_mut().push(Note::LibraryLoaded);
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

    /// Takes one record of the stack writes ring buffer.
    pub fn take_stack_write_record(&self, bytes: &[u8]) {
        let request = StackWriteRequest::parse(bytes);
        self.notes.borrow_mut().push(Note::StackWrite(request));
    }

    /// The notes gathered so far, in the order they came.
    pub fn take_notes(&self) -> Vec<Note> {
        self.notes.take()
    }
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
            function: Event::LIBRARY_LOADED,
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
                Note::LibraryLoaded,
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
}
