//! The writer thread: event batches are encoded and go to disk here, so the ring buffer consumer
//! never waits on the encoding nor on the file system.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;

use crate::data::{DataError, DataWriter};
use crate::event::Event;
use crate::table::FunctionTable;

/// Events per batch the consumer allocates for; batches are recycled, so this is also roughly
/// the largest chunk written.
pub const BATCH_EVENTS: usize = 64 * 1024;

/// What the writer thread writes, in order.
enum Item {
    Events(Vec<Event>),
    MoreFunctions(FunctionTable),
}

/// A [`DataWriter`] running on its own thread.
pub struct WriterThread {
    batches: Sender<Item>,
    recycled: Receiver<Vec<Event>>,
    thread: JoinHandle<Result<DataWriter, DataError>>,
}

impl WriterThread {
    pub fn start(mut writer: DataWriter) -> WriterThread {
        let (batches, incoming) = channel::<Item>();
        let (give_back, recycled) = channel();
        let thread = std::thread::Builder::new()
            .name("utrace-writer".into())
            .spawn(move || {
                for item in incoming {
                    match item {
                        Item::Events(mut batch) => {
                            writer.write_events(&batch)?;
                            batch.clear();
                            // The consumer may have finished; then the batch is simply freed.
                            let _ = give_back.send(batch);
                        }
                        Item::MoreFunctions(more) => writer.write_more_functions(&more)?,
                    }
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
        self.batches.send(Item::Events(batch)).is_ok()
    }

    /// Queues functions planned during the recording; false as for [`WriterThread::send`].
    pub fn send_more_functions(&self, more: FunctionTable) -> bool {
        self.batches.send(Item::MoreFunctions(more)).is_ok()
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
