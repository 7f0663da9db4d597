//! The writer thread: event batches go to disk here, so the ring buffer consumer never waits on
//! the file system.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;

use crate::data::{DataError, DataWriter};
use crate::event::Event;

/// Events per batch the consumer allocates for; batches are recycled, so this is also roughly
/// the largest chunk written.
pub const BATCH_EVENTS: usize = 64 * 1024;

/// A [`DataWriter`] running on its own thread.
pub struct WriterThread {
    batches: Sender<Vec<Event>>,
    recycled: Receiver<Vec<Event>>,
    thread: JoinHandle<Result<DataWriter, DataError>>,
}

impl WriterThread {
    pub fn start(mut writer: DataWriter) -> WriterThread {
        let (batches, incoming) = channel::<Vec<Event>>();
        let (give_back, recycled) = channel();
        let thread = std::thread::Builder::new()
            .name("utrace-writer".into())
            .spawn(move || {
                for mut batch in incoming {
                    writer.write_events(&batch)?;
                    batch.clear();
                    // The consumer may have finished already; then the batch is simply freed.
                    let _ = give_back.send(batch);
                }
                Ok(writer)
            })
            .expect("spawning the writer thread");
        WriterThread {
            batches,
            recycled,
            thread,
        }
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
        self.batches.send(batch).is_ok()
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
