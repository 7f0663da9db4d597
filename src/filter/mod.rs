//! What the user asked to see: `-f/--function`, `--no-function`, `--max-depth`, `--time-filter`
//! and `--tid-filter`. The flags are parsed here, once, for every subcommand that takes them;
//! [`FilteredSink`] applies them to replayed calls.
//!
//! A call is shown when its function matches a `--function` glob (any function when there is
//! none) and no `--no-function` glob, it runs on a `--tid-filter` thread (any thread when there
//! is none), fewer than `--max-depth` shown calls are open around it, and it lasted at least the
//! `--time-filter`. A hidden call is not dropped from the times: it counts in the self time of
//! its nearest shown caller, so the times of what is shown still add up to the traced time, as
//! if only the shown functions had been traced.

mod glob;
mod sink;

use thiserror::Error;

pub use glob::{Glob, GlobError};
pub use sink::FilteredSink;

use crate::table::FunctionTable;

/// A flag's value that cannot be used; the message names the flag.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FilterError {
    #[error("{flag} `{glob}`: {error}")]
    Glob {
        flag: &'static str,
        glob: String,
        error: GlobError,
    },
    #[error("--time-filter `{0}`: not a duration like 500ns, 2us, 1.5ms or 1s")]
    Duration(String),
    #[error("--max-depth 0 would show nothing: use 1 or more")]
    ZeroDepth,
}

/// The parsed filters; [`FilterSpec::default`] shows everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilterSpec {
    /// `-f/--function`: show only matching functions (all when empty).
    pub functions: Vec<Glob>,
    /// `--no-function`: hide matching functions.
    pub no_functions: Vec<Glob>,
    /// `--max-depth`: show calls with fewer shown callers than this.
    pub max_depth: Option<u32>,
    /// `--time-filter`: hide calls shorter than this, in ns.
    pub min_duration_ns: u64,
    /// `--tid-filter`: show only these threads (all when empty).
    pub tids: Vec<u32>,
}

impl FilterSpec {
    /// Parses the flags' values as given on the command line. Globs may be repeated and each may
    /// be a comma list (see [`split_list`]).
    pub fn parse(
        functions: &[String],
        no_functions: &[String],
        max_depth: Option<u32>,
        time_filter: Option<&str>,
        tids: &[u32],
    ) -> Result<FilterSpec, FilterError> {
        if max_depth == Some(0) {
            return Err(FilterError::ZeroDepth);
        }
        let min_duration_ns = match time_filter {
            Some(text) => parse_duration(text).ok_or_else(|| FilterError::Duration(text.into()))?,
            None => 0,
        };
        Ok(FilterSpec {
            functions: parse_globs("--function", functions)?,
            no_functions: parse_globs("--no-function", no_functions)?,
            max_depth,
            min_duration_ns,
            tids: tids.to_vec(),
        })
    }

    /// Whether depth, time or thread filters are set: what only the events can tell, where
    /// function globs can already decide which functions are probed.
    pub fn filters_events(&self) -> bool {
        self.max_depth.is_some() || self.min_duration_ns > 0 || !self.tids.is_empty()
    }

    /// Whether every call is shown: the reports can then skip the filtering layer.
    pub fn shows_everything(&self) -> bool {
        self.functions.is_empty()
            && self.no_functions.is_empty()
            && self.max_depth.is_none()
            && self.min_duration_ns == 0
            && self.tids.is_empty()
    }

    /// Whether a function's name passes `--function` and `--no-function`.
    pub fn shows_name(&self, name: &str) -> bool {
        (self.functions.is_empty() || self.functions.iter().any(|g| g.matches(name)))
            && !self.no_functions.iter().any(|g| g.matches(name))
    }

    /// [`shows_name`](Self::shows_name) for every function of `table`, by function id.
    pub fn function_mask(&self, table: &FunctionTable) -> Vec<bool> {
        table
            .functions
            .iter()
            .map(|f| self.shows_name(&f.name))
            .collect()
    }

    /// Whether `--tid-filter` lets a thread through.
    pub fn shows_thread(&self, tid: u32) -> bool {
        self.tids.is_empty() || self.tids.contains(&tid)
    }
}

/// Parses a repeatable flag's globs, each value a comma list; errors name `flag`.
pub fn parse_globs(flag: &'static str, values: &[String]) -> Result<Vec<Glob>, FilterError> {
    values
        .iter()
        .flat_map(|value| split_list(value))
        .map(|text| {
            Glob::new(text).map_err(|error| FilterError::Glob {
                flag,
                glob: text.to_owned(),
                error,
            })
        })
        .collect()
}

/// Splits a comma list of globs. A comma inside `[...]`, `(...)` or `<...>` belongs to the glob,
/// so C++ names such as `int largest<int>(int, int)` stay whole.
pub fn split_list(value: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start, mut in_class) = (0i32, 0, false);
    let mut escaped = false;
    for (i, c) in value.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '(' | '<' if !in_class => depth += 1,
            ')' | '>' if !in_class => depth -= 1,
            ',' if !in_class && depth <= 0 => {
                parts.push(value[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(value[start..].trim());
    parts
}

/// Parses `1500`, `500ns`, `2us` (or `µs`), `1.5ms`, `1s`, `2m`, `1h` into nanoseconds; a bare number is
/// in ns. Decimals are exact to the nanosecond (`1.2345us` is 1234 ns: truncated, never
/// rounded up past what was written).
pub fn parse_duration(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale: u64 = match unit.trim() {
        "" | "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    if !fraction.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let mut fraction_ns = 0u64;
    let mut place = scale;
    for digit in fraction.bytes() {
        place /= 10;
        fraction_ns += u64::from(digit - b'0') * place;
    }
    whole.checked_mul(scale)?.checked_add(fraction_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_durations() {
        assert_eq!(parse_duration("1500"), Some(1500));
        assert_eq!(parse_duration("500ns"), Some(500));
        assert_eq!(parse_duration("2us"), Some(2_000));
        assert_eq!(parse_duration("2µs"), Some(2_000));
        assert_eq!(parse_duration("1.5ms"), Some(1_500_000));
        assert_eq!(parse_duration("1s"), Some(1_000_000_000));
        assert_eq!(parse_duration("2m"), Some(120_000_000_000));
        assert_eq!(parse_duration(".5us"), Some(500));
        assert_eq!(parse_duration("1.2345us"), Some(1_234));
        assert_eq!(parse_duration(" 3 ms "), Some(3_000_000));
        for bad in [
            "",
            "ms",
            "1.5.2ms",
            "2 minutes",
            "-1us",
            "1e3ns",
            ".",
            "99999999999s",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn filter_comma_lists_keep_brackets_whole() {
        assert_eq!(split_list("fib*,is_*"), ["fib*", "is_*"]);
        assert_eq!(split_list("a, b"), ["a", "b"]);
        assert_eq!(split_list("op_[a,s]*,main"), ["op_[a,s]*", "main"]);
        assert_eq!(
            split_list("int largest<int>(int, int),main"),
            ["int largest<int>(int, int)", "main"]
        );
        assert_eq!(split_list("a\\,b"), ["a\\,b"]);
    }

    #[test]
    fn filter_errors_name_the_flag() {
        let error = FilterSpec::parse(&["main,fib[".into()], &[], None, None, &[]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "--function `fib[`: `[` without a closing `]`"
        );
        let error = FilterSpec::parse(&[], &["x\\".into()], None, None, &[]).unwrap_err();
        assert!(error.to_string().starts_with("--no-function `x\\`"));
        let error = FilterSpec::parse(&[], &[], None, Some("2 weeks"), &[]).unwrap_err();
        assert!(error.to_string().starts_with("--time-filter `2 weeks`"));
        let error = FilterSpec::parse(&[], &[], Some(0), None, &[]).unwrap_err();
        assert!(error.to_string().starts_with("--max-depth 0"));
        let error = FilterSpec::parse(&["a,,b".into()], &[], None, None, &[]).unwrap_err();
        assert!(error.to_string().contains("empty pattern"), "{error}");
    }

    #[test]
    fn filter_names() {
        let spec = FilterSpec::parse(
            &["fib*".into(), "is_*".into()],
            &["is_odd".into()],
            None,
            None,
            &[],
        )
        .unwrap();
        assert!(spec.shows_name("fib"));
        assert!(spec.shows_name("is_even"));
        assert!(!spec.shows_name("is_odd"));
        assert!(!spec.shows_name("main"));
        assert!(!spec.shows_everything());
        assert!(FilterSpec::default().shows_everything());
        assert!(FilterSpec::default().shows_name("anything"));
    }
}
