//! Measures what utrace's probes cost on this machine, per [`ProbeClass`], before recording.
//!
//! utrace probes small functions of its own, written in assembly so their instructions are
//! exactly those of each class (a `push` the kernel emulates, a `mov` it single-steps, a `ret`
//! under an exit probe), with its own BPF programs and its own process as the target. It calls
//! each function in a loop untraced, then traced, timing the loops with CLOCK_MONOTONIC:
//!
//! - *full* cost = traced time per call − untraced time per call: both probes whole;
//! - *inside* cost = exit timestamp − entry timestamp of the traced calls (the function's body is
//!   a few instructions): the part of the probes between the two timestamps; its *spread*, the
//!   90th less the 10th percentile of those calls, is how finely a corrected time is known.
//!
//! Medians over several rounds keep a burst of load from another process out of the figures.
//!
//! Under `-k`, the kernel functions' class is measured the same way on a system call with a tiny
//! kernel path, `getppid`, whose kernel function gets the probes the recording attaches to kernel
//! functions (kprobe_multi links, or a kprobe and a kretprobe). They are detached once measured:
//! left attached, they would add to every `getppid` of the recording.

use std::cell::RefCell;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use libbpf_rs::RingBufferBuilder;

use super::proc_maps::file_offset_of;
use crate::elf::returns::NoExitSites;
use crate::elf::ExitProbe;
use crate::event::Event;
use crate::plan::{first_traceable, KernelFunctionError, Landings, KERNEL_MODULE};
use crate::plan::{KernelFunctionRequests, PlannedEvents, PlannedKernelFunction};
use crate::probe::{check_kernel_functions, ProbeConfig, ProbeError};
use crate::probe::{AttachedProbes, EventPrograms, KernelAttach, LoadedProbes, ObjectStorage};
use crate::probe_cost::{ProbeCost, ProbeCosts};
use crate::table::{ExitKind, ProbeClass};
use crate::table::{FunctionKind, FunctionTable, TracedFunction};

/// Calls per timed loop.
const CALLS: usize = 20;
/// Timed loops per class; the median is kept.
const ROUNDS: usize = 9;

// One function per class, each returning its argument: the entry probe sits on `push rbp`
// (emulated) or `mov rax, rdi` (single-stepped); the exit probe on the `ret` (single-stepped) or
// a uretprobe.
std::arch::global_asm!(
    ".pushsection .text.utrace_calibration, \"ax\", @progbits",
    ".p2align 4",
    ".globl utrace_calibration_emulated_uretprobe",
    "utrace_calibration_emulated_uretprobe:",
    "push rbp",
    "mov rax, rdi",
    "pop rbp",
    "ret",
    ".p2align 4",
    ".globl utrace_calibration_stepped_uretprobe",
    "utrace_calibration_stepped_uretprobe:",
    "mov rax, rdi",
    "ret",
    ".p2align 4",
    ".globl utrace_calibration_emulated_ret",
    "utrace_calibration_emulated_ret:",
    "push rbp",
    "mov rax, rdi",
    "pop rbp",
    "ret",
    ".p2align 4",
    ".globl utrace_calibration_stepped_ret",
    "utrace_calibration_stepped_ret:",
    "mov rax, rdi",
    "ret",
    ".popsection",
);

extern "C" {
    fn utrace_calibration_emulated_uretprobe(x: u64) -> u64;
    fn utrace_calibration_stepped_uretprobe(x: u64) -> u64;
    fn utrace_calibration_emulated_ret(x: u64) -> u64;
    fn utrace_calibration_stepped_ret(x: u64) -> u64;
}

/// The probed function of each class, in [`ProbeClass::USER`] order.
const PROBED: [unsafe extern "C" fn(u64) -> u64; 4] = [
    utrace_calibration_emulated_uretprobe,
    utrace_calibration_stepped_uretprobe,
    utrace_calibration_emulated_ret,
    utrace_calibration_stepped_ret,
];

/// The kernel function behind `getppid`, as kernels list it (6.1 and 6.12 list the first, an
/// alias of the second).
const GETPPID_FUNCTIONS: [&str; 2] = ["__do_sys_getppid", "__x64_sys_getppid"];

/// Why the probe costs could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    #[error(transparent)]
    Probe(#[from] ProbeError),
    #[error(transparent)]
    KernelFunctions(#[from] KernelFunctionError),
    #[error("the kernel cannot trace getppid's function ({})", GETPPID_FUNCTIONS.join(" or "))]
    NoGetppidFunction,
    #[error("cannot find utrace's own code in /proc/self/maps")]
    NoMapping,
    #[error("cannot read the probe events: {0}")]
    RingBuffer(libbpf_rs::Error),
    #[error("{got} of {expected} probe events arrived")]
    MissingEvents { got: usize, expected: usize },
    #[error("the probes cost nothing measurable ({0})")]
    Implausible(&'static str),
}

/// The probe costs measured for a recording, and the probes that measured them.
pub struct Calibration {
    /// `None` when they could not be measured.
    pub costs: Option<ProbeCosts>,
    /// Kept attached until the recording's own probes are gone: detaching waits out the
    /// kernel's uretprobe grace period, which a traced program hitting its uretprobes holds (see
    /// [`AttachedProbes`]), and a thread waiting for it would hold up utrace's exit too. Nothing
    /// calls the probed functions any more.
    _probes: Option<AttachedProbes>,
}

impl Calibration {
    /// Says, once the recording is sure to go ahead, when the costs were measured on a machine
    /// too busy for them to be precise: a recording refused for a bad target needs no such word.
    pub fn say_noise(&self) {
        if let Some(noise) = self.costs.as_ref().and_then(ProbeCosts::noise) {
            log::warn!("{noise}");
        }
    }
}

/// Starts measuring the probe costs for a recording on a thread of its own; under `-k`
/// (`kernel_functions`), the kernel functions' too.
pub fn start(
    kernel_functions: &KernelFunctionRequests,
) -> std::thread::JoinHandle<Result<Calibration, ProbeError>> {
    // A kernel that cannot trace them is refused when the session is prepared, in one line.
    let kernel = check_kernel_functions(kernel_functions).ok().flatten();
    std::thread::spawn(move || probe_costs(kernel))
}

/// The result of [`probe_costs`] run on `thread`.
pub fn joined(
    thread: std::thread::JoinHandle<Result<Calibration, ProbeError>>,
) -> Result<Calibration, ProbeError> {
    thread
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The probe costs for a recording, or `None`, said in one line, when they cannot be measured:
/// the recording goes on with raw times. With `kernel`, how the recording attaches kernel
/// functions (`-k`), their class too. Missing permissions are an error, as the recording's own
/// probes would fail to load the same way. The figures go to the debug log.
fn probe_costs(kernel: Option<KernelAttach>) -> Result<Calibration, ProbeError> {
    match calibrate(kernel) {
        Ok((costs, took, probes)) => {
            if log::log_enabled!(log::Level::Debug) {
                log::debug!(
                    "probe costs measured in {:.1} ms:",
                    took.as_secs_f64() * 1e3
                );
                for line in costs.lines() {
                    log::debug!("  {line}");
                }
            }
            Ok(Calibration {
                costs: Some(costs),
                _probes: Some(probes),
            })
        }
        Err(CalibrationError::Probe(error @ ProbeError::NotPermitted { .. })) => Err(error),
        Err(error) => {
            log::warn!(
                "cannot measure the probe costs ({error}): reports will show \
                 raw times"
            );
            Ok(Calibration {
                costs: None,
                _probes: None,
            })
        }
    }
}

/// The probe costs of every user class, and of `kernel`'s, how long measuring them took, and
/// the user functions' probes, still attached.
fn calibrate(
    kernel: Option<KernelAttach>,
) -> Result<(ProbeCosts, Duration, AttachedProbes), CalibrationError> {
    let started = Instant::now();
    let pid = std::process::id();
    let (module, table, exits) = calibration_plan()?;

    let mut storage = ObjectStorage::uninit();
    let mut loaded = LoadedProbes::load(
        &mut storage,
        &ProbeConfig {
            tgid: pid,
            buffer_bytes: 256 << 10,
            events: EventPrograms {
                kernel_functions: kernel,
                ..EventPrograms::default()
            },
            ..ProbeConfig::default()
        },
    )?;
    // Untraced first: the probes go in after.
    let untraced: Vec<u64> = PROBED.iter().map(|&f| median(&time_rounds(f))).collect();

    let attached = loaded.attach(
        &table,
        &exits,
        &Default::default(),
        &Landings::default(),
        &[(0, module.as_path())],
        pid,
    )?;
    loaded.set_recording(true);
    let events = RefCell::new(Vec::with_capacity(2 * CALLS * ROUNDS));
    let mut ring = RingBufferBuilder::new();
    ring.add(loaded.events_map(), |bytes: &[u8]| {
        let mut event = Event::default();
        if plain::copy_from_bytes(&mut event, bytes).is_ok() {
            events.borrow_mut().push(event);
        }
        0
    })
    .map_err(CalibrationError::RingBuffer)?;
    let ring = ring.build().map_err(CalibrationError::RingBuffer)?;

    let traced_calls = || {
        ring.consume().map_err(CalibrationError::RingBuffer)?;
        inside_times(&events.take())
    };
    let mut classes = Vec::new();
    for ((class, &f), untraced) in ProbeClass::USER.iter().zip(&PROBED).zip(untraced) {
        let traced = median(&time_rounds(f));
        classes.push((*class, cost_of(*class, untraced, traced, traced_calls()?)?));
    }
    if let Some(attach) = kernel {
        // Said, not fatal: the user functions' figures stand without it.
        match kernel_class_cost(&loaded, attach, traced_calls) {
            Ok(cost) => classes.push((attach.probe_class(), cost)),
            Err(error) => log::warn!(
                "cannot measure what the kernel functions' probes cost ({error}): reports show \
                 their raw times"
            ),
        }
    }
    loaded.set_recording(false);
    Ok((ProbeCosts { classes }, started.elapsed(), attached))
}

/// What the probes of `class` cost, from the time per call untraced and traced and the inside
/// times of the traced calls.
fn cost_of(
    class: ProbeClass,
    untraced: u64,
    traced: u64,
    mut inside: Vec<u64>,
) -> Result<ProbeCost, CalibrationError> {
    add_forced_noise(&mut inside);
    let cost = ProbeCost {
        inside_ns: median(&inside),
        full_ns: traced.saturating_sub(untraced),
        // At least the clock's 1 ns: a corrected 0 is never shown as exact.
        inside_spread_ns: Some((percentile(&inside, 90) - percentile(&inside, 10)).max(1)),
    };
    match cost.full_ns == 0 || cost.inside_ns == 0 {
        true => Err(CalibrationError::Implausible(class.name())),
        false => Ok(cost),
    }
}

/// What the kernel functions' probes cost, attached as `attach` says to getppid's kernel
/// function: `getppid` timed untraced, then traced; `traced_calls` gives the inside times of the
/// calls traced. The probes are detached before it returns.
fn kernel_class_cost(
    loaded: &LoadedProbes,
    attach: KernelAttach,
    traced_calls: impl FnOnce() -> Result<Vec<u64>, CalibrationError>,
) -> Result<ProbeCost, CalibrationError> {
    let class = attach.probe_class();
    let (table, planned) = getppid_plan(class)?;
    let untraced = median(&time_rounds(getppid));
    let (links, refused) = loaded.attach_kernel_functions_unsaid(&planned, &table)?;
    if !refused.is_empty() {
        return Err(CalibrationError::NoGetppidFunction);
    }
    let traced = median(&time_rounds(getppid));
    drop(links);
    cost_of(class, untraced, traced, traced_calls()?)
}

/// A table of getppid's kernel function alone, of `class`, and its plan.
fn getppid_plan(class: ProbeClass) -> Result<(FunctionTable, PlannedEvents), CalibrationError> {
    let symbol = first_traceable(&GETPPID_FUNCTIONS)?.ok_or(CalibrationError::NoGetppidFunction)?;
    let table = FunctionTable {
        modules: vec![KERNEL_MODULE.to_owned()],
        functions: vec![TracedFunction {
            name: symbol.to_owned(),
            module: 0,
            offset: 0,
            size: 0,
            kind: FunctionKind::Kernel,
            probes: class,
            values: Vec::new(),
            user_stack: false,
            argument_names: Vec::new(),
            source: None,
            detached: None,
        }],
        ..Default::default()
    };
    let planned = PlannedEvents {
        kernel_functions: vec![PlannedKernelFunction {
            function: 0,
            symbol: symbol.to_owned(),
        }],
        ..PlannedEvents::default()
    };
    Ok((table, planned))
}

/// `getppid`, as a calibration function: its argument is ignored.
extern "C" fn getppid(_: u64) -> u64 {
    // SAFETY: getppid takes no argument and cannot fail. A system call of its own, so that no C
    // library can answer it from a cache.
    unsafe { libc::syscall(libc::SYS_getppid) as u64 }
}

/// The file the calibration functions live in, a table of them (one per class, in
/// [`ProbeClass::USER`] order) and where their exits are probed.
fn calibration_plan() -> Result<(PathBuf, FunctionTable, Vec<ExitProbe>), CalibrationError> {
    let mut module = None;
    let mut functions = Vec::new();
    let mut exits = Vec::new();
    for (class, &f) in ProbeClass::USER.iter().zip(&PROBED) {
        let address = f as usize as u64;
        let (file, offset) = file_offset_of(std::process::id(), address)
            .ok()
            .flatten()
            .ok_or(CalibrationError::NoMapping)?;
        let code = code_of(f);
        let ret = code.iter().position(|&b| b == 0xc3).unwrap_or(0) as u64;
        exits.push(match class.exit {
            ExitKind::Instruction => ExitProbe::Sites(vec![offset + ret]),
            // A uretprobe: the user classes have no other exit kind.
            _ => ExitProbe::Uretprobe(NoExitSites::Leaf),
        });
        functions.push(TracedFunction {
            name: class.name().to_owned(),
            module: 0,
            offset,
            size: ret + 1,
            kind: FunctionKind::Function,
            probes: *class,
            values: Vec::new(),
            user_stack: false,
            argument_names: Vec::new(),
            source: None,
            detached: None,
        });
        module = Some(file);
    }
    let module = module.ok_or(CalibrationError::NoMapping)?;
    let table = FunctionTable {
        modules: vec![module.path],
        functions,
        ..Default::default()
    };
    Ok((module.open_path, table, exits))
}

/// Makes the measured inside times as noisy as `UTRACE_CALIBRATION_NOISE_NS` says, for the
/// tests of what reports do with a calibration made on a busy machine: every other call took
/// that much longer, as if another process had held the CPU meanwhile.
fn add_forced_noise(inside: &mut [u64]) {
    let Some(noise_ns) = std::env::var("UTRACE_CALIBRATION_NOISE_NS")
        .ok()
        .and_then(|ns| ns.parse::<u64>().ok())
    else {
        return;
    };
    for time in inside.iter_mut().step_by(2) {
        *time += noise_ns;
    }
}

/// The first bytes of a calibration function: all of its code.
fn code_of(f: unsafe extern "C" fn(u64) -> u64) -> &'static [u8] {
    // SAFETY: each function is at most 6 bytes and aligned to 16 in an executable, readable
    // mapping of our own file: its 8 first bytes are mapped and never change.
    unsafe { std::slice::from_raw_parts(f as usize as *const u8, 8) }
}

/// The time per call, in ns, of each of [`ROUNDS`] loops of [`CALLS`] calls of `f`.
fn time_rounds(f: unsafe extern "C" fn(u64) -> u64) -> Vec<u64> {
    (0..ROUNDS)
        .map(|_| {
            let started = Instant::now();
            for i in 0..CALLS as u64 {
                // SAFETY: the calibration functions read only their argument register.
                black_box(unsafe { f(black_box(i)) });
            }
            started.elapsed().as_nanos() as u64 / CALLS as u64
        })
        .collect()
}

/// Exit minus entry timestamp of each call in `events`, which hold one function's calls in
/// order, one thread, nothing nested.
fn inside_times(events: &[Event]) -> Result<Vec<u64>, CalibrationError> {
    let expected = 2 * CALLS * ROUNDS;
    let pairs: Vec<u64> = events
        .chunks_exact(2)
        .filter(|pair| !pair[0].is_exit() && pair[1].is_exit())
        .map(|pair| pair[1].timestamp_ns.saturating_sub(pair[0].timestamp_ns))
        .collect();
    if 2 * pairs.len() != expected {
        return Err(CalibrationError::MissingEvents {
            got: 2 * pairs.len(),
            expected,
        });
    }
    Ok(pairs)
}

fn median(values: &[u64]) -> u64 {
    percentile(values, 50)
}

/// The value `percent`% of `values` are below (rounding down), 0 when there are none.
fn percentile(values: &[u64], percent: usize) -> u64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted
        .get(sorted.len() * percent / 100)
        .copied()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::site::execution_at;

    #[test]
    fn calibration_functions_are_of_their_class() {
        for (class, &f) in ProbeClass::USER.iter().zip(&PROBED) {
            assert_eq!(execution_at(code_of(f)), class.entry, "{}", class.name());
            // SAFETY: as in time_rounds.
            assert_eq!(unsafe { f(7) }, 7);
        }
    }

    #[test]
    fn median_of_rounds() {
        assert_eq!(median(&[5, 1, 9, 3, 7]), 5);
        assert_eq!(median(&[]), 0);
    }

    #[test]
    fn tenth_percentile_of_calls() {
        let calls: Vec<u64> = (1..=20).rev().collect();
        assert_eq!(percentile(&calls, 10), 3);
        assert_eq!(percentile(&calls, 50), median(&calls));
        assert_eq!(percentile(&[], 10), 0);
    }
}
