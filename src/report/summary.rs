//! `summary`: calls and times per function, as a text table like uftrace's `report`.
//!
//! Per function:
//! - **calls**: every call, complete or not;
//! - **total**: the durations of the calls that are not recursive (no call of the same function
//!   below them on the stack), so recursion is counted once, as uftrace does;
//! - **self**: the self times of every call (they never overlap, so this is exact);
//! - **min / max**: over the durations of every call, recursive ones included, as uftrace does
//!   (for `fib` the minimum is the leaf call, the maximum the outermost one);
//! - **average**: total / timed calls (so it is below the per-call cost under recursion, as in
//!   uftrace).
//!
//! A per-call figure (average, minimum, maximum, percentiles) below what the probe-cost
//! correction resolves for the function ([`crate::probe_cost::ProbeCost::resolution_ns`]) is
//! shown as that bound, `<90 ns`: the call may have lasted anything less, and the figure itself
//! is more the correction's error than a measurement (see [`CorrectedDuration`]). A total or
//! self time is a sum over the timed calls, each known to within that resolution, so it resolves
//! timed calls × resolution ([`FunctionStats::sum_resolution_ns`]), and below it shows as that
//! bound (`<900 ns` for 10 calls): as the average is the total over the timed calls, the total is
//! a bound exactly when the average is (and the self time when the average self time is). Under
//! recursion the total sums only the outermost calls, so the bound is looser than it could be,
//! but still a bound.
//!
//! Calls without an exit (closed at the end of the trace or by unwinding) count like the others.
//! Calls whose time is unknown (their return was skipped: longjmp, exceptions, the kernel's
//! uretprobe nesting limit, lost events) count as calls and add no time of their own: not to
//! total, self, minimum, maximum or average; but when such a call is the outermost of a recursion,
//! its timed recursive calls count in total in its place. The table ends with a note when there
//! were any of either.
//!
//! A figure shown as a bound is never above what was measured around it: the function's calls
//! with their probe costs, and the whole trace ([`FunctionStats::ceilings`]). A function with no
//! timed call shows `-` for every time; a row with calls of unknown time says how many.
//!
//! `Total %` is the total time as a share of the whole trace, as a line above the table says:
//! every thread's outermost timed calls added up, before any filter, with the probe costs taken
//! out as from every other figure (the first event to the last, raw, when no outermost call was
//! timed: [`crate::replay::ReplayStats::outermost_ns`]). So `main` is near 100% in a program of
//! one thread whether the times are corrected or not, a function reads the same share with or
//! without `-f`, and none passes 100%. A total shown as a bound shows its share as one.
//! Rows are sorted by a [`SortKey`], largest first; `--per-thread` makes one table per thread
//! ([`GroupedSummaries`]).

use std::cmp::Reverse;
use std::fmt::{self, Write as _};
use std::io::{self, Write};
use std::str::FromStr;

use thiserror::Error;

use super::distribution::Distributions;
use crate::diagnostics::{first_of, plural};
use crate::fast_hash::FastHashMap;
use crate::probe_cost::Resolutions;
use crate::replay::{CallSink, FinishedCall, ReplayStats};
use crate::table::{FunctionId, FunctionKind, FunctionTable, TracedFunction};

/// What the rows are sorted by, largest first (`--sort`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortKey {
    #[default]
    Total,
    SelfTime,
    Calls,
    Average,
    Maximum,
}

impl SortKey {
    pub const ALL: [SortKey; 5] = [
        SortKey::Total,
        SortKey::SelfTime,
        SortKey::Calls,
        SortKey::Average,
        SortKey::Maximum,
    ];

    /// The name `--sort` takes.
    pub fn name(self) -> &'static str {
        match self {
            SortKey::Total => "total",
            SortKey::SelfTime => "self",
            SortKey::Calls => "calls",
            SortKey::Average => "avg",
            SortKey::Maximum => "max",
        }
    }

    fn value(self, stats: &FunctionStats) -> u64 {
        match self {
            SortKey::Total => stats.total_ns,
            SortKey::SelfTime => stats.self_ns,
            SortKey::Calls => stats.calls,
            SortKey::Average => stats.avg_ns(),
            SortKey::Maximum => stats.max_ns,
        }
    }
}

/// A `--sort` value that is not one of [`SortKey::ALL`].
#[derive(Debug, Error, PartialEq, Eq)]
#[error("unknown sort key `{0}`: use one of total, self, calls, avg, max")]
pub struct UnknownSortKey(pub String);

impl FromStr for SortKey {
    type Err = UnknownSortKey;

    fn from_str(name: &str) -> Result<SortKey, UnknownSortKey> {
        SortKey::ALL
            .into_iter()
            .find(|key| key.name() == name)
            .ok_or_else(|| UnknownSortKey(name.to_owned()))
    }
}

/// The probe share ([`FunctionStats::probe_share`]) above which the summary marks a function's
/// times as mostly probe cost: a figure more than half made of a subtracted estimate is read as
/// an estimate.
pub const PROBE_DOMINATED: f64 = 0.5;

/// How the summary marks such a function's name.
const PROBE_DOMINATED_MARK: &str = "* ";

/// How many times its average a function's longest call must be, over at least [`SKEWED_CALLS`]
/// timed calls (probe costs left in both), for the summary to mark it as carried by a few long
/// calls when the time off the CPU is not known: a thread preempted inside a function of 500 ns
/// makes a call of milliseconds (redis's `LRU_CLOCK`: p50 `<471 ns`, average 13 µs, maximum
/// 12 ms).
const SKEWED_RATIO: u64 = 10;
const SKEWED_CALLS: u64 = 20;

/// How the summary marks a function whose average a few long calls carry.
const SKEWED_MARK: &str = "~ ";

/// How the summary marks the functions `--budget` detached during the recording.
const DETACHED_MARK: &str = " [detached]";
/// How many of them the note under the table names, the first detached first.
const DETACHED_NAMED: usize = 8;

/// How the summary marks the kernel's functions and events (`-k`, `-E`).
pub const KERNEL_MARK: &str = " [k]";

/// The figures of one function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FunctionStats {
    pub calls: u64,
    pub total_ns: u64,
    pub self_ns: u64,
    /// 0 when there were no calls.
    pub min_ns: u64,
    pub max_ns: u64,
    /// The shortest and longest self time of one call (`--avg-self`).
    pub min_self_ns: u64,
    pub max_self_ns: u64,
    /// The calls among `calls` whose time is unknown: none of the times includes them.
    pub unknown_time: u64,
    /// The probe costs taken out of the calls counted in `total_ns` (their raw durations less
    /// their corrected ones); 0 under `--raw-times`.
    pub probe_ns: u64,
    /// The longest raw duration of a timed call (probe costs left in): what was measured around
    /// every per-call figure.
    pub max_raw_ns: u64,
    /// The time the calls counted in `total_ns` spent off the CPU, taken out of them (`-E
    /// offcpu`).
    pub off_cpu_ns: u64,
    /// Whether a call of it ran inside another of it (recursion): then its longest call holds
    /// the others.
    pub recursive: bool,
}

impl FunctionStats {
    /// The calls whose time is known.
    pub fn timed_calls(&self) -> u64 {
        self.calls - self.unknown_time
    }

    /// total / timed calls, 0 when there were none.
    pub fn avg_ns(&self) -> u64 {
        self.total_ns.checked_div(self.timed_calls()).unwrap_or(0)
    }

    /// self / timed calls, 0 when there were none.
    pub fn avg_self_ns(&self) -> u64 {
        self.self_ns.checked_div(self.timed_calls()).unwrap_or(0)
    }

    /// What the correction resolves for a sum over the timed calls (total, self time) when it
    /// resolves `per_call_ns` for one: each call's error adds up.
    pub fn sum_resolution_ns(&self, per_call_ns: u64) -> u64 {
        CorrectedDuration::sum_resolution_ns(self.timed_calls(), per_call_ns)
    }

    /// What was measured around the function's figures, which none of them exceeds: its calls
    /// with their probe costs (the longest one for a call's figure, all of them for a sum), and
    /// the whole trace, `run_ns` (0 when no outermost call was timed), as every call lies in it.
    pub fn ceilings(&self, run_ns: u64) -> Ceilings {
        let within_run = |ns: u64| match run_ns {
            0 => ns,
            run_ns => ns.min(run_ns),
        };
        Ceilings {
            call_ns: within_run(self.max_raw_ns),
            sum_ns: within_run(self.raw_total_ns()),
        }
    }

    /// Whether a few long calls carry the average: the longest call is [`SKEWED_RATIO`] times
    /// the average or more (probe costs left in both), over [`SKEWED_CALLS`] timed calls or more,
    /// none inside another (a recursion's outermost call holds the others).
    pub fn is_skewed(&self) -> bool {
        let timed = self.timed_calls();
        let average_raw_ns = self.raw_total_ns().checked_div(timed).unwrap_or(0);
        timed >= SKEWED_CALLS
            && !self.recursive
            && self.max_raw_ns >= average_raw_ns.saturating_mul(SKEWED_RATIO)
    }

    /// The durations counted in the total, probe costs left in.
    pub fn raw_total_ns(&self) -> u64 {
        self.total_ns.saturating_add(self.probe_ns)
    }

    /// The share of the raw total time that was probe costs taken out: above
    /// [`PROBE_DOMINATED`], the corrected times are more estimate than measurement.
    pub fn probe_share(&self) -> f64 {
        let raw_ns = self.total_ns.saturating_add(self.probe_ns);
        match raw_ns {
            0 => 0.0,
            raw_ns => self.probe_ns as f64 / raw_ns as f64,
        }
    }

    /// Average, minimum and maximum of the calls' total times, or with `self_times` of their
    /// self times.
    fn spread(&self, self_times: bool) -> [u64; 3] {
        if self_times {
            [self.avg_self_ns(), self.min_self_ns, self.max_self_ns]
        } else {
            [self.avg_ns(), self.min_ns, self.max_ns]
        }
    }

    fn add(&mut self, call: &FinishedCall) {
        if !call.time_known {
            self.calls += 1;
            self.unknown_time += 1;
            self.total_ns = self.total_ns.saturating_add(call.recursion_ns);
            return;
        }
        let raw_ns = call.end_ns - call.start_ns;
        self.max_raw_ns = self.max_raw_ns.max(raw_ns);
        self.recursive |= call.recursive;
        if self.timed_calls() == 0 {
            self.min_ns = call.duration_ns;
            self.max_ns = call.duration_ns;
            self.min_self_ns = call.self_ns;
            self.max_self_ns = call.self_ns;
        } else {
            self.min_ns = self.min_ns.min(call.duration_ns);
            self.max_ns = self.max_ns.max(call.duration_ns);
            self.min_self_ns = self.min_self_ns.min(call.self_ns);
            self.max_self_ns = self.max_self_ns.max(call.self_ns);
        }
        self.calls += 1;
        if !call.recursive {
            self.total_ns = self.total_ns.saturating_add(call.duration_ns);
            self.off_cpu_ns = self.off_cpu_ns.saturating_add(call.off_cpu_ns);
            // Of what was taken out, the probes' costs: not the time off the CPU or stopped.
            let probes_ns = raw_ns
                .saturating_sub(call.duration_ns)
                .saturating_sub(call.off_cpu_ns + call.stopped_ns);
            self.probe_ns = self.probe_ns.saturating_add(probes_ns);
        }
        self.self_ns = self.self_ns.saturating_add(call.self_ns);
    }
}

/// What was measured around each figure of a function (see [`CorrectedDuration::within`]): for
/// one call's (average, minimum, maximum, percentiles) and for a sum (total, self time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ceilings {
    pub call_ns: u64,
    pub sum_ns: u64,
}

/// How the summary table is laid out.
#[derive(Clone, Copy, Default)]
pub struct TableLayout<'d> {
    pub sort: SortKey,
    /// Average, minimum and maximum of self times rather than of total times (`--avg-self`).
    pub avg_self: bool,
    /// p50, p90 and p99 columns from these distributions (`--percentiles`), grouped as the
    /// tables are.
    pub percentiles: Option<&'d Distributions>,
    /// Below what each function's per-call figures are shown as a bound; `None` under raw
    /// times.
    pub resolutions: Option<&'d Resolutions>,
    /// What is known of the time off the CPU: with it taken out, an `Off-CPU` column; without
    /// it known, the rows a few long calls carry are marked.
    pub off_cpu: OffCpu,
}

/// What a report knows of the time the threads spent off the CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OffCpu {
    /// Not recorded (no `-E offcpu`).
    #[default]
    Unknown,
    /// Recorded, left in the calls (`--raw-times`).
    Recorded,
    /// Recorded, and taken out of the calls it fell in (see [`FinishedCall::off_cpu_ns`]).
    TakenOut,
    /// Only the time preempted recorded (by default, without `-E offcpu`), and taken out of the
    /// calls it fell in: [`FinishedCall::off_cpu_ns`] is that time.
    PreemptedTakenOut,
}

impl OffCpu {
    /// The name of the column of the time taken out, when some is.
    pub fn column(self) -> Option<&'static str> {
        match self {
            OffCpu::TakenOut => Some("Off-CPU"),
            OffCpu::PreemptedTakenOut => Some("Preempted"),
            OffCpu::Unknown | OffCpu::Recorded => None,
        }
    }
}

/// Collects [`FunctionStats`] per function id; a [`CallSink`].
#[derive(Clone, Debug)]
pub struct Summary {
    functions: Vec<FunctionStats>,
}

/// One line of the summary: a function that was called.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SummaryRow<'t> {
    pub id: FunctionId,
    pub function: &'t TracedFunction,
    pub stats: FunctionStats,
}

impl Summary {
    pub fn new(function_count: usize) -> Summary {
        Summary {
            functions: vec![FunctionStats::default(); function_count],
        }
    }

    pub fn stats(&self, id: FunctionId) -> Option<&FunctionStats> {
        self.functions.get(id as usize)
    }

    /// The functions that were called, by `sort` (largest first), then by name, then by id.
    pub fn rows<'t>(&self, table: &'t FunctionTable, sort: SortKey) -> Vec<SummaryRow<'t>> {
        let mut rows: Vec<SummaryRow<'t>> = table
            .functions
            .iter()
            .zip(&self.functions)
            .enumerate()
            .filter(|(_, (_, stats))| stats.calls > 0)
            .map(|(id, (function, stats))| SummaryRow {
                id: id as FunctionId,
                function,
                stats: *stats,
            })
            .collect();
        // Stable: ties in the key and the name stay in id order.
        rows.sort_by(|a, b| {
            sort.value(&b.stats)
                .cmp(&sort.value(&a.stats))
                .then_with(|| a.function.name.cmp(&b.function.name))
        });
        rows
    }

    /// Writes the table, then a note on unmatched exits, unfinished calls and unknown function
    /// ids when there were any.
    pub fn write_text(
        &self,
        table: &FunctionTable,
        replay: &ReplayStats,
        layout: TableLayout,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        let covered_ns = write_whole(replay, out)?;
        let marks = self.write_table(table, covered_ns, layout, 0, out)?;
        write_note(table, replay, self.probe_dominated(), marks, out)
    }

    /// Writes the table; says whether any figure was shown as a bound, and how many rows are
    /// marked as carried by a few long calls.
    fn write_table(
        &self,
        table: &FunctionTable,
        span_ns: u64,
        layout: TableLayout,
        group: u32,
        out: &mut dyn Write,
    ) -> io::Result<TableMarks> {
        let [average, minimum, maximum] = if layout.avg_self {
            ["Avg self", "Min self", "Max self"]
        } else {
            ["Average", "Minimum", "Maximum"]
        };
        let percentile_heads = match layout.percentiles {
            Some(_) => format!("  {:>10}  {:>10}  {:>10}", "P50", "P90", "P99"),
            None => String::new(),
        };
        let (off_cpu_head, off_cpu_rule) = match layout.off_cpu.column() {
            Some(column) => (format!("  {column:>10}"), "  =========="),
            None => (String::new(), ""),
        };
        writeln!(
            out,
            "  {:>10}  {:>8}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}{percentile_heads}{off_cpu_head}  \
             Function",
            "Total time", "Total %", "Self time", "Calls", average, minimum, maximum
        )?;
        let rule = "==========";
        let percentile_rules = match layout.percentiles {
            Some(_) => format!("  {rule}  {rule}  {rule}"),
            None => String::new(),
        };
        writeln!(
            out,
            "  {rule}  ========  {rule}  {rule}  {rule}  {rule}  {rule}{percentile_rules}{off_cpu_rule}  \
             ===================="
        )?;
        let rows = self.rows(table, layout.sort);
        let names = distinct_names(table, &rows);
        let mut bounds = ShownBounds::None;
        let mut skewed = 0;
        for (row, name) in rows.iter().zip(names) {
            let s = &row.stats;
            let call_resolution_ns = layout.resolutions.map_or(0, |r| r.of(row.id));
            let sum_resolution_ns = s.sum_resolution_ns(call_resolution_ns);
            let ceilings = s.ceilings(span_ns);
            // Of a function with no timed call, every time is unknown: `-`, not a 0 or a bound.
            let timed = s.timed_calls() > 0;
            let mut corrected = |ns, resolution_ns, ceiling_ns| {
                let figure = CorrectedDuration::new(ns, resolution_ns).within(ceiling_ns);
                if timed && figure.is_below_resolution() {
                    bounds = ShownBounds::Some;
                }
                Shown(timed.then_some(figure))
            };
            let [total, self_time] =
                [s.total_ns, s.self_ns].map(|ns| corrected(ns, sum_resolution_ns, ceilings.sum_ns));
            let [average, minimum, maximum] = s
                .spread(layout.avg_self)
                .map(|ns| corrected(ns, call_resolution_ns, ceilings.call_ns));
            // Time taken out of the program's calls (utrace's stops, time off the CPU) is no
            // share of it.
            let apart = match row.function.kind {
                FunctionKind::Tracer => layout.resolutions.is_some(),
                _ => layout.off_cpu == OffCpu::TakenOut && row.function.is_off_cpu(),
            };
            let share = match total.0 {
                Some(total) if !apart => Percent::of(total, span_ns),
                _ => Percent::Unknown,
            };
            write!(
                out,
                "  {total:>10}  {share:>8}  {self_time:>10}  {:>10}  {average:>10}  {minimum:>10}  \
                 {maximum:>10}",
                s.calls,
            )?;
            if let Some(distributions) = layout.percentiles {
                let p = distributions.percentiles(group, row.id);
                let [p50, p90, p99] = [p.p50_ns, p.p90_ns, p.p99_ns]
                    .map(|ns| corrected(ns, call_resolution_ns, ceilings.call_ns));
                write!(out, "  {p50:>10}  {p90:>10}  {p99:>10}")?;
            }
            if layout.off_cpu.column().is_some() {
                let off_cpu = CorrectedDuration::new(s.off_cpu_ns, 0);
                let off_cpu = Shown((timed && !apart).then_some(off_cpu));
                write!(out, "  {off_cpu:>10}")?;
            }
            let mark = match s.probe_share() > PROBE_DOMINATED {
                true => PROBE_DOMINATED_MARK,
                false => "",
            };
            // Where the time off the CPU is not taken out, it may be what carries a function.
            let skew = match layout.off_cpu == OffCpu::Unknown && s.is_skewed() {
                true => {
                    skewed += 1;
                    SKEWED_MARK
                }
                false => "",
            };
            let unknown = match s.unknown_time {
                0 => String::new(),
                n => format!(" ({n} of unknown time)"),
            };
            // Kernel functions and events apart, as flame graphs mark their frames.
            let kernel = match row.function.kind {
                FunctionKind::Kernel => KERNEL_MARK,
                _ => "",
            };
            let detached = match row.function.detached {
                Some(_) => DETACHED_MARK,
                None => "",
            };
            writeln!(out, "  {mark}{skew}{name}{kernel}{detached}{unknown}")?;
        }
        Ok(TableMarks { bounds, skewed })
    }

    /// How many functions' times are marked as mostly probe cost.
    fn probe_dominated(&self) -> u64 {
        let marked = self.functions.iter().filter(|s| s.calls > 0);
        marked.filter(|s| s.probe_share() > PROBE_DOMINATED).count() as u64
    }
}

/// The names of `rows` as the summary shows them: a name that several rows share gets the
/// function's offset in its module (`name [0x1a2b]`), and its module's name where the rows are
/// in different modules (`name [libc.so.6+0x1a2b]`).
pub fn distinct_names<'t>(
    table: &'t FunctionTable,
    rows: &[SummaryRow<'t>],
) -> Vec<std::borrow::Cow<'t, str>> {
    use std::borrow::Cow;
    use std::collections::HashMap;
    let mut modules: HashMap<&str, Vec<u32>> = HashMap::new();
    for row in rows {
        modules
            .entry(row.function.name.as_str())
            .or_default()
            .push(row.function.module);
    }
    rows.iter()
        .map(|row| {
            let function = row.function;
            let sharing = &modules[function.name.as_str()];
            if sharing.len() < 2 {
                return Cow::Borrowed(function.name.as_str());
            }
            let offset = function.offset;
            match sharing.iter().all(|&m| m == function.module) {
                true => Cow::Owned(format!("{} [{offset:#x}]", function.name)),
                false => Cow::Owned(format!(
                    "{} [{}+{offset:#x}]",
                    function.name,
                    table.module_name(function)
                )),
            }
        })
        .collect()
}

/// Whether a table showed any figure as a bound ([`CorrectedDuration`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ShownBounds {
    None,
    Some,
}

/// What a table marked, for the notes under it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TableMarks {
    bounds: ShownBounds,
    /// Rows marked as carried by a few long calls ([`FunctionStats::is_skewed`]).
    skewed: u64,
}

/// What the functions `--budget` detached are, each with when and why.
fn detached_note(table: &FunctionTable) -> Option<String> {
    let mut detached: Vec<&TracedFunction> = (table.functions.iter())
        .filter(|function| function.detached.is_some())
        .collect();
    detached.sort_by_key(|function| {
        function
            .detached
            .map(|d| (d.after_ns, Reverse(d.calls_per_s)))
    });
    let detached: Vec<String> = (detached.into_iter())
        .filter_map(|function| {
            let detachment = function.detached?;
            Some(format!(
                "{} at {:.2} s ({} calls/s)",
                function.name,
                detachment.after_ns as f64 / 1e9,
                detachment.calls_per_s
            ))
        })
        .collect();
    (!detached.is_empty()).then(|| {
        format!(
            "[detached] marks functions whose probes --budget took off during the recording, to \
             keep the program within it: their counts and times are up to then, and their \
             callers' self times include their calls after ({})",
            first_of(&detached, DETACHED_NAMED, "json has each")
        )
    })
}

/// The notes under the table(s): the replay's, the clamped times, what the `*` of
/// `probe_dominated` rows means, and what a bound is when `bounds` were shown.
fn write_note(
    table: &FunctionTable,
    replay: &ReplayStats,
    probe_dominated: u64,
    marks: TableMarks,
    out: &mut dyn Write,
) -> io::Result<()> {
    // The clamps only here: calls shorter than their probes' measured cost are common (the cost
    // is a median), and the call tree shows each of them already.
    let clamped = (replay.clamped_times > 0).then(|| {
        format!(
            "{} kept at 0 or at their children's: the probe costs taken out were more than \
             they lasted (--raw-times shows them as measured)",
            plural(replay.clamped_times, "time", "times")
        )
    });
    let marked = (probe_dominated > 0).then(|| {
        format!(
            "* marks {} whose times are mostly probe costs taken out (over half of what was \
             measured): read them as estimates (json: probe_share; --raw-times shows them as \
             measured)",
            plural(probe_dominated, "function", "functions")
        )
    });
    let skewed = (marks.skewed > 0).then(|| {
        format!(
            "~ marks {} whose longest call is at least {SKEWED_RATIO} times its average: a few \
             long calls carry it, as when the thread is preempted or waits inside them (record \
             with -E offcpu to take the time off the CPU out)",
            plural(marks.skewed, "function", "functions")
        )
    });
    let bounded = (marks.bounds == ShownBounds::Some).then(|| {
        "<N is a time below N, what the probe-cost correction resolves (how much the probes' \
         own cost varies from call to call; for a total or self time, that times its calls): \
         less than N, how much less is not known (json: below_resolution)"
            .to_owned()
    });
    let notes: Vec<String> = (replay_note(replay).into_iter())
        .chain(detached_note(table))
        .chain(clamped)
        .chain(marked)
        .chain(skewed)
        .chain(bounded)
        .collect();
    if !notes.is_empty() {
        writeln!(out)?;
    }
    for note in notes {
        writeln!(out, "  note: {note}")?;
    }
    Ok(())
}

/// What [`GroupedSummaries`] makes one [`Summary`] for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grouping {
    /// Each thread (`--per-thread`).
    Thread,
    /// Each process (`--follow` traces several).
    Process,
}

/// The thread or process a [`Summary`] of [`GroupedSummaries`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    /// The thread id, or the first thread seen of the process.
    pub tid: u32,
    pub pid: u32,
}

/// One [`Summary`] per thread or per process; a [`CallSink`]. Memory grows with groups ×
/// functions.
pub struct GroupedSummaries {
    grouping: Grouping,
    function_count: usize,
    /// In the order the groups were first seen.
    groups: Vec<(Group, Summary)>,
    /// Thread or process id → index into `groups`.
    index: FastHashMap<u32, usize>,
}

impl GroupedSummaries {
    pub fn new(grouping: Grouping, function_count: usize) -> GroupedSummaries {
        GroupedSummaries {
            grouping,
            function_count,
            groups: Vec::new(),
            index: FastHashMap::default(),
        }
    }

    /// The summaries by thread or process id, ascending.
    pub fn sorted(&self) -> Vec<&(Group, Summary)> {
        let mut groups: Vec<&(Group, Summary)> = self.groups.iter().collect();
        groups.sort_by_key(|(group, _)| match self.grouping {
            Grouping::Thread => (group.tid, group.pid),
            Grouping::Process => (group.pid, group.tid),
        });
        groups
    }

    /// One table per group, each under a `Thread TID` line (`Thread TID (pid PID)` when the
    /// threads belong to more than one process), which ends with how many events the thread lost
    /// (`lost_by_thread`, by thread id) if any; `Total %` is still of the whole trace. Then the
    /// note, once.
    pub fn write_text(
        &self,
        table: &FunctionTable,
        replay: &ReplayStats,
        lost_by_thread: &[(u32, u64)],
        layout: TableLayout,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        let several_processes = self
            .groups
            .iter()
            .any(|(group, _)| group.pid != self.groups[0].0.pid);
        let covered_ns = write_whole(replay, out)?;
        writeln!(out)?;
        let mut marks = TableMarks {
            bounds: ShownBounds::None,
            skewed: 0,
        };
        for (i, (group, summary)) in self.sorted().into_iter().enumerate() {
            if i > 0 {
                writeln!(out)?;
            }
            let tid = group.tid;
            let lost = match lost_by_thread.binary_search_by_key(&tid, |&(tid, _)| tid) {
                Ok(at) => format!(
                    " ({} lost)",
                    plural(lost_by_thread[at].1, "event", "events")
                ),
                Err(_) => String::new(),
            };
            match (self.grouping, several_processes) {
                (Grouping::Thread, false) => writeln!(out, "Thread {tid}{lost}")?,
                (Grouping::Thread, true) => {
                    writeln!(out, "Thread {tid} (pid {}){lost}", group.pid)?
                }
                (Grouping::Process, _) => writeln!(out, "Process {}", group.pid)?,
            }
            let key = match self.grouping {
                Grouping::Thread => group.tid,
                Grouping::Process => group.pid,
            };
            let table_marks = summary.write_table(table, covered_ns, layout, key, out)?;
            if table_marks.bounds == ShownBounds::Some {
                marks.bounds = ShownBounds::Some;
            }
            marks.skewed += table_marks.skewed;
        }
        let marked = self.groups.iter().map(|(_, s)| s.probe_dominated()).sum();
        write_note(table, replay, marked, marks, out)
    }
}

impl CallSink for GroupedSummaries {
    fn call_finished(&mut self, call: &FinishedCall, stack: &[FunctionId]) {
        let groups = &mut self.groups;
        let function_count = self.function_count;
        let key = match self.grouping {
            Grouping::Thread => call.tid,
            Grouping::Process => call.pid,
        };
        let index = *self.index.entry(key).or_insert_with(|| {
            let group = Group {
                tid: call.tid,
                pid: call.pid,
            };
            groups.push((group, Summary::new(function_count)));
            groups.len() - 1
        });
        self.groups[index].1.call_finished(call, stack);
    }
}

/// What `Total %` divides by: every thread's outermost timed calls added up, as the flame graph
/// adds up every thread's stacks, before any filter (so a function reads the same share with or
/// without `-f`, and none more than 100%); the trace's raw span when no outermost call was timed.
/// Says so above the table(s), and returns it.
fn write_whole(replay: &ReplayStats, out: &mut dyn Write) -> io::Result<u64> {
    let threads = plural(replay.threads as u64, "thread", "threads");
    match replay.outermost_ns {
        0 => {
            let span_ns = replay.span_ns();
            let span = HumanDuration(span_ns);
            writeln!(
                out,
                "  Total % is of {span}: from the first event to the last ({threads})"
            )?;
            Ok(span_ns)
        }
        outermost_ns => {
            let whole = HumanDuration(outermost_ns);
            writeln!(
                out,
                "  Total % is of {whole}: every thread's outermost calls, added up ({threads})"
            )?;
            Ok(outermost_ns)
        }
    }
}

/// A share of the whole trace as the summary shows it, with two decimals (`99.87%`), `<` before
/// a bound's (`<0.05%`, the share of a total shown as a bound), `-` when unknown (no timed call,
/// or nothing to divide by).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Percent {
    /// In hundredths of a percent.
    Figure(u64),
    Bound(u64),
    Unknown,
}

impl Percent {
    /// `total` as a share of `whole`: the figure's share, or its bound's when it shows as one.
    fn of(total: CorrectedDuration, whole: u64) -> Percent {
        if whole == 0 {
            return Percent::Unknown;
        }
        // Rounded to nearest; u128 so no trace can overflow it.
        let hundredths = |part: u64| {
            let rounded =
                (u128::from(part) * 10_000 * 2 + u128::from(whole)) / (2 * u128::from(whole));
            u64::try_from(rounded).unwrap_or(u64::MAX)
        };
        match total.bound_ns() {
            Some(bound_ns) => Percent::Bound(hundredths(bound_ns)),
            None => Percent::Figure(hundredths(total.ns)),
        }
    }
}

impl fmt::Display for Percent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = StackText::default();
        match *self {
            Percent::Figure(h) => write!(text, "{}.{:02}%", h / 100, h % 100)?,
            Percent::Bound(h) => write!(text, "<{}.{:02}%", h / 100, h % 100)?,
            Percent::Unknown => write!(text, "-")?,
        }
        f.pad(text.as_str())
    }
}

impl CallSink for Summary {
    fn call_finished(&mut self, call: &FinishedCall, _stack: &[FunctionId]) {
        if let Some(stats) = self.functions.get_mut(call.function as usize) {
            stats.add(call);
        }
    }
}

/// What the replayer had to work around, in words; `None` when nothing.
pub(crate) fn replay_note(replay: &ReplayStats) -> Option<String> {
    let mut parts = Vec::new();
    if replay.unmatched_exits > 0 {
        parts.push(format!(
            "{} ignored (calls already running when tracing started, or setjmp returning again)",
            plural(replay.unmatched_exits, "unmatched exit", "unmatched exits")
        ));
    }
    if replay.unfinished_calls > 0 {
        parts.push(format!(
            "{} (no exit seen: timed up to the end of the trace or to an outer return)",
            plural(
                replay.unfinished_calls,
                "unfinished call",
                "unfinished calls"
            )
        ));
    }
    if replay.unknown_time_calls > 0 {
        parts.push(format!(
            "{} with unknown time (returns skipped by longjmp, exceptions, the kernel's 64 \
             nested return probes or lost events): counted, not timed",
            plural(replay.unknown_time_calls, "call", "calls")
        ));
    }
    if replay.unknown_function_events > 0 {
        parts.push(format!(
            "{} ignored (the data file may be damaged)",
            plural(
                replay.unknown_function_events,
                "event with an unknown function id",
                "events with an unknown function id"
            )
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// A duration in nanoseconds, shown in the largest unit it reaches: below 1 µs as whole
/// nanoseconds (`512 ns`), then microseconds, milliseconds or seconds with three decimals
/// (`12.345 us`, `1.234 ms`, `2.500 s`). Decimals are truncated, not rounded, so a value never
/// shows as `1000.000` of a unit; seconds are the largest unit (`3600.000 s`). Width and
/// alignment flags apply to the whole text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HumanDuration(pub u64);

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Formatted on the stack: the call tree writes one of these per line.
        let mut text = StackText::default();
        write_duration(&mut text, self.0)?;
        f.pad(text.as_str())
    }
}

/// The largest unit `ns` reaches, seconds at most: (nanoseconds in one, its name).
fn unit_of(ns: u64) -> (u64, &'static str) {
    match ns {
        0..=999 => (1, "ns"),
        1_000..=999_999 => (1_000, "us"),
        1_000_000..=999_999_999 => (1_000_000, "ms"),
        _ => (1_000_000_000, "s"),
    }
}

/// Writes `ns` as [`HumanDuration`] shows it, without padding.
fn write_duration(text: &mut StackText, ns: u64) -> fmt::Result {
    match unit_of(ns) {
        (1, unit) => write!(text, "{ns} {unit}"),
        (size, unit) => write!(
            text,
            "{}.{:03} {unit}",
            ns / size,
            ns % size / (size / 1_000)
        ),
    }
}

/// Writes the bound `<ns`, as [`write_duration`] writes `ns`, but in whole units, rounded up,
/// from 100 of one (`<350 us`, not `<349.100 us`): so that it fits the ten characters of a
/// figure, and still bounds what it bounds.
fn write_bound(text: &mut StackText, ns: u64) -> fmt::Result {
    text.write_char('<')?;
    match unit_of(ns) {
        (size, unit) if size > 1 && ns >= 100 * size => {
            write!(text, "{} {unit}", ns.div_ceil(size))
        }
        _ => write_duration(text, ns),
    }
}

/// A corrected duration as reports show it: as [`HumanDuration`] when it is at least what the
/// correction resolves for it (for one call of its function, or for a sum of its calls: see
/// [`FunctionStats::sum_resolution_ns`]), else as a bound (`<90 ns`): the resolution, or what
/// was measured around the figure when that is less (its calls with their probe costs, the
/// whole trace: [`CorrectedDuration::within`]), so that no bound exceeds what holds it. With
/// no space after `<`, so a row still splits on spaces into the same columns, and no wider
/// than a figure ([`write_bound`]). A resolution of 0 (raw times, kernel events) shows every
/// figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CorrectedDuration {
    pub ns: u64,
    pub resolution_ns: u64,
    /// The most the figure can be: what was measured around it. No bound shown exceeds it.
    pub ceiling_ns: u64,
}

impl CorrectedDuration {
    /// `ns`, resolved to `resolution_ns`, with nothing measured around it yet.
    pub fn new(ns: u64, resolution_ns: u64) -> CorrectedDuration {
        CorrectedDuration {
            ns,
            resolution_ns,
            ceiling_ns: u64::MAX,
        }
    }

    /// The same figure, known to be at most `ceiling_ns` (what was measured around it): its
    /// bound is no more than that either.
    pub fn within(self, ceiling_ns: u64) -> CorrectedDuration {
        CorrectedDuration {
            ceiling_ns: self.ceiling_ns.min(ceiling_ns),
            ..self
        }
    }

    /// The duration of `call`, whose function's calls are each resolved to `resolution_ns`,
    /// within what the call measured, probe costs left in.
    pub fn of_call(call: &FinishedCall, resolution_ns: u64) -> CorrectedDuration {
        CorrectedDuration::new(call.duration_ns, resolution_ns).within(call.end_ns - call.start_ns)
    }

    /// What the correction resolves for a sum of the durations of `timed_calls` calls, each
    /// resolved to `call_resolution_ns`: their errors add up.
    pub fn sum_resolution_ns(timed_calls: u64, call_resolution_ns: u64) -> u64 {
        timed_calls.saturating_mul(call_resolution_ns)
    }

    /// The figure is below what the correction resolves: more its error than a measurement.
    pub fn is_below_resolution(&self) -> bool {
        self.ns < self.resolution_ns
    }

    /// The bound shown in place of the figure, when it is below the resolution: the resolution,
    /// or the ceiling when that is less.
    pub fn bound_ns(&self) -> Option<u64> {
        self.is_below_resolution()
            .then_some(self.resolution_ns.min(self.ceiling_ns))
    }
}

impl fmt::Display for CorrectedDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(bound_ns) = self.bound_ns() else {
            return HumanDuration(self.ns).fmt(f);
        };
        let mut text = StackText::default();
        write_bound(&mut text, bound_ns)?;
        f.pad(text.as_str())
    }
}

/// A figure of the summary, or `-` where it is unknown (a function with no timed call).
struct Shown(Option<CorrectedDuration>);

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(figure) => figure.fmt(f),
            None => f.pad("-"),
        }
    }
}

/// A short text built on the stack, so that padding a formatted value allocates nothing. The
/// longest text written is a `u64` of seconds with decimals, well under its capacity.
#[derive(Default)]
struct StackText {
    bytes: [u8; 32],
    len: usize,
}

impl StackText {
    fn as_str(&self) -> &str {
        // Only whole `&str`s are ever copied in, so the bytes are UTF-8.
        std::str::from_utf8(&self.bytes[..self.len]).expect("whole strings were written")
    }
}

impl fmt::Write for StackText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        self.bytes
            .get_mut(self.len..end)
            .ok_or(fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}
