//! `utrace live`: a recording session composed with the call tree printer, as uftrace's `live`
//! is `record` then `replay`: the same replayer and printer that `report --format=replay` uses
//! on a data file (or, with `--flat`, one line per event).

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::event::Event;
use crate::filter::{FilterSpec, FilteredSink};
use crate::plan::SourceLines;
use crate::probe_cost::Resolutions;
use crate::record::{
    calibrate, monotonic_now_ns, Drain, RecordOutcome, Session, SessionMode, TraceOptions,
};
use crate::replay::{CallSink, ReplayStats, Replayer};
use crate::report::flat::FlatPrinter;
use crate::report::tree::{Columns, TreePrinter};
use crate::table::FunctionTable;

/// A call held back longer than this (it may still turn out to be a leaf) is printed as an open
/// block, so no line waits longer for a slow call.
const MAX_HELD_NS: u64 = 100_000_000;

/// What `utrace live` was asked to do.
pub struct LiveOptions {
    pub trace: TraceOptions,
    /// Where the tree goes: standard error when `None` (`-o FILE`).
    pub output: Option<PathBuf>,
    /// The tree's optional columns; the thread id column also comes on by itself with a
    /// second thread.
    pub columns: Columns,
    /// One line per event instead of the tree.
    pub flat: bool,
    /// Leave the probe costs in the durations (and do not measure them).
    pub raw_times: bool,
}

/// What live mode needs of a printer beyond being a sink.
trait LivePrinter: CallSink {
    /// Called every flush interval: print what should not wait any longer, and flush.
    fn tick(&mut self, now_ns: u64) -> io::Result<()>;
    /// After the last call: any closing words, and a final flush.
    fn end(self, stats: &ReplayStats) -> io::Result<()>;
    /// Functions planned during the session, numbered on from the table's.
    fn add_functions(&mut self, more: &FunctionTable);
    /// `count` events were lost here (the ring buffer was full): say so where it happened.
    fn events_lost(&mut self, count: u64) -> io::Result<()>;
}

impl<W: Write> LivePrinter for TreePrinter<'_, W> {
    fn tick(&mut self, now_ns: u64) -> io::Result<()> {
        self.open_entries_before(now_ns.saturating_sub(MAX_HELD_NS));
        self.flush()
    }

    fn end(self, stats: &ReplayStats) -> io::Result<()> {
        self.finish(stats)?.flush()
    }

    fn add_functions(&mut self, more: &FunctionTable) {
        TreePrinter::add_functions(self, more);
    }

    fn events_lost(&mut self, count: u64) -> io::Result<()> {
        self.note(&lost_note(count))
    }
}

/// The line live mode prints where events were lost.
fn lost_note(count: u64) -> String {
    format!(
        "{count} events lost here (the ring buffer was full): calls around this point are \
         missing; a larger --buffer-size helps"
    )
}

impl<W: Write> LivePrinter for FlatPrinter<'_, W> {
    fn tick(&mut self, _now_ns: u64) -> io::Result<()> {
        self.flush()
    }

    fn end(mut self, _stats: &ReplayStats) -> io::Result<()> {
        self.flush()
    }

    fn add_functions(&mut self, more: &FunctionTable) {
        FlatPrinter::add_functions(self, more);
    }

    fn events_lost(&mut self, count: u64) -> io::Result<()> {
        self.note(&lost_note(count))
    }
}

/// Traces the target and prints its calls as they happen.
pub fn live(options: LiveOptions) -> Result<RecordOutcome> {
    let out: Box<dyn Write + Send> = match &options.output {
        Some(path) => Box::new(
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        ),
        None => Box::new(std::io::stderr()),
    };
    // Lines reach the output at each tick's flush, not one write each: unbuffered, writing the
    // tree of a program making 150k calls a second took five times as long as recording it.
    let out = io::BufWriter::with_capacity(1 << 16, out);
    // Measured while the program is planned: both take tens of milliseconds of start-up.
    let kernel_functions = &options.trace.events.kernel_functions;
    // --budget weighs the probes' costs, even where the times are shown raw.
    let weighs_costs = !options.raw_times || options.trace.budget.is_some();
    let calibrating = weighs_costs.then(|| calibrate::start(kernel_functions));
    let prepared = Session::prepare(&options.trace);
    // Dropped, with its probes, after the session's probes are gone.
    let calibration = calibrating.map(calibrate::joined).transpose();
    // The target's own problem comes first: it says more than a missing permission.
    let mut session = prepared?;
    let calibration = calibration?;
    if let Some(calibration) = &calibration {
        calibration.say_noise();
    }
    let table = session.table().clone();
    let mut replayer = Replayer::for_table(&table);
    let measured = calibration.as_ref().and_then(|c| c.costs.as_ref());
    session.set_probe_costs(measured.cloned());
    let costs = measured.filter(|_| !options.raw_times);
    if let Some(costs) = costs {
        replayer.correct_probe_costs(&table, costs);
    }
    // Functions added during the session resolve 0, as the replayer takes nothing out of them.
    let resolutions = Resolutions::new(&table, costs);
    if options.flat {
        let mut printer = FlatPrinter::new(&table, out).context("writing the calls")?;
        printer.show_bounds(resolutions);
        print_live(&mut session, &options.trace, &table, replayer, printer)
    } else {
        let mut printer =
            TreePrinter::live(&table, options.columns, out).context("writing the call tree")?;
        if options.trace.source_lines == SourceLines::Read {
            printer.show_source_lines();
        }
        printer.show_bounds(resolutions);
        print_live(&mut session, &options.trace, &table, replayer, printer)
    }
}

/// Live mode's drain: every batch goes through the replayer (and the filters) to the printer.
struct LiveDrain<'a, P> {
    filter: &'a FilterSpec,
    replayer: Replayer,
    filtered: FilteredSink<'a, P>,
    write_error: Option<io::Error>,
}

impl<P: LivePrinter> Drain for LiveDrain<'_, P> {
    fn take(&mut self, pending: &mut Vec<Event>, due: bool) -> bool {
        self.replayer.push_all(pending, &mut self.filtered);
        pending.clear();
        if due {
            if let Err(error) = self.filtered.inner_mut().tick(monotonic_now_ns()) {
                self.write_error = Some(error);
                return false;
            }
        }
        true
    }

    fn events_lost(&mut self, count: u64) {
        if self.write_error.is_none() {
            if let Err(error) = self.filtered.inner_mut().events_lost(count) {
                self.write_error = Some(error);
            }
        }
    }

    /// The functions of a program a followed process exec'ed (live mode does not follow dlopen).
    fn more_functions(&mut self, more: &FunctionTable) -> bool {
        self.replayer.add_functions(more);
        self.filtered.add_functions(self.filter.function_mask(more));
        self.filtered.inner_mut().add_functions(more);
        true
    }
}

fn print_live<P: LivePrinter>(
    session: &mut Session,
    trace: &TraceOptions,
    table: &FunctionTable,
    replayer: Replayer,
    mut printer: P,
) -> Result<RecordOutcome> {
    let mut drain = LiveDrain {
        filter: &trace.filter,
        replayer,
        filtered: FilteredSink::new(&trace.filter, table, &mut printer),
        write_error: None,
    };
    let end = session.run(trace, SessionMode::Live, &mut drain)?;
    let LiveDrain {
        replayer,
        mut filtered,
        write_error,
        ..
    } = drain;
    let end_ns = replayer.stats().last_timestamp_ns;
    let stats = replayer.finish(end_ns, &mut filtered);
    session.report_end(&end);
    if let Some(error) = write_error {
        return Err(error).context("writing the calls");
    }
    drop(filtered);
    printer.end(&stats).context("writing the calls")?;
    RecordOutcome::after(end.stop, session)
}
