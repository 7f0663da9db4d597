//! How each function's durations are spread: percentiles for `summary --percentiles` and json,
//! and `histogram`, a log2 histogram per function as bcc's `funclatency` prints it:
//!
//! ```text
//! Function = target
//!      nsecs               : count     distribution
//!        256 -> 511        : 30       |****************************************|
//!        512 -> 1023       : 3        |****                                    |
//!       1024 -> 2047       : 2        |**                                      |
//!
//! avg = 464 nsecs, total: 16251 nsecs, count: 35
//! ```
//!
//! - The durations are those of every call whose time is known, recursive ones included (as the
//!   summary's minimum and maximum); calls of unknown time are counted apart and in no bucket.
//! - Percentiles come from a streaming histogram (`hdrhistogram`) with two significant digits:
//!   exact below 256 ns, at most 1% below the true value above, never outside the durations seen. Its memory
//!   grows with the range of a function's durations, not with its calls: at most about 36 KiB
//!   for durations up to an hour, and only for functions that were called.
//! - Bucket `a -> b` of the log2 histogram counts the durations from a to b ns inclusive: bucket
//!   k holds 2^k to 2^(k+1) − 1, the first 0 and 1. It is printed from its first non-empty bucket
//!   to its last; bars are 40 stars for the fullest bucket.
//! - With more than one process (`--follow`), each function is shown per process.
//! - With the probe costs taken out, an average below what the correction resolves for one call
//!   of the function shows as the summary's bound, in nsecs (`avg = <90 nsecs`), and so does the
//!   total below what its calls resolve (`total: <900 nsecs`: see [`super::summary`]); the buckets
//!   count the durations as computed.

use std::fmt;
use std::io::{self, Write};

use hdrhistogram::Histogram;

use super::summary::{CorrectedDuration, Grouping};
use crate::fast_hash::FastHashMap;
use crate::probe_cost::Resolutions;
use crate::replay::{CallSink, FinishedCall};
use crate::table::{FunctionId, FunctionTable};

/// Significant digits of the percentile histograms: 1% precision.
const SIGNIFICANT_DIGITS: u8 = 2;

/// The spread of one function's durations.
#[derive(Clone, Debug)]
pub struct Distribution {
    percentiles: Histogram<u64>,
    /// Calls per log2 bucket of their duration.
    log2: [u64; 64],
    /// The calls with a known time, and the sum and largest of their durations.
    timed_calls: u64,
    sum_ns: u64,
    min_ns: u64,
    max_ns: u64,
    /// The sum and largest of their raw durations (probe costs left in): what no bound exceeds.
    raw_sum_ns: u64,
    max_raw_ns: u64,
    /// The calls whose time is unknown: in no bucket.
    pub unknown_time: u64,
}

/// The p50, p90 and p99 of a function's durations, ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Percentiles {
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
}

impl Default for Distribution {
    fn default() -> Distribution {
        Distribution {
            // Auto-resizing: it grows with the largest duration recorded.
            percentiles: Histogram::new(SIGNIFICANT_DIGITS)
                .expect("2 significant digits are valid"),
            log2: [0; 64],
            timed_calls: 0,
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            raw_sum_ns: 0,
            max_raw_ns: 0,
            unknown_time: 0,
        }
    }
}

impl Distribution {
    pub fn add(&mut self, call: &FinishedCall) {
        if !call.time_known {
            self.unknown_time += 1;
            return;
        }
        let ns = call.duration_ns;
        // Auto-resizing, it fails only past what a u64 can count: then the largest it can.
        if self.percentiles.record(ns).is_err() {
            self.percentiles.saturating_record(ns);
        }
        self.log2[log2_bucket(ns)] += 1;
        self.timed_calls += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
        let raw_ns = call.end_ns - call.start_ns;
        self.raw_sum_ns = self.raw_sum_ns.saturating_add(raw_ns);
        self.max_raw_ns = self.max_raw_ns.max(raw_ns);
    }

    /// p50, p90 and p99, all 0 when no call was timed.
    pub fn percentiles(&self) -> Percentiles {
        if self.timed_calls == 0 {
            return Percentiles::default();
        }
        // The low end of the value's 1% range: a duration recorded exactly on it (any below
        // 256 ns) comes out as it was.
        let at = |quantile: f64| {
            let value = self.percentiles.value_at_quantile(quantile);
            self.percentiles
                .lowest_equivalent(value)
                .clamp(self.min_ns, self.max_ns)
        };
        Percentiles {
            p50_ns: at(0.50),
            p90_ns: at(0.90),
            p99_ns: at(0.99),
        }
    }

    /// The non-empty range of log2 buckets: (first value, last value, calls) each.
    pub fn buckets(&self) -> Vec<(u64, u64, u64)> {
        let Some(first) = self.log2.iter().position(|&n| n > 0) else {
            return Vec::new();
        };
        let last = self.log2.iter().rposition(|&n| n > 0).unwrap_or(first);
        (first..=last)
            .map(|k| {
                let low = if k == 0 { 0 } else { 1u64 << k };
                let high = if k == 63 {
                    u64::MAX
                } else {
                    (1u64 << (k + 1)) - 1
                };
                (low, high, self.log2[k])
            })
            .collect()
    }

    /// Writes the histogram and its line of averages, funclatency-style; the average and the
    /// total as bounds where they are below what the correction resolves, `call_resolution_ns`
    /// for one call.
    fn write_log2(&self, call_resolution_ns: u64, out: &mut dyn Write) -> io::Result<()> {
        let buckets = self.buckets();
        let fullest = buckets.iter().map(|b| b.2).max().unwrap_or(0);
        writeln!(
            out,
            "{:>10}               : count     distribution",
            "nsecs"
        )?;
        for (low, high, calls) in buckets {
            let stars = (calls * 40).checked_div(fullest).unwrap_or(0) as usize;
            // A bucket with calls shows at least one star, as funclatency's does not: a lone
            // slow call must not look like none.
            let stars = if calls > 0 { stars.max(1) } else { 0 };
            writeln!(
                out,
                "{low:>10} -> {high:<10} : {calls:<8} |{:<40}|",
                "*".repeat(stars)
            )?;
        }
        writeln!(out)?;
        // As bounds, never more than what was measured: the calls with their probe costs.
        let average = self.sum_ns.checked_div(self.timed_calls).unwrap_or(0);
        let average =
            Nsecs(CorrectedDuration::new(average, call_resolution_ns).within(self.max_raw_ns));
        let sum_resolution_ns =
            CorrectedDuration::sum_resolution_ns(self.timed_calls, call_resolution_ns);
        let total =
            Nsecs(CorrectedDuration::new(self.sum_ns, sum_resolution_ns).within(self.raw_sum_ns));
        write!(
            out,
            "avg = {average} nsecs, total: {total} nsecs, count: {}",
            self.timed_calls
        )?;
        if self.unknown_time > 0 {
            write!(out, " (and {} of unknown time)", self.unknown_time)?;
        }
        writeln!(out)
    }
}

/// A corrected duration as the line of averages shows it, in whole nanoseconds (`464`), or the
/// bound in its place (`<90`).
struct Nsecs(CorrectedDuration);

impl fmt::Display for Nsecs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.bound_ns() {
            Some(bound_ns) => write!(f, "<{bound_ns}"),
            None => write!(f, "{}", self.0.ns),
        }
    }
}

/// The log2 bucket of a duration: k for 2^k ≤ ns < 2^(k+1), 0 for 0 and 1.
fn log2_bucket(ns: u64) -> usize {
    (63 - (ns | 1).leading_zeros()) as usize
}

/// A [`Distribution`] per function and group (the whole trace, a process or a thread); a
/// [`CallSink`].
pub struct Distributions {
    grouping: Option<Grouping>,
    functions: FastHashMap<(u32, FunctionId), Distribution>,
}

impl Distributions {
    /// One distribution per function, or per function and `grouping` group.
    pub fn new(grouping: Option<Grouping>) -> Distributions {
        Distributions {
            grouping,
            functions: FastHashMap::default(),
        }
    }

    /// The distribution of `function` in the group of thread or process `group` (ignored
    /// without a grouping).
    pub fn get(&self, group: u32, function: FunctionId) -> Option<&Distribution> {
        let group = if self.grouping.is_some() { group } else { 0 };
        self.functions.get(&(group, function))
    }

    /// The percentiles of `function` in `group`, all 0 when it was not called.
    pub fn percentiles(&self, group: u32, function: FunctionId) -> Percentiles {
        self.get(group, function)
            .map(Distribution::percentiles)
            .unwrap_or_default()
    }

    /// The `histogram` report: one histogram per function (per process when there are
    /// several), by group, then by calls, most first, then by name; `resolutions` are what the
    /// correction resolves for one call of each function.
    pub fn write_histograms(
        &self,
        table: &FunctionTable,
        resolutions: &Resolutions,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        let mut rows: Vec<(&(u32, FunctionId), &Distribution)> = self.functions.iter().collect();
        rows.sort_by(|(a_key, a), (b_key, b)| {
            let calls = |d: &Distribution| d.timed_calls + d.unknown_time;
            a_key
                .0
                .cmp(&b_key.0)
                .then_with(|| calls(b).cmp(&calls(a)))
                .then_with(|| table.name_of(a_key.1).cmp(table.name_of(b_key.1)))
        });
        let several = rows
            .first()
            .is_some_and(|(first, _)| rows.iter().any(|((group, _), _)| *group != first.0));
        for (i, ((group, function), distribution)) in rows.into_iter().enumerate() {
            if i > 0 {
                writeln!(out)?;
            }
            write!(out, "Function = {}", table.name_of(*function))?;
            if several {
                write!(out, " [pid {group}]")?;
            }
            writeln!(out)?;
            distribution.write_log2(resolutions.of(*function), out)?;
        }
        Ok(())
    }
}

impl CallSink for Distributions {
    fn call_finished(&mut self, call: &FinishedCall, _stack: &[FunctionId]) {
        let group = match self.grouping {
            None => 0,
            Some(Grouping::Process) => call.pid,
            Some(Grouping::Thread) => call.tid,
        };
        self.functions
            .entry((group, call.function))
            .or_default()
            .add(call);
    }
}

/// Two sinks fed the same calls.
pub struct Both<'a, A, B>(pub &'a mut A, pub &'a mut B);

impl<A: CallSink, B: CallSink> CallSink for Both<'_, A, B> {
    fn call_finished(&mut self, call: &FinishedCall, stack: &[FunctionId]) {
        self.0.call_finished(call, stack);
        self.1.call_finished(call, stack);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_buckets_are_funclatencys() {
        assert_eq!(log2_bucket(0), 0);
        assert_eq!(log2_bucket(1), 0);
        assert_eq!(log2_bucket(2), 1);
        assert_eq!(log2_bucket(3), 1);
        assert_eq!(log2_bucket(4), 2);
        assert_eq!(log2_bucket(1023), 9);
        assert_eq!(log2_bucket(1024), 10);
        assert_eq!(log2_bucket(u64::MAX), 63);
    }
}
