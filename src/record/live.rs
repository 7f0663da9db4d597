//! `utrace live`: the call tree printed while the program runs, from the same replayer and
//! printer that `report --format=replay` uses on a data file.

use std::io::Write;

use anyhow::{Context, Result};

use super::session::{Session, TraceOptions};
use super::{monotonic_now_ns, RecordOutcome};
use crate::filter::FilteredSink;
use crate::replay::Replayer;
use crate::report::tree::TreePrinter;

/// A call held back longer than this (it may still turn out to be a leaf) is printed as an open
/// block, so no line waits longer for a slow call.
const MAX_HELD_NS: u64 = 100_000_000;

/// What `utrace live` was asked to do.
pub struct LiveOptions {
    pub trace: TraceOptions,
    /// Where the tree goes (standard error unless `-o`).
    pub out: Box<dyn Write + Send>,
    /// Show the thread id column from the start.
    pub show_thread_ids: bool,
}

/// Traces the target and prints its call tree as it happens.
pub fn live(options: LiveOptions) -> Result<RecordOutcome> {
    let trace = &options.trace;
    let mut session = Session::prepare(trace)?;
    let table = session.table.clone();
    let mut printer = TreePrinter::live(&table, options.show_thread_ids, options.out)
        .context("writing the call tree")?;
    let mut replayer = Replayer::new(table.functions.len());
    let mut write_error = None;
    {
        let mut filtered = FilteredSink::new(&trace.filter, &table, &mut printer);
        let end = session.run(trace, false, |pending, due| {
            replayer.push_all(pending, &mut filtered);
            pending.clear();
            if due {
                let printer = filtered.inner_mut();
                printer.open_entries_before(monotonic_now_ns().saturating_sub(MAX_HELD_NS));
                if let Err(error) = printer.flush() {
                    write_error = Some(error);
                    return false;
                }
            }
            true
        })?;
        let end_ns = replayer.stats().last_timestamp_ns;
        let stats = replayer.finish(end_ns, &mut filtered);
        session.report_end(&end, trace.debug);
        if let Some(error) = write_error {
            return Err(error).context("writing the call tree");
        }
        drop(filtered);
        printer
            .finish(&stats)
            .and_then(|mut out| out.flush())
            .context("writing the call tree")?;
        RecordOutcome::after(end.stop, &session)
    }
}
