//! What utrace's own probes add to the durations they measure, and taking it back out.
//!
//! Both timestamps of a call are taken inside BPF. The duration from entry to exit therefore
//! holds, for the call itself, the part of its entry probe after the timestamp (the ring buffer
//! submit, running the probed instruction, the return to user space) and the part of its exit
//! probe before it (the trap); for every traced call below it, the whole of both probes. The
//! first is the call's *inside* cost, the second its *full* cost (see [`ProbeCost`]).
//!
//! What a probe costs depends on how the kernel runs the probed instruction: it emulates a few
//! (`push`, `nop`, relative jumps and calls) and single-steps the rest out of line, which is an
//! order of magnitude dearer in a VM; and on how the exit is seen (a uretprobe, or a probe on the
//! `ret`). A kernel function's (`-k`) kprobes cost what its attach mode costs: kprobe_multi
//! links, or a kprobe and a kretprobe. Each traced function carries its [`ProbeClass`]; the
//! recorder measures each class on the machine at startup (`record/calibrate.rs`; the kernel
//! functions' only under `-k`) and stores the figures in the data file.
//!
//! The inside cost taken out of a call is a median: a real call's probes cost more or less than
//! that, so a corrected time is only known to within how much they vary, the cost's *spread*
//! (see [`ProbeCost::resolution_ns`]). Reports show a per-call figure below it as a bound.

use serde::{Deserialize, Serialize};

use crate::table::{FunctionTable, ProbeClass};

/// What the entry and exit probes of one call add, in ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeCost {
    /// The part inside the call's own measured duration: entry probe after its timestamp, exit
    /// probe before its timestamp.
    pub inside_ns: u64,
    /// Both probes whole: what the call adds to the duration of every traced call around it.
    pub full_ns: u64,
    /// How much the inside cost of one call varies: the 90th less the 10th percentile of the
    /// calls measured (at least 1 ns). Stored after the metadata, not in it (see
    /// [`crate::data::format::encode_metadata`]), so files written before, which lack it, still
    /// read: `None` for them.
    #[serde(skip)]
    pub inside_spread_ns: Option<u64>,
}

impl ProbeCost {
    /// The least corrected duration that tells a call's own time from the error of the
    /// correction. The median taken out is off by up to the spread for most calls (the median
    /// itself also moves between recordings on a busy VM, which one calibration cannot see), so
    /// a call corrected to less (down to 0, the floor) may have lasted anything under it. Without a
    /// measured spread (files written before it was), the whole inside cost: a call corrected
    /// below it lasted less than its raw time, and that is all that is known.
    pub fn resolution_ns(&self) -> u64 {
        self.inside_spread_ns.unwrap_or(self.inside_ns)
    }
}

/// The figures measured at startup, per class.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeCosts {
    pub classes: Vec<(ProbeClass, ProbeCost)>,
}

impl ProbeCosts {
    /// The figure of `class`; zero for a class that was not measured.
    pub fn of(&self, class: ProbeClass) -> ProbeCost {
        self.classes
            .iter()
            .find(|(c, _)| *c == class)
            .map_or(ProbeCost::default(), |&(_, cost)| cost)
    }

    /// The figure of each function of `table`, by function id: user functions' uprobes and
    /// kernel functions' kprobes (`-k`) were measured; kernel events cost a tracepoint's program,
    /// and nothing was measured for them.
    pub fn by_function(&self, table: &FunctionTable) -> Vec<ProbeCost> {
        table
            .functions
            .iter()
            .map(
                |function| match function.kind.is_probed_code() || function.probes.is_kernel() {
                    true => self.of(function.probes),
                    false => ProbeCost::default(),
                },
            )
            .collect()
    }

    /// The spreads of the classes, in their order, as the data file stores them: empty when
    /// none was measured.
    pub fn spreads(&self) -> Vec<u64> {
        self.classes
            .iter()
            .map_while(|(_, cost)| cost.inside_spread_ns)
            .collect()
    }

    /// Gives the classes, in order, the spreads [`spreads`](Self::spreads) listed; a class left
    /// without one keeps `None`.
    pub fn set_spreads(&mut self, spreads: &[u64]) {
        for ((_, cost), &spread) in self.classes.iter_mut().zip(spreads) {
            cost.inside_spread_ns = Some(spread);
        }
    }

    /// What makes the figures untrustworthy, in words, when they are: a class whose inside cost
    /// varied by half of itself or more from call to call (a per-call time is then known only to
    /// within that), or whose inside cost came out above its whole cost (which cannot be: the
    /// machine was busy while it was measured). `None` when every class is sound.
    pub fn noise(&self) -> Option<String> {
        let noisy = self.classes.iter().find(|(_, cost)| {
            let spread = cost.inside_spread_ns.unwrap_or(0);
            spread.saturating_mul(2) >= cost.inside_ns || cost.inside_ns > cost.full_ns
        })?;
        let (class, cost) = noisy;
        Some(format!(
            "the probe costs were measured on a busy machine ({}: {} ns inside the call, spread \
             {} ns, {} ns in all): corrected times are known only to within the spread a call, \
             shown as bounds below it; record again when the machine is quieter, or read \
             --raw-times",
            class.name(),
            cost.inside_ns,
            cost.inside_spread_ns.unwrap_or(0),
            cost.full_ns
        ))
    }

    /// One line per class, as `record -d` and `info` show them.
    pub fn lines(&self) -> Vec<String> {
        self.classes
            .iter()
            .map(|(class, cost)| {
                let spread = match cost.inside_spread_ns {
                    Some(spread) => format!(", spread {spread} ns"),
                    None => String::new(),
                };
                format!(
                    "{}: {} ns inside the call{spread}, {} ns in all",
                    class.name(),
                    cost.inside_ns,
                    cost.full_ns
                )
            })
            .collect()
    }
}

/// Per function id, the least corrected per-call duration that reports show as a figure rather
/// than as a bound ([`ProbeCost::resolution_ns`]); 0 for every function under raw times.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolutions(Vec<u64>);

impl Resolutions {
    pub fn new(table: &FunctionTable, costs: Option<&ProbeCosts>) -> Resolutions {
        let costs = costs
            .map(|costs| costs.by_function(table))
            .unwrap_or_default();
        Resolutions(costs.iter().map(ProbeCost::resolution_ns).collect())
    }

    /// The resolution of function `id`, 0 for one beyond the table.
    pub fn of(&self, id: crate::table::FunctionId) -> u64 {
        self.0.get(id as usize).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{Execution, ExitKind, FunctionKind};

    #[test]
    fn unmeasured_classes_cost_nothing() {
        let stepped = ProbeClass::new(Execution::SingleStepped, ExitKind::Uretprobe);
        let cost = ProbeCost {
            inside_ns: 700,
            full_ns: 2_000,
            inside_spread_ns: None,
        };
        let costs = ProbeCosts {
            classes: vec![(stepped, cost)],
        };
        assert_eq!(costs.of(stepped), cost);
        assert_eq!(costs.of(ProbeClass::default()), ProbeCost::default());
        assert_eq!(
            costs.lines(),
            ["single-stepped entry, uretprobe: 700 ns inside the call, 2000 ns in all"]
        );
    }

    #[test]
    fn kernel_functions_cost_their_class_and_kernel_events_nothing() {
        let mut table = FunctionTable::of_names(&["main", "vfs_read", "sys_read"]);
        for function in &mut table.functions[1..] {
            function.kind = FunctionKind::Kernel;
        }
        table.functions[1].probes = ProbeClass::KPROBE_MULTI;
        let cost = |inside_ns| ProbeCost {
            inside_ns,
            full_ns: 2 * inside_ns,
            inside_spread_ns: Some(100),
        };
        let costs = ProbeCosts {
            classes: vec![
                (ProbeClass::default(), cost(1_000)),
                (ProbeClass::KPROBE_MULTI, cost(3_000)),
            ],
        };
        assert_eq!(
            costs.by_function(&table),
            [cost(1_000), cost(3_000), ProbeCost::default()]
        );
    }

    #[test]
    fn a_spread_of_half_the_cost_or_an_inside_above_the_whole_is_noise() {
        let class = ProbeClass::default();
        let costs = |inside_ns, full_ns, spread| ProbeCosts {
            classes: vec![(
                class,
                ProbeCost {
                    inside_ns,
                    full_ns,
                    inside_spread_ns: Some(spread),
                },
            )],
        };
        assert_eq!(costs(1_000, 2_200, 150).noise(), None);
        let noisy = costs(21_673, 19_110, 15_763).noise().unwrap();
        assert!(
            noisy.contains("emulated entry, uretprobe: 21673 ns inside the call, spread 15763 ns, 19110 ns in all"),
            "{noisy}"
        );
        assert!(costs(1_000, 2_200, 500).noise().is_some());
        assert!(costs(3_000, 2_200, 100).noise().is_some());
    }
}
