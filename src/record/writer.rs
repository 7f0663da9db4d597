//! The writer thread: event batches are encoded and go to disk here, so the ring buffer consumer
//! never waits on the encoding nor on the file system.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::data::{DataError, DataWriter};
use crate::event::Event;
use crate::table::{Detachment, FunctionTable};

/// Events per batch the consumer allocates for; batches are recycled, so this is also roughly
/// the largest chunk written.
pub const BATCH_EVENTS: usize = 64 * 1024;
/// What an event queued is counted at before any is written: encoded as its change from the one
/// before (a tag byte and varints), one takes 3 to 8 bytes, chunk headers included.
const EVENT_BYTES_FIRST_GUESS: u64 = 8;

/// What the writer thread writes, in order.
enum Item {
    Events(Vec<Event>),
    MoreFunctions(FunctionTable),
    Detachments(Vec<Detachment>),
}

/// A [`DataWriter`] running on its own thread.
pub struct WriterThread {
    batches: Sender<Item>,
    recycled: Receiver<Vec<Event>>,
    thread: JoinHandle<Result<DataWriter, DataError>>,
    /// What the thread has written so far.
    written: Arc<Written>,
    /// Events queued so far.
    sent_events: Cell<u64>,
}

/// The bytes and events the writer thread has written, as it goes.
#[derive(Default)]
struct Written {
    bytes: AtomicU64,
    events: AtomicU64,
}

impl WriterThread {
    pub fn start(mut writer: DataWriter) -> WriterThread {
        let (batches, incoming) = channel::<Item>();
        let (give_back, recycled) = channel();
        let written = Arc::new(Written::default());
        written
            .bytes
            .store(writer.bytes_written(), Ordering::Relaxed);
        let progress = written.clone();
        let thread = std::thread::Builder::new()
            .name("utrace-writer".into())
            .spawn(move || {
                for item in incoming {
                    match item {
                        Item::Events(mut batch) => {
                            writer.write_events(&batch)?;
                            progress
                                .events
                                .fetch_add(batch.len() as u64, Ordering::Relaxed);
                            batch.clear();
                            // The consumer may have finished; then the batch is simply freed.
                            let _ = give_back.send(batch);
                        }
                        Item::MoreFunctions(more) => writer.write_more_functions(&more)?,
                        Item::Detachments(detached) => writer.write_detachments(&detached)?,
                    }
                    progress
                        .bytes
                        .store(writer.bytes_written(), Ordering::Relaxed);
                }
                Ok(writer)
            })
            .expect("spawning the writer thread");
        WriterThread {
            batches,
            recycled,
            thread,
            written,
            sent_events: Cell::new(0),
        }
    }

    /// About how long the file will be once what is queued is written: the bytes written, and
    /// the events queued since at the bytes an event has taken so far.
    pub fn size_estimate(&self) -> u64 {
        let bytes = self.written.bytes.load(Ordering::Relaxed);
        let written_events = self.written.events.load(Ordering::Relaxed);
        let queued = self.sent_events.get().saturating_sub(written_events);
        let per_event = match written_events {
            0 => EVENT_BYTES_FIRST_GUESS,
            events => bytes.div_ceil(events),
        };
        bytes.saturating_add(queued.saturating_mul(per_event))
    }

    /// An empty batch, reusing one the writer has finished with when there is one.
    pub fn empty_batch(&self) -> Vec<Event> {
        self.recycled
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH_EVENTS))
    }

    /// Queues a batch for writing. Returns false when the writer has stopped on an error, which
    /// [`WriterThread::finish`] then reports.
    pub fn send(&self, batch: Vec<Event>) -> bool {
        self.sent_events
            .set(self.sent_events.get() + batch.len() as u64);
        self.batches.send(Item::Events(batch)).is_ok()
    }

    /// Queues functions planned during the recording; false as for [`WriterThread::send`].
    pub fn send_more_functions(&self, more: FunctionTable) -> bool {
        self.batches.send(Item::MoreFunctions(more)).is_ok()
    }

    /// Queues functions `--budget` detached; false as for [`WriterThread::send`].
    pub fn send_detachments(&self, detached: Vec<Detachment>) -> bool {
        self.batches.send(Item::Detachments(detached)).is_ok()
    }

    /// Waits up to `limit` until every batch queued is written (and flushed to the OS, where a
    /// killed utrace cannot lose it); whether it was.
    pub fn wait_written(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.written.events.load(Ordering::Relaxed) < self.sent_events.get() {
            // Stopped on an error, which finish() reports.
            if self.thread.is_finished() || Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Waits until every queued batch is written and hands the writer back.
    pub fn finish(self) -> Result<DataWriter, DataError> {
        drop(self.batches);
        match self.thread.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}
