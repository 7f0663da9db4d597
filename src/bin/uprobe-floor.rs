//! `uprobe-floor`: the floor of utrace's benchmark (tools/bench.sh). One BPF program that only
//! counts its hits in a per-CPU counter, attached with one `uprobe_multi` link at a function's
//! entry (and, with `--retprobe`, a second link for its return), while a command runs. The
//! command times its own calls; with and without the probe, the difference is what the bare
//! probe costs per call, the yardstick for what utrace costs.
//!
//! ```sh
//! uprobe-floor --binary ./sites --function push_first [--retprobe] -- ./sites push 1000000
//! ```
//!
//! With `--classify` it probes nothing: it prints how utrace classifies the function's first
//! instruction (`emulated`, `single-stepped`, or `refused` when the kernel cannot probe it) and
//! that instruction's bytes in hex, for tools/emulation_table.sh to set beside the kernel's
//! measured behaviour.
//!
//! The links have no pid filter: every process running the binary hits the probe (in the
//! benchmark, only the command). Prints the hits on standard error; exits as the command did.

use std::mem::MaybeUninit;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};
use clap::Parser;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, ProgramMut, UprobeMultiOpts};
use utrace::elf::site;
use utrace::table::Execution;

mod skel {
    include!(concat!(env!("OUT_DIR"), "/floor.skel.rs"));
}
use skel::FloorSkelBuilder;

/// Counts a function's calls with the cheapest uprobe_multi probe there is, while CMD runs.
#[derive(Parser)]
#[command(name = "uprobe-floor")]
struct Args {
    /// The ELF file that holds the function.
    #[arg(long)]
    binary: PathBuf,
    /// The probe's file offset in BINARY (decimal, or hex with 0x).
    #[arg(long, value_parser = parse_offset, required_unless_present = "function", conflicts_with = "function")]
    offset: Option<u64>,
    /// Probe this function's first instruction, found as utrace finds it (`name@plt` for a PLT
    /// stub); unlike utrace, never moved to a later instruction.
    #[arg(long)]
    function: Option<String>,
    /// Also attach a return probe (a second link), as utrace does for every function.
    #[arg(long)]
    retprobe: bool,
    /// Probe nothing: print how utrace classifies the first instruction (`emulated`,
    /// `single-stepped` or `refused`) and its bytes in hex.
    #[arg(long, conflicts_with_all = ["retprobe", "command"])]
    classify: bool,
    /// The command to run with the probe attached.
    #[arg(last = true, required_unless_present = "classify")]
    command: Vec<String>,
}

fn parse_offset(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|error| format!("`{text}` is not an offset: {error}"))
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("uprobe-floor: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<u8> {
    let offset = match (&args.function, args.offset) {
        (Some(name), _) => entry_offset(&args.binary, name)?,
        (None, Some(offset)) => offset,
        (None, None) => unreachable!("clap requires --offset or --function"),
    };
    if args.classify {
        println!("{}", classify(&args.binary, offset)?);
        return Ok(0);
    }

    let mut storage = MaybeUninit::uninit();
    let skel = FloorSkelBuilder::default()
        .open(&mut storage)
        .and_then(|open| open.load())
        .context("loading the floor BPF program (needs root, or CAP_BPF and CAP_PERFMON)")?;
    let attach = |program: &ProgramMut, retprobe: bool| -> Result<Link> {
        let opts = UprobeMultiOpts {
            offsets: vec![offset as usize],
            retprobe,
            ..Default::default()
        };
        program
            .attach_uprobe_multi_with_opts(-1, &args.binary, "", opts)
            .with_context(|| {
                format!(
                    "attaching a uprobe_multi link at offset {offset:#x} of {}",
                    args.binary.display()
                )
            })
    };
    let entry_link = attach(&skel.progs.floor_entry, false)?;
    let return_link = match args.retprobe {
        true => Some(attach(&skel.progs.floor_return, true)?),
        false => None,
    };

    let status = Command::new(&args.command[0])
        .args(&args.command[1..])
        .status()
        .with_context(|| format!("running `{}`", args.command[0]))?;

    // The return probe first, as utrace does: a pending return would hold up the entry link's
    // release.
    drop(return_link);
    drop(entry_link);
    let entry_hits = hits(&skel.maps.hits, 0)?;
    let return_hits = hits(&skel.maps.hits, 1)?;
    eprintln!(
        "uprobe-floor: offset {offset:#x} of {}: {entry_hits} entry hits, {return_hits} return hits",
        args.binary.display()
    );
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128 + signal as u8,
        (None, None) => 1,
    })
}

/// The file offset of `name`'s first instruction, from the symbols utrace reads.
fn entry_offset(binary: &Path, name: &str) -> Result<u64> {
    let functions = utrace::elf::read_function_symbols(binary)
        .with_context(|| format!("reading the symbols of {}", binary.display()))?;
    match functions.iter().find(|f| f.name == name) {
        Some(function) => Ok(function.offset - function.site.offset_in_function),
        None => bail!("{} has no function `{name}` to probe", binary.display()),
    }
}

/// How utrace classifies the instruction at file offset `offset` of `binary`, and its bytes:
/// `emulated 55`, `single-stepped 48 89 f8`, `refused f0 48 83 07 01`.
fn classify(binary: &Path, offset: u64) -> Result<String> {
    let file = std::fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
    let code = usize::try_from(offset)
        .ok()
        .and_then(|offset| file.get(offset..))
        .with_context(|| format!("offset {offset:#x} is past the end of {}", binary.display()))?;
    let code = &code[..code.len().min(16)];
    if code.is_empty() {
        bail!("offset {offset:#x} is at the end of {}", binary.display());
    }
    let length = iced_x86::Decoder::new(64, code, iced_x86::DecoderOptions::NONE)
        .decode()
        .len();
    let class = if !site::kernel_can_probe(code) {
        "refused"
    } else {
        match site::execution_at(code) {
            Execution::Emulated => "emulated",
            Execution::SingleStepped => "single-stepped",
        }
    };
    let bytes: Vec<String> = code[..length.max(1)]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    Ok(format!("{class} {}", bytes.join(" ")))
}

/// Counter `key`, summed over the CPUs.
fn hits(map: &impl MapCore, key: u32) -> Result<u64> {
    let per_cpu = map
        .lookup_percpu(&key.to_ne_bytes(), MapFlags::ANY)
        .context("reading the hit counter")?
        .unwrap_or_default();
    Ok(per_cpu
        .iter()
        .map(|value| u64::from_ne_bytes(value[..8].try_into().expect("8-byte counter")))
        .sum())
}

#[cfg(test)]
mod tests {
    use super::classify;
    use std::io::Write;

    #[test]
    fn classify_reads_the_first_instruction_as_utrace_does() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        // At 0: push %rbp; at 1: mov %rdi,%rax; at 4: lock addq $1,(%rdi); at 9: end.
        (file.write_all(&[0x55, 0x48, 0x89, 0xf8, 0xf0, 0x48, 0x83, 0x07, 0x01])).unwrap();
        let path = file.path();
        assert_eq!(classify(path, 0).unwrap(), "emulated 55");
        assert_eq!(classify(path, 1).unwrap(), "single-stepped 48 89 f8");
        assert_eq!(classify(path, 4).unwrap(), "refused f0 48 83 07 01");
        assert!(classify(path, 9).is_err());
        assert!(classify(path, 10).is_err());
    }
}
