//! Command-line flags of every subcommand.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use utrace::data::OnDamage;
use utrace::elf::{DebugLookup, SitePolicy};
use utrace::filter::{parse_globs, FilterError, FilterSpec};
use utrace::plan::{
    EventRequests, ExitPolicy, KernelFunctionRequests, LibraryPatterns, PltLibraries, SourceLines,
    ValueRequests,
};
use utrace::record::budget::Slowdown;
use utrace::record::{
    self, split_command, ChildSetup, RecordOptions, TargetSpec, TraceOptions, UserIds,
};
use utrace::report::flame_graph::Weight;
use utrace::report::summary::SortKey;
use utrace::report::{Format, ReportOptions, ReportRequest};
use utrace::value::STRING_SIZE_DEFAULT;

#[derive(Parser)]
#[command(
    name = "utrace",
    version,
    about = "Trace every function of an unmodified program with eBPF uprobes, and report where the time goes",
    after_help = "Examples:\n  utrace record -c \"./prog arg\"          # writes ./utrace.data\n  utrace report --format=summary\n  utrace report --format=replay -f 'fib*'\n  utrace live -c \"./prog arg\"            # the call tree as it happens\n  utrace report --format=svg -o flame.svg\n  utrace info"
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
        eprintln!("utrace: error: {}", one_line(&error.render().to_string()));
        std::process::exit(2)
    })
}

/// clap's rendered error in one line: its first paragraph (usage and the --help hint follow a
/// blank line), with the tip that names a similar flag or subcommand (`--folow`: a similar
/// argument exists: '--follow') and not the others.
fn one_line(rendered: &str) -> String {
    let mut paragraphs = rendered.split("\n\n");
    let first = paragraphs.next().unwrap_or_default();
    let message = first.lines().map(str::trim).collect::<Vec<_>>().join(" ");
    let message = message.strip_prefix("error: ").unwrap_or(&message);
    let similar: Vec<&str> = paragraphs
        .flat_map(str::lines)
        .filter_map(|line| line.trim().strip_prefix("tip: "))
        .filter(|tip| tip.contains("similar"))
        .collect();
    match similar.as_slice() {
        [] => format!("{message} (see --help)"),
        tips => format!("{message}; {} (see --help)", tips.join("; ")),
    }
}

#[derive(Subcommand)]
pub enum Command {
    /// Run a command and record every call of its functions into a data file.
    Record(RecordArgs),
    /// Run a command (or watch a process) and print its call tree as it happens.
    Live(LiveArgs),
    /// Read a data file and print a report.
    Report(ReportArgs),
    /// Say what a data file holds: command, host, times, functions, events, threads.
    Info(InfoArgs),
    /// Started by `record` and `live` where a killed recorder would leave work undone: outlives
    /// it to give the program's stacks back and let stopped processes go (src/record/guardian.rs).
    #[command(hide = true)]
    Guardian(GuardianArgs),
    /// Started by `record` and `live` to release their probes: takes over the last reference of
    /// each link, whose release the kernel may hold up (src/probe/release.rs).
    #[command(hide = true)]
    ReleaseLinks {
        /// The inherited link descriptors: comma lists, released one list after the other.
        groups: String,
    },
}

#[derive(Args)]
pub struct GuardianArgs {
    /// The traced process.
    pub pid: u32,
    /// The id of the BPF ring buffer that says the recorder died.
    #[arg(long)]
    pub deaths_map: u32,
    /// The id of the BPF map of its shadow stacks, whose frames get their return addresses back.
    #[arg(long)]
    pub shadow_stacks_map: Option<u32>,
    /// The id of the BPF map of the followed processes, which are let go.
    #[arg(long)]
    pub followed_map: Option<u32>,
}

impl GuardianArgs {
    pub fn duties(&self) -> utrace::record::guardian::Duties {
        utrace::record::guardian::Duties {
            target: self.pid,
            deaths_map: self.deaths_map,
            shadow_stacks_map: self.shadow_stacks_map,
            followed_map: self.followed_map,
        }
    }
}

impl Command {
    /// How many times `-d` was given (report and info have no such flag).
    pub fn debug_level(&self) -> u8 {
        match self {
            Command::Record(args) => args.trace.debug,
            Command::Live(args) => args.trace.debug,
            Command::Report(_)
            | Command::Info(_)
            | Command::Guardian(_)
            | Command::ReleaseLinks { .. } => 0,
        }
    }
}

/// What to trace and how: the flags `record` and `live` share. The filters are the report's, but
/// here `-f` and `--no-function` decide which functions get probes, and the others which calls
/// are kept: their help says so.
#[derive(Args)]
#[command(group = clap::ArgGroup::new("target").required(true).args(["command", "pid", "args"]))]
#[command(mut_arg("functions", |arg| arg.help(
    "Probe only the functions matching GLOB (`*`, `?`, `[...]`); repeatable, or a comma list. \
     The others get no probes: their calls are neither counted nor timed, and their time counts \
     in their traced caller's self time")))]
#[command(mut_arg("no_functions", |arg| arg.help(
    "Leave the functions matching GLOB without probes; repeatable, or a comma list")))]
#[command(mut_arg("max_depth", |arg| arg.help(
    "Keep only calls at most N deep (1: the outermost calls of each thread)")))]
#[command(mut_arg("time_filter", |arg| arg.help(
    "Keep only calls that last at least DURATION (500ns, 2us, 1.5ms, 1s)")))]
#[command(mut_arg("tid_filter", |arg| arg.help(
    "Keep only the calls of thread TID; repeatable, or a comma list")))]
pub struct TraceArgs {
    /// The command to run and trace, split into words like a shell would.
    #[arg(short = 'c', long = "command", value_name = "CMD")]
    pub command: Option<String>,
    /// Trace a running process instead, until it exits, Ctrl-C, SIGTERM or --duration.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pid: Option<u32>,
    /// The command and its arguments, as separate words (instead of -c).
    #[arg(value_name = "COMMAND", trailing_var_arg = true)]
    pub args: Vec<String>,
    /// Stop tracing after this long (5 or 5s, 250ms, 2m; a bare number is seconds); a started
    /// command runs on.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Also trace the functions inside the shared libraries whose file name matches the glob
    /// (repeatable; comma-separated lists; e.g. 'libc.so*').
    #[arg(long = "nest-lib", value_name = "GLOB")]
    pub nest_lib: Vec<String>,
    /// Also look for the separate debug files of stripped files under this folder, before
    /// /usr/lib/debug: by build id (DIR/.build-id/xx/yyyy.debug) and by debug link
    /// (DIR/<the file's folder>/NAME) (repeatable).
    #[arg(long = "debug-dir", value_name = "DIR")]
    pub debug_dir: Vec<PathBuf>,
    /// Trace only the PLT calls into the shared libraries whose file name matches the glob
    /// (repeatable; comma-separated lists; e.g. 'libm*').
    #[arg(short = 'l', long = "lib", value_name = "GLOB")]
    pub lib: Vec<String>,
    /// Do not trace the PLT calls into the shared libraries whose file name matches the glob.
    #[arg(long = "no-lib", value_name = "GLOB")]
    pub no_lib: Vec<String>,
    /// Name PLT calls after the library they call into (`cos@libm.so.6`, not `cos@plt`).
    #[arg(long)]
    pub libname: bool,
    /// Run the command as this user (name or uid), with its groups.
    #[arg(
        short = 'u',
        long = "user",
        value_name = "USER",
        conflicts_with = "pid"
    )]
    pub user: Option<String>,
    /// Run the command with address space randomization off.
    #[arg(long, conflicts_with = "pid")]
    pub no_randomize_addr: bool,
    /// Put every entry probe on the function's first instruction, not past a leading endbr64
    /// (which the kernel single-steps): for comparison.
    #[arg(long)]
    pub probe_at_entry: bool,
    /// Read where each traced function starts in the source (file and line, from DWARF: the
    /// file's own or its debug file's) and store it, for `report --format=replay --srcline`
    /// and json; live shows it on each call's first line.
    #[arg(long)]
    pub srcline: bool,
    /// Ring buffer size (K, M and G suffixes; rounded up to a power of two).
    #[arg(long, value_name = "SIZE", default_value = "16M", value_parser = parse_size)]
    pub buffer_size: u64,
    /// How function exits are seen: ret (a probe on each `ret` and tail jump: C++ exceptions
    /// unwind through traced frames) or uretprobe (the kernel's return probes). Default:
    /// uretprobe, but ret for a running process (-p) that maps an unwinder (C++, Rust).
    #[arg(long, value_name = "KIND")]
    pub exit_probes: Option<ExitPolicy>,
    /// Also trace the processes the target forks, and the programs they exec (each probed for
    /// its own functions); reports label each process by pid.
    #[arg(long)]
    pub follow: bool,
    /// Keep the program within this slowdown: 2x (at most twice as slow; the default with no
    /// value) or 10% (at most 10% slower). Functions whose probes cost the most for what they
    /// tell (hot short calls, leaves first) are detached while it runs; reports mark them.
    /// Needs uprobe sessions (Linux 6.13).
    #[arg(
        long,
        value_name = "SLOWDOWN",
        num_args = 0..=1,
        require_equals = false,
        default_missing_value = utrace::record::budget::DEFAULT_BUDGET,
        value_parser = Slowdown::parse,
        conflicts_with = "follow"
    )]
    pub budget: Option<Slowdown>,
    /// Capture arguments of the functions matching GLOB: GLOB@ITEM[,ITEM...], ITEM argN (from 1)
    /// with an optional /FMT: d (signed, the default; a kernel function's type from its BTF),
    /// u, x, c, p, s (C string), and a size 8|16|32|64 (`add@arg1,arg2/x32`, `open@plt@arg1/s`,
    /// `vfs_write@arg3`); repeatable.
    #[arg(short = 'A', long = "argument", value_name = "SPEC")]
    pub arguments: Vec<String>,
    /// Capture the return value of the functions matching GLOB: GLOB@retval[/FMT]; repeatable.
    #[arg(short = 'R', long = "retval", value_name = "SPEC")]
    pub retvals: Vec<String>,
    /// Capture the arguments and return values of common libc functions, of every function
    /// whose DWARF prototype has only integers, pointers and strings, and of the kernel
    /// functions of -k, named, from the kernel's BTF.
    #[arg(short = 'a', long = "auto-args")]
    pub auto_args: bool,
    /// The most bytes of a string argument or return value captured.
    #[arg(long, value_name = "BYTES", default_value_t = u64::from(STRING_SIZE_DEFAULT))]
    pub string_size: u64,
    /// Also trace events, shown in the call tree where they happened: offcpu
    /// (tracepoint:sched:sched_switch: time off the CPU as calls of linux:schedule), syscalls
    /// (or tracepoint:syscalls:sys_enter_NAME, globs: each system call a call `sys_NAME` with its
    /// return value), usdt:PROVIDER:NAME (globs; USDT probes of the program and the --nest-lib
    /// libraries, with their arguments); repeatable, or a comma list.
    #[arg(short = 'E', long = "event", value_name = "EVENT")]
    pub events: Vec<String>,
    /// Also trace the kernel functions matching GLOB (repeatable, comma lists), as calls under
    /// the user function whose system call reached them, in module [kernel]: needs kprobes
    /// (kprobe_multi links where the kernel has them, Linux 5.18; else one kprobe pair per
    /// function, with BPF cookies, Linux 5.15).
    #[arg(short = 'k', long = "kernel", value_name = "GLOB")]
    pub kernel: Vec<String>,
    /// With -k: record the traced kernel functions only down to depth N below a system call (1:
    /// those it reaches first).
    #[arg(
        short = 'K',
        long = "kernel-depth",
        value_name = "N",
        requires = "kernel"
    )]
    pub kernel_depth: Option<u32>,
    /// Say what was planned, attached and measured; twice (-dd) adds libbpf's own messages.
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub debug: u8,
    /// Functions left out by -f/--no-function get no probes at all; the depth, time and thread
    /// filters decide which calls are kept (the help of each says so: see above).
    #[command(flatten)]
    pub filter: FilterArgs,
}

#[derive(Args)]
pub struct RecordArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Where to write the trace.
    #[arg(short, long, value_name = "FILE", default_value = "utrace.data")]
    pub output: PathBuf,
    /// Stop recording once the file reaches SIZE (K, M and G suffixes); a started command runs
    /// on, untraced. Without it, a warning comes once the file passes 1G.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_size: Option<u64>,
    /// Also unwind the user stack (frame pointers) at each call of the traced functions
    /// matching GLOB; `report --format=stacks` shows the distinct stacks. Repeatable, and GLOB
    /// may be a comma-separated list.
    #[arg(long = "stack", value_name = "GLOB")]
    pub stack: Vec<String>,
}

impl RecordArgs {
    /// What `record` is asked to do.
    pub fn options(self) -> Result<RecordOptions> {
        let mut trace = self.trace.options()?;
        trace.values.user_stacks = parse_globs("--stack", &self.stack)?;
        Ok(RecordOptions {
            trace,
            output: self.output,
            max_size: self.max_size,
        })
    }
}

#[derive(Args)]
pub struct LiveArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Write the call tree to FILE instead of standard error.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Show the thread id column from the start (it appears anyway once a second thread calls).
    #[arg(long)]
    pub tid: bool,
    /// Show when each line's event happened (CLOCK_MONOTONIC seconds).
    #[arg(long)]
    pub timestamp: bool,
    /// Show the CPU each line's event happened on.
    #[arg(long)]
    pub cpuid: bool,
    /// One line per entry and per exit, as they come, instead of the tree.
    #[arg(long, conflicts_with_all = ["tid", "timestamp", "cpuid"])]
    pub flat: bool,
    /// Show durations as measured, with the cost of utrace's own probes left in (not measured
    /// at start then).
    #[arg(long)]
    pub raw_times: bool,
}

#[derive(Args)]
pub struct ReportArgs {
    /// The data file to read.
    #[arg(short, long, value_name = "FILE", default_value = "utrace.data")]
    pub input: PathBuf,
    /// summary | flame-graph (folded stacks) | svg (flame graph) | json | replay (call tree) |
    /// chrome (trace-event JSON for Perfetto) | stacks (the call paths to each -f function) | dot (call graph for graphviz) | graph (text call graph of each -f function's callees) | histogram (log2 histogram of
    /// each function's durations)
    #[arg(long, value_name = "FORMAT", default_value = "summary")]
    pub format: Format,
    /// Write the report to FILE instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Summary and json: sort by total | self | calls | avg | max (largest first).
    #[arg(long, value_name = "KEY", default_value = "total")]
    pub sort: SortKey,
    /// Summary: one table per thread.
    #[arg(long)]
    pub per_thread: bool,
    /// Summary: average, minimum and maximum of each function's self time instead of its total.
    #[arg(long)]
    pub avg_self: bool,
    /// Compare with the recording in FILE (the base): per function, the change from it to
    /// this one (--format=summary, or json).
    #[arg(long, value_name = "FILE")]
    pub diff: Option<PathBuf>,
    /// Summary: the p50, p90 and p99 of each function's durations (json always has them).
    #[arg(long)]
    pub percentiles: bool,
    /// Flame graphs: weigh each call by its self time, or count it once (time | calls).
    #[arg(long, value_name = "WEIGHT", default_value = "time")]
    pub weight: Weight,
    /// Stacks: the paths as folded stacks weighted by calls (flamegraph.pl input).
    #[arg(long)]
    pub folded: bool,
    /// Replay: show when each line's event happened (CLOCK_MONOTONIC seconds).
    #[arg(long)]
    pub timestamp: bool,
    /// Replay: show the CPU each line's event happened on.
    #[arg(long)]
    pub cpuid: bool,
    /// Show durations as measured, with the cost of utrace's own probes left in (by default
    /// the costs measured when recording are taken out).
    #[arg(long)]
    pub raw_times: bool,
    /// Replay and chrome: leave out the captured arguments and return values.
    #[arg(long)]
    pub no_args: bool,
    /// Replay: end each call's first line with the source file and line where its function
    /// starts (`/* test/args.c:10 */`), as recorded from DWARF; chrome: give it in each call's
    /// args (`"srcline"`).
    #[arg(long)]
    pub srcline: bool,
    #[command(flatten)]
    pub damage: DamageArgs,
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// What `report` and `info` do with a damaged data file.
#[derive(Args)]
pub struct DamageArgs {
    /// Fail on a damaged chunk, or on a second recording in the file, instead of skipping it
    /// with a warning (for scripts).
    #[arg(long)]
    pub strict: bool,
}

impl DamageArgs {
    pub fn on_damage(&self) -> OnDamage {
        if self.strict {
            OnDamage::Fail
        } else {
            OnDamage::Skip
        }
    }
}

/// Which calls to show; the same flags for every subcommand that takes them.
#[derive(Args)]
pub struct FilterArgs {
    /// Show only functions matching GLOB (`*`, `?`, `[...]`); repeatable, or a comma list. The
    /// time of hidden calls counts in their caller's self time.
    #[arg(short = 'f', long = "function", value_name = "GLOB")]
    pub functions: Vec<String>,
    /// Hide functions matching GLOB; repeatable, or a comma list.
    #[arg(long = "no-function", value_name = "GLOB")]
    pub no_functions: Vec<String>,
    /// Show calls at most N deep (1: the outermost calls of each thread only).
    #[arg(long, value_name = "N")]
    pub max_depth: Option<u32>,
    /// Hide calls shorter than DURATION (500ns, 2us, 1.5ms, 1s).
    #[arg(long, value_name = "DURATION")]
    pub time_filter: Option<String>,
    /// Show only thread TID; repeatable, or a comma list.
    #[arg(long, value_name = "TID", value_delimiter = ',')]
    pub tid_filter: Vec<u32>,
}

impl TraceArgs {
    /// What to trace and how, as the recorder takes it.
    pub fn options(self) -> Result<TraceOptions> {
        let args = self;
        let target = match (args.pid, args.command) {
            (Some(pid), _) => TargetSpec::Pid(pid),
            (None, Some(line)) => TargetSpec::Command(split_command(&line)?),
            (None, None) => TargetSpec::Command(args.args),
        };
        let user = args.user.as_deref().map(UserIds::lookup).transpose()?;
        Ok(TraceOptions {
            target,
            buffer_bytes: record::ring_buffer_size(args.buffer_size)?,
            duration: args.duration,
            nest_libs: LibraryPatterns::parse("--nest-lib", &args.nest_lib)?,
            debug: DebugLookup::with_dirs(&args.debug_dir),
            source_lines: match args.srcline {
                true => SourceLines::Read,
                false => SourceLines::Skip,
            },
            sites: if args.probe_at_entry {
                SitePolicy::Entry
            } else {
                SitePolicy::Best
            },
            plt_libraries: PltLibraries {
                only: LibraryPatterns::parse("--lib", &args.lib)?,
                except: LibraryPatterns::parse("--no-lib", &args.no_lib)?,
                name_by_library: args.libname,
            },
            child_setup: ChildSetup {
                user,
                no_randomize_addr: args.no_randomize_addr,
            },
            filter: args.filter.spec()?,
            exit_probes: args.exit_probes,
            follow: args.follow,
            budget: args.budget,
            values: ValueRequests::parse(
                &args.arguments,
                &args.retvals,
                args.auto_args,
                args.string_size,
            )?,
            events: EventRequests {
                kernel_functions: KernelFunctionRequests::parse(&args.kernel, args.kernel_depth)?,
                // Taken out of the calls it falls in by default (`-E offcpu` records it as part of
                // all the time off the CPU).
                preemption: true,
                ..EventRequests::parse(&args.events)?
            },
        })
    }
}

impl ReportArgs {
    /// The report these flags ask for, each format-specific flag checked against the format.
    pub fn request(self) -> Result<ReportRequest> {
        let format = self.format;
        if (self.per_thread || self.avg_self || self.percentiles) && format != Format::Summary {
            bail!(
                "--per-thread, --avg-self and --percentiles apply to --format=summary, not {format}"
            );
        }
        if self.sort != SortKey::Total && !matches!(format, Format::Summary | Format::Json) {
            bail!("--sort applies to --format=summary and json, not {format}");
        }
        if (self.timestamp || self.cpuid) && format != Format::Replay {
            bail!("--timestamp and --cpuid apply to --format=replay, not {format}");
        }
        if self.weight != Weight::Time && !matches!(format, Format::FlameGraph | Format::Svg) {
            bail!("--weight applies to --format=flame-graph and svg, not {format}");
        }
        if self.diff.is_some() && !matches!(format, Format::Summary | Format::Json) {
            bail!("--diff compares summaries: use it with --format=summary or json, not {format}");
        }
        if self.diff.is_some() && (self.per_thread || self.avg_self || self.percentiles) {
            bail!("--diff compares calls, total and self times: it takes no --per-thread, --avg-self or --percentiles");
        }
        if self.srcline && !matches!(format, Format::Replay | Format::Chrome) {
            bail!("--srcline applies to --format=replay and chrome, not {format} (json always gives each function's \"srcline\")");
        }
        if self.folded && format != Format::Stacks {
            bail!("--folded applies to --format=stacks, not {format} (--format=flame-graph folds every path)");
        }
        Ok(ReportRequest {
            options: ReportOptions {
                sort: self.sort,
                per_thread: self.per_thread,
                avg_self: self.avg_self,
                weight: self.weight,
                filter: self.filter.spec()?,
                show_timestamps: self.timestamp,
                show_cpus: self.cpuid,
                folded: self.folded,
                percentiles: self.percentiles,
                hide_values: self.no_args,
                show_source_lines: self.srcline,
                ..ReportOptions::default()
            },
            input: self.input,
            output: self.output,
            format,
            raw_times: self.raw_times,
            on_damage: self.damage.on_damage(),
            diff: self.diff,
        })
    }
}

impl FilterArgs {
    pub fn spec(&self) -> Result<FilterSpec, FilterError> {
        FilterSpec::parse(
            &self.functions,
            &self.no_functions,
            self.max_depth,
            self.time_filter.as_deref(),
            &self.tid_filter,
        )
    }
}

#[derive(Args)]
pub struct InfoArgs {
    /// The data file to read.
    #[arg(short, long, value_name = "FILE", default_value = "utrace.data")]
    pub input: PathBuf,
    #[command(flatten)]
    pub damage: DamageArgs,
    /// Also say where the symbols of each traced file come from (its .symtab, a debug file,
    /// debuginfod, MiniDebugInfo) and how many functions each table gives, reading the files as
    /// they are now.
    #[arg(long)]
    pub symbols: bool,
    /// With --symbols: also look for debug files under this folder (repeatable), as record does.
    #[arg(long = "debug-dir", value_name = "DIR", requires = "symbols")]
    pub debug_dir: Vec<PathBuf>,
    /// Instead of a data file, list the USDT probes FILE carries (provider:name, address,
    /// semaphore, arguments), as `-E usdt:PROVIDER:NAME` names them.
    #[arg(long = "list-usdt", value_name = "FILE", conflicts_with = "symbols")]
    pub list_usdt: Option<PathBuf>,
}

impl InfoArgs {
    /// Where `--symbols` looks for debug files; `None` without it.
    pub fn symbol_lookup(&self) -> Option<DebugLookup> {
        self.symbols
            .then(|| DebugLookup::with_dirs(&self.debug_dir))
    }
}

/// Parses a recording's length: a duration with its unit (`5s`, `250ms`, `2m`), or a bare
/// number of seconds (`5`, `1.5`), as `timeout` and `sleep` take it: a bare number of
/// nanoseconds is never what was meant here.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration like 5 (seconds), 5s, 250ms or 2m");
    let text = text.trim();
    let with_unit = match text.ends_with(|c: char| c.is_ascii_digit()) {
        true => format!("{text}s"),
        false => text.to_owned(),
    };
    utrace::filter::parse_duration(&with_unit)
        .map(Duration::from_nanos)
        .ok_or_else(bad)
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

    #[test]
    fn usage_errors_are_one_line_with_the_similar_flag() {
        let message = |args: &[&str]| {
            let error = Cli::try_parse_from(args).err().unwrap();
            one_line(&error.render().to_string())
        };
        assert_eq!(
            message(&["utrace", "record", "--folow", "--", "/bin/true"]),
            "unexpected argument '--folow' found; a similar argument exists: '--follow' \
             (see --help)"
        );
        assert_eq!(
            message(&["utrace", "report", "--formt=json"]),
            "unexpected argument '--formt' found; a similar argument exists: '--format' \
             (see --help)"
        );
        assert_eq!(
            message(&["utrace", "reprot"]),
            "unrecognized subcommand 'reprot'; a similar subcommand exists: 'report' (see --help)"
        );
        assert_eq!(
            message(&["utrace", "report", "--zzzzzz"]),
            "unexpected argument '--zzzzzz' found (see --help)"
        );
    }

    /// The help of `record` (and `live`) says what `-f` does there: it decides which functions
    /// get probes, where `report`'s shows or hides them.
    #[test]
    fn record_help_says_that_f_decides_the_probes() {
        use clap::CommandFactory;
        let mut cli = Cli::command();
        for subcommand in ["record", "live"] {
            let help = cli
                .find_subcommand_mut(subcommand)
                .unwrap()
                .render_help()
                .to_string();
            let line = |flag: &str| {
                let found = help.lines().find(|line| line.contains(flag));
                found
                    .unwrap_or_else(|| panic!("{flag} in {help}"))
                    .to_owned()
            };
            assert!(
                line("--function <GLOB>").contains("Probe only the functions matching GLOB"),
                "{subcommand}: {help}"
            );
            assert!(line("--no-function <GLOB>").contains("without probes"));
            assert!(line("--max-depth <N>").contains("Keep only calls"));
        }
        let report = cli.find_subcommand_mut("report").unwrap().render_help();
        assert!(report
            .to_string()
            .contains("Show only functions matching GLOB"));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("100us"), Ok(Duration::from_micros(100)));
        // A bare number is seconds, as `timeout 5` and `sleep 5` take it.
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration(" 1.5 "), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("5x").is_err());
    }
}
