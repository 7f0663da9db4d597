//! Why a report shows no call: worked out from the data file and the report's filters, for the
//! warning that takes the place of an empty table.

use std::fmt;
use std::path::Path;

use crate::filter::FilterSpec;
use crate::replay::ReplayStats;
use crate::table::FunctionTable;

/// What is known of a report that showed no call.
pub struct NoCalls<'a> {
    /// The data file.
    pub file: &'a Path,
    /// Events read from it.
    pub events: u64,
    /// Its chunks skipped because they were damaged.
    pub damaged_chunks: usize,
    /// It ends before its statistics (the recorder did not finish).
    pub cut_short: bool,
    /// Events the ring buffer had no room for, as its statistics say.
    pub lost_events: u64,
    pub table: &'a FunctionTable,
    /// The report's filters.
    pub filter: &'a FilterSpec,
    pub replay: &'a ReplayStats,
}

/// The reason, as the warning's words after `no calls were recorded: `.
impl fmt::Display for NoCalls<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.display();
        // The time preempted is no call: a file of those events alone holds none.
        if self.events == self.replay.preemption_events {
            return if self.damaged_chunks > 0 {
                write!(f, "every events chunk of {file} is damaged")
            } else if self.cut_short {
                write!(
                    f,
                    "{file} was cut short before its first events (the recorder did not finish)"
                )
            } else if self.lost_events > 0 {
                write!(
                    f,
                    "all {} events of {file} were lost, the ring buffer being full: record \
                     again with a larger --buffer-size",
                    self.lost_events
                )
            } else {
                write!(
                    f,
                    "{file} holds no events: {}: the program exited before its first traced \
                     call, or the record-time filter kept only functions it did not call",
                    self.functions_never_ran()
                )
            };
        }
        let functions = self.table.functions.iter();
        let functions = functions.filter(|f| !f.is_preemption()).count();
        if !self.filter.function_mask(self.table).contains(&true) {
            return write!(
                f,
                "the report's {} matches none of the {functions} functions traced in {file}",
                function_flags(self.filter)
            );
        }
        if !self.filter.shows_everything() {
            return write!(
                f,
                "the report's filters ({}) hide every call of the {} events in {file}",
                filter_flags(self.filter),
                self.events
            );
        }
        if self.replay.unknown_function_events == self.events {
            return write!(
                f,
                "none of the {} events in {file} is of a function in its table",
                self.events
            );
        }
        write!(
            f,
            "the {} events in {file} start no call: they end calls that were running when \
             tracing started",
            self.events
        )
    }
}

impl NoCalls<'_> {
    /// The traced functions, by name when there are few, as what never ran.
    fn functions_never_ran(&self) -> String {
        let names: Vec<&str> = self
            .table
            .functions
            .iter()
            .filter(|f| !f.is_preemption())
            .map(|f| f.name.as_str())
            .collect();
        match names.len() {
            0 => "it traces no function".to_string(),
            1 => format!("its one traced function, {}, never ran", names[0]),
            2..=3 => format!("its traced functions ({}) never ran", names.join(", ")),
            n => format!("none of its {n} traced functions ran"),
        }
    }
}

/// `-f` and `--no-function` as given (`-f 'a*' --no-function b`).
fn function_flags(filter: &FilterSpec) -> String {
    let globs = |flag: &str, globs: &[crate::filter::Glob]| {
        let list: Vec<&str> = globs.iter().map(|g| g.as_str()).collect();
        (!list.is_empty()).then(|| format!("{flag} {}", shell_words::quote(&list.join(","))))
    };
    [
        globs("-f", &filter.functions),
        globs("--no-function", &filter.no_functions),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" ")
}

/// The filters that are set, as flags.
fn filter_flags(filter: &FilterSpec) -> String {
    let mut flags = Vec::new();
    let functions = function_flags(filter);
    if !functions.is_empty() {
        flags.push(functions);
    }
    if let Some(depth) = filter.max_depth {
        flags.push(format!("--max-depth {depth}"));
    }
    if filter.min_duration_ns > 0 {
        flags.push(format!("--time-filter {}ns", filter.min_duration_ns));
    }
    if !filter.tids.is_empty() {
        let tids: Vec<String> = filter.tids.iter().map(u32::to_string).collect();
        flags.push(format!("--tid-filter {}", tids.join(",")));
    }
    flags.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{FunctionKind, TracedFunction};

    fn table(names: &[&str]) -> FunctionTable {
        FunctionTable {
            modules: vec!["/bin/prog".into()],
            functions: names
                .iter()
                .map(|name| TracedFunction {
                    name: name.to_string(),
                    module: 0,
                    offset: 0,
                    size: 1,
                    kind: FunctionKind::Function,
                    probes: Default::default(),
                    values: Vec::new(),
                    user_stack: false,
                    argument_names: Vec::new(),
                    source: None,
                    detached: None,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn reason(
        events: u64,
        table: &FunctionTable,
        filter: &FilterSpec,
        change: impl Fn(&mut NoCalls),
    ) -> String {
        let replay = ReplayStats::default();
        let mut no_calls = NoCalls {
            file: Path::new("t.data"),
            events,
            damaged_chunks: 0,
            cut_short: false,
            lost_events: 0,
            table,
            filter,
            replay: &replay,
        };
        change(&mut no_calls);
        no_calls.to_string()
    }

    #[test]
    fn a_file_without_events() {
        let one = table(&["tick"]);
        let many = table(&["a", "b", "c", "d"]);
        let all = FilterSpec::default();
        assert_eq!(
            reason(0, &one, &all, |_| {}),
            "t.data holds no events: its one traced function, tick, never ran: the program \
             exited before its first traced call, or the record-time filter kept only functions \
             it did not call"
        );
        assert!(reason(0, &many, &all, |_| {}).contains("none of its 4 traced functions ran"));
        assert!(reason(0, &table(&["a", "b"]), &all, |_| {}).contains("(a, b) never ran"));
        assert_eq!(
            reason(0, &one, &all, |r| r.lost_events = 12),
            "all 12 events of t.data were lost, the ring buffer being full: record again with a \
             larger --buffer-size"
        );
        assert!(reason(0, &one, &all, |r| r.cut_short = true).contains("cut short"));
        assert_eq!(
            reason(0, &one, &all, |r| r.damaged_chunks = 2),
            "every events chunk of t.data is damaged"
        );
    }

    #[test]
    fn a_report_whose_filters_hide_everything() {
        let table = table(&["main", "work"]);
        let filter = |functions: &[&str], depth| {
            let functions: Vec<String> = functions.iter().map(|f| f.to_string()).collect();
            FilterSpec::parse(&functions, &[], depth, None, &[7]).unwrap()
        };
        assert_eq!(
            reason(10, &table, &filter(&["fib*", "x"], None), |_| {}),
            "the report's -f 'fib*,x' matches none of the 2 functions traced in t.data"
        );
        assert_eq!(
            reason(10, &table, &filter(&["main"], Some(2)), |_| {}),
            "the report's filters (-f main --max-depth 2 --tid-filter 7) hide every call of the \
             10 events in t.data"
        );
        let all = FilterSpec::default();
        assert!(reason(4, &table, &all, |_| {}).contains("start no call"));
    }
}
