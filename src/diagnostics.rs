//! Where diagnostics go: library code says what happened through the `log` crate, at a level;
//! this logger writes them to stderr as `utrace: warning: …` (warnings), `utrace: …` (what `-d`
//! shows) and libbpf's own lines as they come (`-dd`).

use log::{Level, LevelFilter, Log, Metadata, Record};

/// The target libbpf's messages are logged under (see `probe`): shown only at trace level.
pub const LIBBPF_TARGET: &str = "libbpf";

struct StderrLogger;

impl Log for StderrLogger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        if record.target() == LIBBPF_TARGET {
            // libbpf's lines end with their own newline.
            eprint!("{}", record.args());
            return;
        }
        match record.level() {
            Level::Error => eprintln!("utrace: error: {}", record.args()),
            Level::Warn => eprintln!("utrace: warning: {}", record.args()),
            _ => eprintln!("utrace: {}", record.args()),
        }
    }

    fn flush(&self) {}
}

/// `n` and the noun that goes with it: `1 function`, `2 functions`.
pub fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The first `shown` of `items`, comma-separated, then how many more there are and `where_all`
/// says where to see them: one line stays readable however many there are.
pub fn first_of(items: &[String], shown: usize, where_all: &str) -> String {
    match items.len() > shown {
        true => format!(
            "{}, and {} more ({where_all})",
            items[..shown].join(", "),
            items.len() - shown
        ),
        false => items.join(", "),
    }
}

/// Sends diagnostics to stderr: warnings and what a user must know always, `-d` adds utrace's
/// debugging lines, `-dd` libbpf's.
pub fn init(debug: u8) {
    static LOGGER: StderrLogger = StderrLogger;
    let level = match debug {
        0 => LevelFilter::Info,
        1 => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    };
    // Only fails if a logger is already set (a second call): the first one stays.
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_long_list_names_its_first_items_and_counts_the_rest() {
        let items: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        assert_eq!(super::first_of(&items, 3, "see -d"), "a, b, c");
        assert_eq!(
            super::first_of(&items, 2, "see -d"),
            "a, b, and 1 more (see -d)"
        );
    }
}
