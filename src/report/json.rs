//! `json`: the summary for scripts.
//!
//! ```json
//! {"command": "...", "pid": N, "duration_ns": N, "events": N, "lost_events": N,
//!  "damaged_chunks": N,
//!  "functions": [{"name": "fib", "module": "sort", "offset": "0x1a2b", "srcline": "sort.c:12",
//!                 "calls": N, "unknown_time_calls": N,
//!                 "total_ns": N, "self_ns": N, "avg_ns": N, "min_ns": N, "max_ns": N,
//!                 "p50_ns": N, "p90_ns": N, "p99_ns": N, "off_cpu_ns": N, "probe_share": 0.0,
//!                 "entry_site": "emulated", "resolution_ns": N,
//!                 "below_resolution": ["total_ns", "self_ns", "min_ns", "p50_ns"],
//!                 "detached": {"after_ns": N, "calls_per_s": N}}]}
//! ```
//! `detached` is there for a function whose probes `record --budget` took off, `after_ns` into
//! the recording: its figures are up to then.
//! `resolution_ns` is what the probe-cost correction resolves for one of the function's calls
//! (left out under raw times and for kernel events other than kernel functions (`-k`): nothing
//! is taken out); `below_resolution`
//! names the figures below what they resolve (left out when none is), which the summary shows
//! as `<N`: a per-call figure below `resolution_ns`, a total or self time below the timed calls
//! (`calls` − `unknown_time_calls`) × `resolution_ns`. The numbers stay as computed, but such a
//! figure is less than its bound, how much less is not known. `off_cpu_ns` is the time the
//! function's calls spent off the CPU, taken out of their times (a recording with `-E offcpu`,
//! probe costs taken out; left out otherwise); `preempted_ns` is, in its place, the time they
//! spent preempted (recorded by default without `-E offcpu`). A function with no timed call
//! (every one of unknown time) has `null` for every time: they are unknown, not 0.
//! The header comes from [`TraceInfo`] (`damaged_chunks` only when the data file had any: then
//! `events` counts those read, not those recorded); `functions` are in the summary's order (`--sort`) with the same
//! figures (see [`super::summary`]); `module` is the file name of the function's module, `offset` the file
//! offset in it of the function's probe site (its entry, or just past its `endbr64`), which tells
//! apart functions of one name; `srcline` the file and line where the function starts (the
//! line-table row at its entry, as `record` read it from DWARF; left out where unknown, as
//! for PLT stubs and files without line tables); the percentiles are those of [`super::distribution`].
//! When the trace holds more than one process (`--follow`), each function has one entry per
//! process that called it, with a `"pid"`, by pid then in the summary's order.
//! Written pretty-printed, with a final line end.

use std::io::{self, Write};

use serde::Serialize;

use super::distribution::{Distributions, Percentiles};
use super::summary::{CorrectedDuration, FunctionStats, GroupedSummaries, OffCpu};
use super::{ReportOptions, TraceInfo};
use crate::probe_cost::Resolutions;
use crate::table::{Execution, FunctionTable};

#[derive(Serialize)]
struct JsonReport<'a> {
    command: &'a str,
    pid: u32,
    duration_ns: u64,
    events: u64,
    lost_events: u64,
    #[serde(skip_serializing_if = "is_zero")]
    damaged_chunks: u64,
    functions: Vec<JsonFunction<'a>>,
}

#[derive(Serialize)]
struct JsonFunction<'a> {
    /// Only when the trace holds more than one process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pid: Option<u32>,
    name: &'a str,
    module: &'a str,
    /// The file offset of the function's probe site in its module, in hexadecimal (`0x1a2b`):
    /// what tells apart functions of one name.
    offset: String,
    /// Where the function starts in the source (`test/args.c:10`), when `record` found it in
    /// DWARF.
    #[serde(skip_serializing_if = "Option::is_none")]
    srcline: Option<String>,
    calls: u64,
    /// The calls among `calls` whose time is unknown (not in the times).
    unknown_time_calls: u64,
    /// The times: `None` (null) for a function with no timed call.
    total_ns: Option<u64>,
    self_ns: Option<u64>,
    avg_ns: Option<u64>,
    min_ns: Option<u64>,
    max_ns: Option<u64>,
    p50_ns: Option<u64>,
    p90_ns: Option<u64>,
    p99_ns: Option<u64>,
    /// The time its calls spent off the CPU, taken out of the times above: only for a recording
    /// with `-E offcpu`, probe costs taken out.
    #[serde(skip_serializing_if = "Option::is_none")]
    off_cpu_ns: Option<u64>,
    /// The time its calls spent preempted (off the CPU, still runnable), taken out of the times
    /// above: for a recording without `-E offcpu` where the kernel let utrace record it, probe
    /// costs taken out.
    #[serde(skip_serializing_if = "Option::is_none")]
    preempted_ns: Option<u64>,
    /// The share of the raw total time that was probe costs taken out (0 to 1, three decimals;
    /// 0 under `--raw-times`): above one half, the summary marks the function's times as
    /// estimates.
    probe_share: f64,
    /// How the kernel runs the instruction under the function's entry probe: "emulated" or
    /// "single-stepped" (a second trap, microseconds more a call).
    entry_site: &'static str,
    /// What the correction resolves for one call of the function; 0 (left out) when nothing is
    /// taken out.
    #[serde(skip_serializing_if = "is_zero")]
    resolution_ns: u64,
    /// The figures below what the correction resolves for them, by their names here.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    below_resolution: Vec<&'static str>,
    /// When `record --budget` took the function's probes off, and its call rate then.
    #[serde(skip_serializing_if = "Option::is_none")]
    detached: Option<JsonDetachment>,
}

/// A function `--budget` detached: its figures are up to `after_ns` into the recording.
#[derive(Serialize)]
struct JsonDetachment {
    after_ns: u64,
    calls_per_s: u64,
}

/// The names of the figures of a function below what the correction resolves for them: the
/// sums (total, self) below `stats`'s [`FunctionStats::sum_resolution_ns`], the per-call figures
/// below `resolution_ns`, as the summary shows them. None for a function with no timed call,
/// whose figures are unknown.
fn below_resolution(
    stats: &FunctionStats,
    percentiles: &Percentiles,
    resolution_ns: u64,
) -> Vec<&'static str> {
    if stats.timed_calls() == 0 {
        return Vec::new();
    }
    let sum_resolution_ns = stats.sum_resolution_ns(resolution_ns);
    let figures = [
        ("total_ns", stats.total_ns, sum_resolution_ns),
        ("self_ns", stats.self_ns, sum_resolution_ns),
        ("avg_ns", stats.avg_ns(), resolution_ns),
        ("min_ns", stats.min_ns, resolution_ns),
        ("max_ns", stats.max_ns, resolution_ns),
        ("p50_ns", percentiles.p50_ns, resolution_ns),
        ("p90_ns", percentiles.p90_ns, resolution_ns),
        ("p99_ns", percentiles.p99_ns, resolution_ns),
    ];
    figures
        .into_iter()
        .filter(|&(_, ns, resolution_ns)| {
            CorrectedDuration::new(ns, resolution_ns).is_below_resolution()
        })
        .map(|(name, _, _)| name)
        .collect()
}

pub fn write_json(
    info: &TraceInfo,
    table: &FunctionTable,
    processes: &GroupedSummaries,
    spread: &Distributions,
    resolutions: &Resolutions,
    options: &ReportOptions,
    out: &mut dyn Write,
) -> io::Result<()> {
    let sort = options.sort;
    let off_cpu = options.off_cpu(table);
    let processes = processes.sorted();
    let several = processes.len() > 1;
    let functions = processes
        .into_iter()
        .flat_map(|(process, summary)| {
            let pid = several.then_some(process.pid);
            summary.rows(table, sort).into_iter().map(move |row| {
                let percentiles = spread.percentiles(process.pid, row.id);
                (pid, row, percentiles)
            })
        })
        .map(|(pid, row, percentiles)| {
            let timed = |ns: u64| (row.stats.timed_calls() > 0).then_some(ns);
            let taken_out = |kind| (off_cpu == kind).then_some(row.stats.off_cpu_ns);
            let off_cpu_ns = taken_out(OffCpu::TakenOut).and_then(timed);
            let preempted_ns = taken_out(OffCpu::PreemptedTakenOut).and_then(timed);
            JsonFunction {
                pid,
                name: &row.function.name,
                module: table.module_name(row.function),
                offset: format!("{:#x}", row.function.offset),
                srcline: row.function.source.as_ref().map(ToString::to_string),
                calls: row.stats.calls,
                unknown_time_calls: row.stats.unknown_time,
                total_ns: timed(row.stats.total_ns),
                self_ns: timed(row.stats.self_ns),
                avg_ns: timed(row.stats.avg_ns()),
                min_ns: timed(row.stats.min_ns),
                max_ns: timed(row.stats.max_ns),
                p50_ns: timed(percentiles.p50_ns),
                p90_ns: timed(percentiles.p90_ns),
                p99_ns: timed(percentiles.p99_ns),
                off_cpu_ns,
                preempted_ns,
                probe_share: (row.stats.probe_share() * 1000.0).round() / 1000.0,
                entry_site: match row.function.probes.entry {
                    Execution::Emulated => "emulated",
                    Execution::SingleStepped => "single-stepped",
                },
                resolution_ns: resolutions.of(row.id),
                below_resolution: below_resolution(
                    &row.stats,
                    &percentiles,
                    resolutions.of(row.id),
                ),
                detached: row.function.detached.map(|d| JsonDetachment {
                    after_ns: d.after_ns,
                    calls_per_s: d.calls_per_s,
                }),
            }
        })
        .collect();
    let report = JsonReport {
        command: &info.command,
        pid: info.pid,
        duration_ns: info.duration_ns,
        events: info.events,
        lost_events: info.lost_events,
        damaged_chunks: info.damaged_chunks,
        functions,
    };
    serde_json::to_writer_pretty(&mut *out, &report)?;
    writeln!(out)
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}
