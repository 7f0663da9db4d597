//! Command-line flags of every subcommand.

use std::path::PathBuf;

use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use utrace::report::Format;

#[derive(Parser)]
#[command(
    name = "utrace",
    version,
    about = "Trace every function of an unmodified program with eBPF uprobes, and report where the time goes",
    after_help = "Examples:\n  utrace record -c \"./prog arg\"          # writes ./utrace.data\n  utrace report --format=summary\n  utrace report --format=svg -o flame.svg"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Parses the command line. A usage error is one line, like utrace's own errors (scripts and
/// logs get one line per failure; the usage it would repeat is what `--help` is for), and exits
/// with 2, as clap does. Help and version, asked for or shown for a bare `utrace`, print as clap
/// prints them.
pub fn parse() -> Cli {
    Cli::try_parse().unwrap_or_else(|error| {
        if !error.use_stderr()
            || error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        {
            error.exit();
        }
        // clap's message is its first paragraph; usage and the --help hint follow a blank line.
        let rendered = error.render().to_string();
        let message = rendered
            .lines()
            .map(str::trim)
            .take_while(|line| !line.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        let message = message.strip_prefix("error: ").unwrap_or(&message);
        eprintln!("utrace: error: {message} (see --help)");
        std::process::exit(2)
    })
}

#[derive(Subcommand)]
pub enum Command {
    /// Run a command and record every call of its functions into a data file.
    Record(RecordArgs),
    /// Read a data file and print a report.
    Report(ReportArgs),
}

#[derive(Args)]
pub struct RecordArgs {
    /// The command to run and trace, split into words like a shell would.
    #[arg(
        short = 'c',
        long = "command",
        value_name = "CMD",
        conflicts_with = "args"
    )]
    pub command: Option<String>,
    /// The command and its arguments, as separate words (instead of -c).
    #[arg(
        value_name = "COMMAND",
        trailing_var_arg = true,
        required_unless_present = "command"
    )]
    pub args: Vec<String>,
    /// Where to write the trace.
    #[arg(short, long, value_name = "FILE", default_value = "utrace.data")]
    pub output: PathBuf,
    /// Ring buffer size (K, M and G suffixes; rounded up to a power of two).
    #[arg(long, value_name = "SIZE", default_value = "16M", value_parser = parse_size)]
    pub buffer_size: u64,
    /// Say what was planned, attached and measured.
    #[arg(short, long)]
    pub debug: bool,
}

#[derive(Args)]
pub struct ReportArgs {
    /// The data file to read.
    #[arg(short, long, value_name = "FILE", default_value = "utrace.data")]
    pub input: PathBuf,
    /// summary | flame-graph (folded stacks) | svg (flame graph) | json
    #[arg(long, value_name = "FORMAT", default_value = "summary")]
    pub format: Format,
    /// Write the report to FILE instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Parses `4096`, `64K`, `16M`, `1G` (binary units; an optional trailing `B`/`iB`).
fn parse_size(text: &str) -> Result<u64, String> {
    let upper = text.trim().to_ascii_uppercase();
    let digits = upper.trim_end_matches("IB").trim_end_matches('B');
    let (number, shift) = match digits.chars().last() {
        Some('K') => (&digits[..digits.len() - 1], 10),
        Some('M') => (&digits[..digits.len() - 1], 20),
        Some('G') => (&digits[..digits.len() - 1], 30),
        _ => (digits, 0),
    };
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size like 16M or 1048576"))?;
    value
        .checked_mul(1 << shift)
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("{text:?} is out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("16M"), Ok(16 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("0").is_err());
    }
}
