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
//! `ret`). Each traced function carries its [`ProbeClass`]; the recorder measures each class on
//! the machine at startup (`record/calibrate.rs`) and stores the figures in the data file.

use serde::{Deserialize, Serialize};

use crate::table::ProbeClass;

/// What the entry and exit probes of one call add, in ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeCost {
    /// The part inside the call's own measured duration: entry probe after its timestamp, exit
    /// probe before its timestamp.
    pub inside_ns: u64,
    /// Both probes whole: what the call adds to the duration of every traced call around it.
    pub full_ns: u64,
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

    /// One line per class, as `record -d` and `info` show them.
    pub fn lines(&self) -> Vec<String> {
        self.classes
            .iter()
            .map(|(class, cost)| {
                format!(
                    "{}: {} ns inside the call, {} ns in all",
                    class.name(),
                    cost.inside_ns,
                    cost.full_ns
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{Execution, ExitKind};

    #[test]
    fn unmeasured_classes_cost_nothing() {
        let stepped = ProbeClass::new(Execution::SingleStepped, ExitKind::Uretprobe);
        let cost = ProbeCost {
            inside_ns: 700,
            full_ns: 2_000,
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
}
