//! `utrace info`: what a data file holds, without replaying it. The threads are found with one
//! pass over the events, so a file of any length is read in memory bounded by its threads.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::Path;

use thiserror::Error;

use crate::data::{DamagedChunk, DataError, DataReader, Metadata, OnDamage, Statistics};
use crate::elf::usdt::UsdtNote;
use crate::elf::{DebugLookup, ElfFile};
use crate::filter::FilterSpec;
use crate::report::summary::HumanDuration;
use crate::report::{scan_threads, ReportError, ThreadScan};
use crate::table::{FunctionKind, FunctionTable};

#[derive(Debug, Error)]
pub enum InfoError {
    #[error(transparent)]
    Open(#[from] DataError),
    /// Says itself that the events could not be read.
    #[error(transparent)]
    Read(ReportError),
}

/// `utrace info`: says what the data file at `input` holds, on standard output, with a warning
/// for each damaged chunk (or an error, `on_damage` says). With `symbols` (`--symbols`), also
/// where the symbols of each traced file come from, the files read now as `symbols` looks.
pub fn run(input: &Path, on_damage: OnDamage, symbols: Option<&DebugLookup>) -> anyhow::Result<()> {
    use anyhow::Context;
    // Every error names the file already.
    let info = DataFileInfo::read(input, on_damage)?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    info.write_text(&mut out)
        .and_then(|()| match symbols {
            Some(lookup) => write_symbol_origins(&info.functions.modules, lookup, &mut out),
            None => Ok(()),
        })
        .and_then(|()| out.flush())
        .context("cannot write to standard output")
}

/// `utrace info --list-usdt FILE`: the USDT probes `file` carries, one line each.
pub fn list_usdt(file: &Path) -> anyhow::Result<()> {
    use anyhow::Context;
    let elf = ElfFile::open(file)?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    write_usdt_notes(elf.usdt_notes(), &mut out)
        .and_then(|()| out.flush())
        .context("cannot write to standard output")
}

/// One line per note: `provider:name`, address, semaphore (`-` for none), argument operands.
pub fn write_usdt_notes(notes: &[UsdtNote], out: &mut dyn Write) -> io::Result<()> {
    if notes.is_empty() {
        return writeln!(out, "no USDT probe (the file has no .note.stapsdt)");
    }
    writeln!(
        out,
        "{:<32} {:>18} {:>18}  ARGUMENTS",
        "PROBE", "ADDRESS", "SEMAPHORE"
    )?;
    for note in notes {
        let semaphore = match note.semaphore {
            0 => "-".to_owned(),
            address => format!("{address:#x}"),
        };
        writeln!(
            out,
            "{:<32} {:>18} {semaphore:>18}  {}",
            format!("{}:{}", note.provider, note.name),
            format!("{:#x}", note.address),
            note.arguments
        )?;
    }
    Ok(())
}

/// What of each kind the table traces: functions, and the events of `-E`, as one line.
fn traced_kinds(table: &FunctionTable) -> String {
    let functions = table.functions.iter();
    let count = |kind: FunctionKind| functions.clone().filter(|f| f.kind == kind).count();
    let code = count(FunctionKind::Function) + count(FunctionKind::Plt) + count(FunctionKind::Got);
    let mut parts = vec![format!("{code} functions")];
    let kernel = functions.clone().filter(|f| f.kind == FunctionKind::Kernel);
    let (off_cpu, calls): (Vec<_>, Vec<_>) =
        kernel.partition(|f| f.name == crate::plan::OFF_CPU_FUNCTION);
    let (syscalls, kernel_functions): (Vec<_>, Vec<_>) =
        (calls.into_iter()).partition(|f| crate::plan::is_syscall_function_name(&f.name));
    if !off_cpu.is_empty() {
        parts.push(format!("off-CPU time ({})", crate::plan::OFF_CPU_FUNCTION));
    }
    if count(FunctionKind::Preemption) > 0 {
        parts.push("time preempted (taken out of the calls it fell in)".to_owned());
    }
    if !syscalls.is_empty() {
        parts.push(format!("{} system calls", syscalls.len()));
    }
    if !kernel_functions.is_empty() {
        parts.push(format!("{} kernel functions", kernel_functions.len()));
    }
    let usdt: Vec<&str> = (functions.clone())
        .filter(|f| f.kind == FunctionKind::Event)
        .map(|f| f.name.as_str())
        .collect();
    match usdt.len() {
        0 => {}
        1..=4 => parts.push(format!("USDT probes {}", usdt.join(", "))),
        n => parts.push(format!("{n} USDT probes")),
    }
    parts.join(", ")
}

/// Where the symbols of each of `modules` come from, and how many functions each table gives:
/// the files as they are now, looked up as `record` does.
pub fn write_symbol_origins(
    modules: &[String],
    lookup: &DebugLookup,
    out: &mut dyn Write,
) -> io::Result<()> {
    writeln!(out, "symbols:     of the traced files, as they are now")?;
    for module in modules {
        match ElfFile::open(Path::new(module)) {
            Ok(mut elf) => {
                elf.load_debug_symbols(lookup, Path::new(module));
                writeln!(out, "  {module}: {}", elf.symbol_origin())?;
            }
            Err(error) => writeln!(out, "  {module}: cannot be read now ({error})")?,
        }
    }
    Ok(())
}

/// What [`DataFileInfo::read`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct DataFileInfo {
    pub metadata: Metadata,
    pub functions: FunctionTable,
    /// `None` when the file was cut short before them.
    pub statistics: Option<Statistics>,
    pub scan: ThreadScan,
    pub cut_short: bool,
    /// The chunks skipped because they were damaged.
    pub damaged_chunks: Vec<DamagedChunk>,
    /// The events lost with them, when known.
    pub events_lost_to_damage: Option<u64>,
    /// Where a second recording starts in the file (two files joined), not read.
    pub second_recording: Option<u64>,
}

impl DataFileInfo {
    /// Reads the file at `path` through, logging a warning for each damaged chunk skipped.
    pub fn read(path: &Path, on_damage: OnDamage) -> Result<DataFileInfo, InfoError> {
        let mut reader = DataReader::open(path)?.on_damage(on_damage);
        let scan = scan_threads(&mut reader, &FilterSpec::default()).map_err(InfoError::Read)?;
        reader.warn_about_damage();
        Ok(DataFileInfo {
            metadata: reader.metadata().clone(),
            functions: reader.functions().clone(),
            statistics: reader.statistics().cloned(),
            scan,
            cut_short: reader.cut_short(),
            damaged_chunks: reader.damaged_chunks().to_vec(),
            events_lost_to_damage: reader.events_lost_to_damage(),
            second_recording: reader.second_recording(),
        })
    }

    /// Why the statistics are missing: the file was cut short, or its end is damaged.
    fn unknown_because(&self) -> &'static str {
        if self.cut_short {
            "cut short"
        } else {
            "its end is damaged"
        }
    }

    pub fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        let m = &self.metadata;
        writeln!(out, "command:     {}", m.command_line())?;
        writeln!(out, "pid:         {}", m.pid)?;
        writeln!(out, "host:        {}", m.hostname)?;
        writeln!(out, "kernel:      {}", m.kernel)?;
        writeln!(out, "recorded by: utrace {}", m.utrace_version)?;
        writeln!(out, "started:     {}", utc_text(m.start_realtime_ns))?;
        match &self.statistics {
            Some(s) => writeln!(out, "duration:    {}", HumanDuration(s.duration_ns))?,
            None => writeln!(out, "duration:    unknown ({})", self.unknown_because())?,
        }
        let modules = &self.functions.modules;
        writeln!(
            out,
            "functions:   {} planned in {} {}",
            self.functions.functions.len(),
            modules.len(),
            if modules.len() == 1 {
                "module"
            } else {
                "modules"
            }
        )?;
        let origins: HashMap<u32, &str> = (self.functions.symbol_origins.iter())
            .map(|(module, origin)| (*module, origin.as_str()))
            .collect();
        for (index, module) in modules.iter().enumerate() {
            let count = self.functions.functions_in_module(index);
            match origins.get(&(index as u32)) {
                Some(origin) => writeln!(out, "  {module} ({count}), symbols: {origin}")?,
                None => writeln!(out, "  {module} ({count})")?,
            }
        }
        writeln!(out, "traced:      {}", traced_kinds(&self.functions))?;
        match &m.probe_costs {
            Some(costs) => {
                writeln!(
                    out,
                    "probe costs: measured at start, taken out of reported times"
                )?;
                for line in costs.lines() {
                    writeln!(out, "  {line}")?;
                }
                if let Some(noise) = costs.noise() {
                    writeln!(out, "  warning: {noise}")?;
                }
            }
            None => writeln!(out, "probe costs: not measured (reports show raw times)")?,
        }
        writeln!(out, "events:      {}", self.scan.events)?;
        match &self.statistics {
            Some(s) => {
                writeln!(out, "lost events: {}", s.lost_events)?;
                for (tid, lost) in &s.lost_by_thread {
                    writeln!(out, "  thread {tid}: {lost}")?;
                }
            }
            None => writeln!(out, "lost events: unknown ({})", self.unknown_because())?,
        }
        if !self.damaged_chunks.is_empty() {
            let lost = match self.events_lost_to_damage {
                Some(1) => "1 event lost".to_string(),
                Some(events) => format!("{events} events lost"),
                None => "an unknown number of events lost".to_string(),
            };
            let chunks = self.damaged_chunks.len();
            let noun = if chunks == 1 { "chunk" } else { "chunks" };
            writeln!(out, "damaged:     {chunks} {noun} skipped, {lost}")?;
        }
        let tids = &self.scan.tids;
        writeln!(out, "threads:     {} ({})", tids.len(), first_ids(tids))?;
        // Only a trace that followed processes (--follow) has more than one.
        let pids = &self.scan.pids;
        if pids.len() > 1 {
            writeln!(out, "processes:   {} ({})", pids.len(), first_ids(pids))?;
        }
        if let Some(offset) = self.second_recording {
            writeln!(
                out,
                "joined:      a second recording starts at byte {offset} (not read)"
            )?;
        }
        if self.cut_short {
            writeln!(
                out,
                "complete:    no: cut short (the recorder did not finish); events up to its last complete block"
            )
        } else if self.statistics.is_none() {
            writeln!(out, "complete:    unknown: its end is damaged")
        } else {
            writeln!(out, "complete:    yes")
        }
    }
}

/// A CLOCK_REALTIME time as `2024-05-01 12:34:56.789 UTC`.
pub fn utc_text(realtime_ns: u64) -> String {
    let secs = realtime_ns / 1_000_000_000;
    let millis = realtime_ns % 1_000_000_000 / 1_000_000;
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let of_day = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{millis:03} UTC",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar: Howard
/// Hinnant's algorithm, counted in 400-year eras of 146097 days.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    // Months counted from March, so the leap day is the last day of the year.
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// How many thread or process ids `info` lists: a Go program's goroutines or a server's
/// threads run to hundreds, which would make one unreadable line.
const IDS_LISTED: usize = 16;

/// The first [`IDS_LISTED`] of `ids`, and how many more there are.
fn first_ids<'a>(ids: impl IntoIterator<Item = &'a u32, IntoIter: ExactSizeIterator>) -> String {
    let ids = ids.into_iter();
    let more = ids.len().saturating_sub(IDS_LISTED);
    let listed: Vec<String> = ids.take(IDS_LISTED).map(u32::to_string).collect();
    match more {
        0 => listed.join(", "),
        _ => format!("{}, and {more} more", listed.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::DataWriter;
    use crate::event::Event;
    use crate::table::{FunctionKind, TracedFunction};

    #[test]
    fn info_utc_times() {
        assert_eq!(utc_text(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(
            utc_text(1_700_000_000_123_456_789),
            "2023-11-14 22:13:20.123 UTC"
        );
        // A leap day, and the last second of a leap year.
        assert_eq!(
            utc_text(951_782_400_000_000_000),
            "2000-02-29 00:00:00.000 UTC"
        );
        assert_eq!(
            utc_text(1_735_689_599_999_000_000),
            "2024-12-31 23:59:59.999 UTC"
        );
    }

    fn write_file(path: &Path, finish: bool) {
        let metadata = Metadata {
            command: vec!["./calls".into(), "3".into()],
            pid: 4242,
            start_monotonic_ns: 1_000,
            start_realtime_ns: 1_700_000_000_000_000_000,
            hostname: "bench".into(),
            kernel: "6.8.0".into(),
            utrace_version: "0.1.0".into(),
            probe_costs: None,
        };
        let function = |name: &str, module| TracedFunction {
            name: name.into(),
            module,
            offset: 0x1000,
            size: 8,
            kind: FunctionKind::Function,
            probes: Default::default(),
            values: Vec::new(),
            user_stack: false,
            argument_names: Vec::new(),
            source: None,
            detached: None,
        };
        let table = FunctionTable {
            modules: vec!["/bin/calls".into(), "/lib/libc.so.6".into()],
            functions: vec![function("main", 0), function("fib", 0), function("puts", 1)],
            ..Default::default()
        };
        let mut writer = DataWriter::create(path, &metadata, &table).unwrap();
        writer
            .write_events(&[
                Event::entry(1_000, 7, 0),
                Event::entry(1_100, 9, 1),
                Event::exit(1_200, 9, 1),
                Event::exit(2_000, 7, 0),
            ])
            .unwrap();
        if finish {
            writer
                .finish(&Statistics {
                    events: 4,
                    lost_events: 2,
                    duration_ns: 1_500_000,
                    lost_by_thread: vec![(7, 2)],
                })
                .unwrap();
        }
    }

    #[test]
    fn ids_past_the_first_sixteen_are_counted() {
        let few: Vec<u32> = vec![7, 9];
        assert_eq!(first_ids(&few), "7, 9");
        let many: Vec<u32> = (1..=20).collect();
        assert_eq!(
            first_ids(&many),
            "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, and 4 more"
        );
    }

    #[test]
    fn info_of_a_finished_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("utrace.data");
        write_file(&path, true);
        let info = DataFileInfo::read(&path, OnDamage::Skip).unwrap();
        let mut out = Vec::new();
        info.write_text(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "command:     ./calls 3
pid:         4242
host:        bench
kernel:      6.8.0
recorded by: utrace 0.1.0
started:     2023-11-14 22:13:20.000 UTC
duration:    1.500 ms
functions:   3 planned in 2 modules
  /bin/calls (2)
  /lib/libc.so.6 (1)
traced:      3 functions
probe costs: not measured (reports show raw times)
events:      4
lost events: 2
  thread 7: 2
threads:     2 (7, 9)
complete:    yes
"
        );
    }

    #[test]
    fn info_of_a_file_cut_short() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("utrace.data");
        write_file(&path, false);
        let info = DataFileInfo::read(&path, OnDamage::Skip).unwrap();
        assert!(info.cut_short);
        assert_eq!(info.scan.events, 4);
        let mut out = Vec::new();
        info.write_text(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("duration:    unknown (cut short)"), "{text}");
        assert!(text.contains("complete:    no: cut short"), "{text}");
    }
}
