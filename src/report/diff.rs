//! `report --diff BASE`: what changed from one recording (the base, `--diff FILE`) to another
//! (the input, `-i FILE`). Per function, matched by module file name and function name (by name
//! alone when the recordings ran different programs, with a warning): calls,
//! total and self time in both, and the change (new − base, absolute and as a percentage of the
//! base), sorted by the largest change of total time, then of self time, then by name:
//!
//! ```text
//!   Base calls   New calls    Change  Base total   New total       Change  Change %  …  Function
//!           10          30       +20    8.104 us   21.395 us   +13.291 us   +164.0%  …  a
//! ```
//!
//! A function called in one recording only is marked `[new]` or `[gone]`; its percentage is `-`.
//! The filters apply to both recordings alike; each recording's own probe costs are taken out,
//! and a total or self time below what its calls resolve shows as the summary's bound
//! (`<34.910 us`, see [`super::summary`]); the changes stay the differences of the figures.
//! `--format=json` gives the same rows for scripts.

use std::cmp::Reverse;
use std::fmt;
use std::io::{self, Write};

use serde::Serialize;

use super::summary::{
    CorrectedDuration, FunctionStats, HumanDuration, SortKey, Summary, KERNEL_MARK,
};
use crate::fast_hash::FastHashMap;
use crate::probe_cost::Resolutions;
use crate::table::{FunctionKind, FunctionTable};

/// One recording, summarized.
pub struct DiffSide<'a> {
    /// The data file, as named on the command line.
    pub file: &'a str,
    pub command: &'a str,
    pub table: &'a FunctionTable,
    pub summary: &'a Summary,
    /// What the correction resolves for one call of each function of `table`.
    pub resolutions: &'a Resolutions,
}

/// The figures of one function that a diff compares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Figures {
    pub calls: u64,
    pub total_ns: u64,
    pub self_ns: u64,
    /// What the correction resolves for `total_ns` and `self_ns`, sums over the timed calls
    /// ([`FunctionStats::sum_resolution_ns`]); 0 under raw times.
    #[serde(skip)]
    pub resolution_ns: u64,
    /// What was measured of them, probe costs left in: no bound exceeds it.
    #[serde(skip)]
    pub raw_total_ns: u64,
}

impl Figures {
    /// The figures of a function whose calls are each resolved to `call_resolution_ns`.
    fn of(stats: &FunctionStats, call_resolution_ns: u64) -> Figures {
        Figures {
            calls: stats.calls,
            total_ns: stats.total_ns,
            self_ns: stats.self_ns,
            resolution_ns: stats.sum_resolution_ns(call_resolution_ns),
            raw_total_ns: stats.raw_total_ns(),
        }
    }

    /// `ns`, one of the sums, as the text report shows it.
    fn shown(&self, ns: u64) -> CorrectedDuration {
        CorrectedDuration::new(ns, self.resolution_ns).within(self.raw_total_ns)
    }
}

/// New − base, of each figure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Change {
    pub calls: i128,
    pub total_ns: i128,
    pub self_ns: i128,
}

/// One function of either recording.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DiffRow {
    pub name: String,
    pub module: String,
    /// A kernel function or a kernel pseudo-function: its name is marked as the summary marks it.
    #[serde(skip)]
    pub kernel: bool,
    /// `None` when the base recording did not call it.
    pub base: Option<Figures>,
    /// `None` when the new recording did not call it.
    pub new: Option<Figures>,
    pub change: Change,
}

impl DiffRow {
    fn mark(&self) -> &'static str {
        match (self.base, self.new) {
            (None, _) => " [new]",
            (_, None) => " [gone]",
            _ => "",
        }
    }
}

/// The functions called in either recording, by the largest change first.
pub fn diff_rows(base: &DiffSide, new: &DiffSide) -> Vec<DiffRow> {
    // Another program's functions live in another file: then the name alone matches them.
    let by_name_only = different_programs(base, new);
    let mut rows: FastHashMap<(String, String), DiffRow> = FastHashMap::default();
    for (side, is_base) in [(base, true), (new, false)] {
        for row in side.summary.rows(side.table, SortKey::Total) {
            let module = side.table.module_name(row.function).to_owned();
            let key_module = if by_name_only { "" } else { module.as_str() };
            let key = (key_module.to_owned(), row.function.name.clone());
            let entry = rows.entry(key).or_insert_with(|| DiffRow {
                name: row.function.name.clone(),
                module,
                kernel: row.function.kind == FunctionKind::Kernel,
                base: None,
                new: None,
                change: Change::default(),
            });
            let figures = Figures::of(&row.stats, side.resolutions.of(row.id));
            let slot = if is_base {
                &mut entry.base
            } else {
                &mut entry.new
            };
            // Two functions of one name in one module (static functions of different files)
            // are added together, as they cannot be told apart across recordings.
            let sum = slot.get_or_insert_with(Figures::default);
            sum.calls += figures.calls;
            sum.total_ns = sum.total_ns.saturating_add(figures.total_ns);
            sum.self_ns = sum.self_ns.saturating_add(figures.self_ns);
            sum.resolution_ns = sum.resolution_ns.saturating_add(figures.resolution_ns);
            sum.raw_total_ns = sum.raw_total_ns.saturating_add(figures.raw_total_ns);
        }
    }
    let mut rows: Vec<DiffRow> = rows
        .into_values()
        .map(|mut row| {
            let base = row.base.unwrap_or_default();
            let new = row.new.unwrap_or_default();
            let delta = |b: u64, n: u64| i128::from(n) - i128::from(b);
            row.change = Change {
                calls: delta(base.calls, new.calls),
                total_ns: delta(base.total_ns, new.total_ns),
                self_ns: delta(base.self_ns, new.self_ns),
            };
            row
        })
        .collect();
    rows.sort_by(|a, b| {
        let key = |row: &DiffRow| {
            (
                Reverse(row.change.total_ns.abs()),
                Reverse(row.change.self_ns.abs()),
                Reverse(row.change.calls.abs()),
            )
        };
        key(a)
            .cmp(&key(b))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.module.cmp(&b.module))
    });
    rows
}

/// Whether two recordings traced different programs: their commands' first words name
/// different files.
pub fn different_programs(base: &DiffSide, new: &DiffSide) -> bool {
    let program = |command: &str| {
        let first = shell_words::split(command)
            .ok()
            .and_then(|words| words.into_iter().next())
            .unwrap_or_default();
        first.rsplit('/').next().unwrap_or_default().to_owned()
    };
    program(base.command) != program(new.command)
}

/// The text report.
pub fn write_text(base: &DiffSide, new: &DiffSide, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "Base: {} ({})", base.file, base.command)?;
    writeln!(out, "New:  {} ({})", new.file, new.command)?;
    writeln!(out)?;
    writeln!(
        out,
        "  {:>10}  {:>10}  {:>8}  {:>10}  {:>10}  {:>11}  {:>8}  {:>10}  {:>10}  {:>11}  {:>8}  Function",
        "Base calls",
        "New calls",
        "Change",
        "Base total",
        "New total",
        "Change",
        "Change %",
        "Base self",
        "New self",
        "Change",
        "Change %"
    )?;
    for row in diff_rows(base, new) {
        let b = row.base.unwrap_or_default();
        let n = row.new.unwrap_or_default();
        let both = row.base.is_some() && row.new.is_some();
        writeln!(
            out,
            "  {:>10}  {:>10}  {:>8}  {:>10}  {:>10}  {:>11}  {:>8}  {:>10}  {:>10}  {:>11}  {:>8}  {}{}{}",
            b.calls,
            n.calls,
            Signed(row.change.calls),
            b.shown(b.total_ns),
            n.shown(n.total_ns),
            SignedDuration(row.change.total_ns),
            ChangePercent::of(both, row.change.total_ns, b.total_ns),
            b.shown(b.self_ns),
            n.shown(n.self_ns),
            SignedDuration(row.change.self_ns),
            ChangePercent::of(both, row.change.self_ns, b.self_ns),
            row.name,
            if row.kernel { KERNEL_MARK } else { "" },
            row.mark(),
        )?;
    }
    Ok(())
}

#[derive(Serialize)]
struct JsonDiff<'a> {
    base: JsonSide<'a>,
    new: JsonSide<'a>,
    different_programs: bool,
    functions: Vec<JsonRow>,
}

#[derive(Serialize)]
struct JsonSide<'a> {
    file: &'a str,
    command: &'a str,
}

#[derive(Serialize)]
struct JsonRow {
    #[serde(flatten)]
    row: DiffRow,
    /// The changes as percentages of the base; `None` for a function of one recording only,
    /// or a base of 0.
    total_change_percent: Option<f64>,
    self_change_percent: Option<f64>,
}

/// The same rows as JSON, pretty-printed, with a final line end.
pub fn write_json(base: &DiffSide, new: &DiffSide, out: &mut dyn Write) -> io::Result<()> {
    let functions = diff_rows(base, new)
        .into_iter()
        .map(|row| {
            let both = row.base.is_some() && row.new.is_some();
            let b = row.base.unwrap_or_default();
            JsonRow {
                total_change_percent: ChangePercent::of(both, row.change.total_ns, b.total_ns).0,
                self_change_percent: ChangePercent::of(both, row.change.self_ns, b.self_ns).0,
                row,
            }
        })
        .collect();
    let report = JsonDiff {
        base: JsonSide {
            file: base.file,
            command: base.command,
        },
        new: JsonSide {
            file: new.file,
            command: new.command,
        },
        different_programs: different_programs(base, new),
        functions,
    };
    serde_json::to_writer_pretty(&mut *out, &report)?;
    writeln!(out)
}

/// A count with its sign: `+3`, `-2`, `0`.
struct Signed(i128);

impl fmt::Display for Signed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = if self.0 > 0 {
            format!("+{}", self.0)
        } else {
            self.0.to_string()
        };
        f.pad(&text)
    }
}

/// A change of duration with its sign: `+1.234 ms`, `-512 ns`, `0 ns`.
struct SignedDuration(i128);

impl fmt::Display for SignedDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let size = HumanDuration(u64::try_from(self.0.unsigned_abs()).unwrap_or(u64::MAX));
        let text = match self.0 {
            0 => size.to_string(),
            n if n > 0 => format!("+{size}"),
            _ => format!("-{size}"),
        };
        f.pad(&text)
    }
}

/// A change as a percentage of its base, one decimal (`+12.5%`); `-` when there is no base.
struct ChangePercent(Option<f64>);

impl ChangePercent {
    fn of(both: bool, change: i128, base: u64) -> ChangePercent {
        ChangePercent((both && base > 0).then(|| {
            let percent = change as f64 * 100.0 / base as f64;
            (percent * 10.0).round() / 10.0
        }))
    }
}

impl fmt::Display for ChangePercent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(p) if p > 0.0 => f.pad(&format!("+{p:.1}%")),
            Some(p) => f.pad(&format!("{p:.1}%")),
            None => f.pad("-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_changes_show_their_sign() {
        assert_eq!(Signed(3).to_string(), "+3");
        assert_eq!(Signed(-2).to_string(), "-2");
        assert_eq!(SignedDuration(1_234_000).to_string(), "+1.234 ms");
        assert_eq!(SignedDuration(-512).to_string(), "-512 ns");
        assert_eq!(SignedDuration(0).to_string(), "0 ns");
        assert_eq!(ChangePercent::of(true, 25, 200).to_string(), "+12.5%");
        assert_eq!(ChangePercent::of(true, -100, 200).to_string(), "-50.0%");
        assert_eq!(ChangePercent::of(false, 100, 200).to_string(), "-");
        assert_eq!(ChangePercent::of(true, 100, 0).to_string(), "-");
    }
}
