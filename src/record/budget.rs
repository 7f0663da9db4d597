//! `--budget`: keeps the traced program within a slowdown the user sets. Every call costs its
//! probes (the calibration measured each probe class), so the probes' cost per second is each
//! function's call rate times its calls' cost. Every [`STEP`], that cost is weighed against the
//! program's own CPU time in the same span: the calls counted are those whose events are stamped
//! within it, whenever the drain gets to them (a drain behind a busy program would otherwise
//! count a backlog as one step's calls, and read a slowdown many times the true one); past the
//! budget, the functions whose probes cost the most for what they tell are detached (hot leaves
//! first, then hot callers), just enough to come back within it. Functions `-f` names exactly
//! are never detached.
//!
//! Without `--budget`, a recording of a running process (`-p`) gets the same measure over its
//! first [`ADVICE_STEPS`] busy steps, added up, and one line suggesting `--budget` where its
//! probes slow it down more than [`ADVICE_ABOVE`].

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

use crate::event::Event;
use crate::filter::FilterSpec;
use crate::probe_cost::ProbeCosts;
use crate::table::{Detachment, FunctionId, FunctionTable};

/// How often the cost is weighed: long enough for rates that mean something, short enough that
/// a live service is slowed for a moment only.
const STEP: Duration = Duration::from_millis(250);
/// Without `--budget`, the slowdown past which a `-p` recording suggests it.
/// The measure cannot tell slowdowns past it apart: where the probes take nearly all of the
/// CPU time, the program's own time is the small rest, and the calibrated costs are known to
/// about 15% to 25% (a program slowed 70 times read as 4 to 60 times, and below 5 times in a
/// CI run). So the suggestion says "over" this, and the probes' share of the CPU time, which
/// that error moves by as much, no more; at 3x that share is two thirds, which a program whose
/// probes take nearly all of its time reaches whatever the error.
const ADVICE_ABOVE: f64 = 3.0;
/// Without `--budget`, how many busy steps are weighed, added up, before giving up on a
/// suggestion.
const ADVICE_STEPS: u32 = 8;
/// A program is weighed only where it ran at least a tenth of the time (on its CPU time: a
/// program that waits for I/O meanwhile does not wait for its probes).
const BUSY_SHARE: u64 = 10;
/// The budget a bare `--budget` sets: one that suits a live service.
pub const DEFAULT_BUDGET: &str = "2x";
/// Calls open per thread that are followed, to tell leaves from callers: deeper ones are left
/// alone (a recursion, or exits lost).
const DEPTH_FOLLOWED: usize = 256;
/// A step is weighed once an event stamped this long after its end is drained (events of
/// several CPUs reach the ring buffer a little out of order)...
const STRAGGLERS_NS: u64 = 2_000_000;
/// ... or once this long has passed after its end (a program that called nothing since).
const LAST_EVENTS_WAIT: Duration = Duration::from_millis(500);

/// How much slower than untraced the program may run: a factor above 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slowdown {
    factor: f64,
    /// As the user wrote it, for messages.
    percent: bool,
}

impl Slowdown {
    /// Parses `2x` (at most twice as slow) or `10%` (at most 10% slower).
    pub fn parse(text: &str) -> Result<Slowdown, String> {
        let text = text.trim();
        let number = |digits: &str| digits.trim().parse::<f64>().ok().filter(|n| n.is_finite());
        let parsed = match (text.strip_suffix('x'), text.strip_suffix('%')) {
            (Some(factor), _) => number(factor).map(|factor| (factor, false)),
            (_, Some(percent)) => number(percent).map(|p| (1.0 + p / 100.0, true)),
            _ => None,
        };
        match parsed {
            Some((factor, percent)) if factor > 1.0 => Ok(Slowdown { factor, percent }),
            Some(_) => Err(format!(
                "{text:?} leaves the probes no time: a budget is more than 1x (2x, 1.5x) or \
                 0% (10%)"
            )),
            None => Err(format!(
                "{text:?} is not a slowdown like 2x (at most twice as slow) or 10% (at most \
                 10% slower)"
            )),
        }
    }

    pub fn factor(self) -> f64 {
        self.factor
    }
}

impl fmt::Display for Slowdown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.percent {
            true => write!(f, "{}%", round_figure((self.factor - 1.0) * 100.0)),
            false => write!(f, "{}x", round_figure(self.factor)),
        }
    }
}

/// `figure` with at most 2 decimals, none where they are 0.
fn round_figure(figure: f64) -> String {
    let text = format!("{figure:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Watches the cost of the probes while the program runs, and says which functions to detach.
pub struct BudgetKeeper {
    /// `None`: only measure once, to suggest `--budget`.
    limit: Option<Slowdown>,
    pid: u32,
    started: Instant,
    /// By function id (those planned at start, the only ones detached): what the probes of one
    /// call cost, in ns; 0 for those never detached (named by `-f`, or not probed).
    call_cost_ns: Vec<u64>,
    /// Calls entered since the last step.
    calls: Vec<u64>,
    /// Whether a call of the function was seen calling another.
    calls_others: Vec<bool>,
    /// How deep its calls were since the last step, added up (1: outermost).
    depths: Vec<u64>,
    /// Per thread, the calls open, innermost last.
    open: HashMap<u32, Vec<FunctionId>>,
    detached: HashSet<FunctionId>,
    /// The step being counted, if one has started.
    step: Option<Step>,
    /// How many of the events pending for the drain were counted already.
    observed: usize,
    /// Without `--budget`, the busy steps still to weigh.
    advice_steps_left: u32,
    /// Without `--budget`, the CPU time and the probes' cost of the busy steps weighed, in ns.
    advice_weighed: (u64, u64),
}

impl BudgetKeeper {
    /// A keeper of `limit` for process `pid`, whose functions are those of `table`; `None`
    /// where the probe costs are unknown (nothing to weigh).
    pub fn new(
        limit: Option<Slowdown>,
        pid: u32,
        table: &FunctionTable,
        costs: Option<&ProbeCosts>,
        filter: &FilterSpec,
    ) -> Option<BudgetKeeper> {
        let costs = costs?.by_function(table);
        let named = filter.functions.iter().filter(|glob| glob.is_literal());
        let call_cost_ns = (table.functions.iter().zip(costs))
            .map(
                |(function, cost)| match named.clone().any(|g| g.matches(&function.name)) {
                    true => 0,
                    false => cost.full_ns,
                },
            )
            .collect::<Vec<_>>();
        let count = call_cost_ns.len();
        Some(BudgetKeeper {
            limit,
            pid,
            started: Instant::now(),
            call_cost_ns,
            calls: vec![0; count],
            calls_others: vec![false; count],
            depths: vec![0; count],
            open: HashMap::new(),
            detached: HashSet::new(),
            step: None,
            observed: 0,
            advice_steps_left: ADVICE_STEPS,
            advice_weighed: (0, 0),
        })
    }

    /// Counts the calls of the events pending for the drain that were not counted yet.
    pub fn observe_pending(&mut self, pending: &[Event]) {
        let new = pending.get(self.observed..).unwrap_or_default();
        self.observe(new);
        self.observed = pending.len();
    }

    /// The drain left `left` events pending (it takes them all or none).
    pub fn left_pending(&mut self, left: usize) {
        self.observed = self.observed.min(left);
    }

    /// Counts the calls of `events` stamped within the step, and which of them call others.
    fn observe(&mut self, events: &[Event]) {
        for event in events {
            let id = event.function_id();
            if id as usize >= self.calls.len() {
                continue;
            }
            let open = self.open.entry(event.tid()).or_default();
            if event.is_exit() {
                if let Some(at) = open.iter().rposition(|&f| f == id) {
                    open.truncate(at);
                }
                continue;
            }
            let counted = (self.step.as_mut()).is_some_and(|step| step.takes(event.timestamp_ns));
            if counted {
                self.calls[id as usize] += 1;
                self.depths[id as usize] += open.len() as u64 + 1;
            }
            if let Some(&caller) = open.last() {
                self.calls_others[caller as usize] = true;
            }
            if open.len() < DEPTH_FOLLOWED {
                open.push(id);
            }
        }
    }

    /// Whether the keeper has no more to do (its one suggestion made).
    pub fn is_done(&self) -> bool {
        self.limit.is_none() && self.calls.is_empty()
    }

    /// Once a [`STEP`]'s calls are all counted: the functions to detach now to come back within
    /// the budget (none while within it).
    pub fn due_detachments(&mut self) -> Vec<Detachment> {
        let pid = self.pid;
        self.due_at(super::monotonic_now_ns(), || process_cpu_ns(pid))
    }

    /// [`due_detachments`](Self::due_detachments) at `now_ns` (the events' clock), the
    /// program's CPU time read by `cpu_ns` where a step starts or ends.
    fn due_at(&mut self, now_ns: u64, cpu_ns: impl Fn() -> Option<u64>) -> Vec<Detachment> {
        // Called at every drain: /proc is read only where a step starts or ends.
        let Some(step) = &mut self.step else {
            self.step = cpu_ns().map(|cpu_ns| Step::starting(now_ns, cpu_ns));
            self.reset_counts();
            return Vec::new();
        };
        let Some((end_ns, end_cpu_ns)) = step.end else {
            if now_ns.saturating_sub(step.start_ns) >= STEP.as_nanos() as u64 {
                step.end = cpu_ns().map(|cpu_ns| (now_ns, cpu_ns));
            }
            return Vec::new();
        };
        let waited = Duration::from_nanos(now_ns.saturating_sub(end_ns));
        if !step.counted && waited < LAST_EVENTS_WAIT {
            return Vec::new();
        }
        let span = Duration::from_nanos(end_ns - step.start_ns);
        let cpu_ns = end_cpu_ns.saturating_sub(step.start_cpu_ns);
        // The next step starts at the next drain: after the probes are replaced, if they are.
        self.step = None;
        let costs = self.probe_costs();
        let probes_ns: u64 = costs.iter().map(|&(_, cost)| cost).sum();
        let (own_ns, slowdown) = weigh(cpu_ns, probes_ns);
        // A program that mostly waits loses little time to its probes: nothing is detached,
        // and nothing suggested, until it works.
        if cpu_ns < span.as_nanos() as u64 / BUSY_SHARE {
            return Vec::new();
        }
        log::debug!(
            "--budget: {:.1} ms of CPU in {:.0} ms, the probes' ~{:.1} ms of it: ~{:.2}x ({})",
            cpu_ns as f64 / 1e6,
            span.as_secs_f64() * 1e3,
            probes_ns as f64 / 1e6,
            slowdown,
            self.limit
                .map_or("no budget".to_owned(), |limit| format!("budget {limit}"))
        );
        let Some(limit) = self.limit else {
            self.weigh_for_advice(cpu_ns, probes_ns);
            return Vec::new();
        };
        let allowed_ns = (own_ns as f64 * (limit.factor() - 1.0)) as u64;
        let chosen = match probes_ns > allowed_ns {
            true => self.choose(costs, probes_ns - allowed_ns),
            false => Vec::new(),
        };
        let after_ns = self.started.elapsed().as_nanos() as u64;
        let detachments = (chosen.into_iter())
            .map(|function| Detachment {
                function,
                after_ns,
                calls_per_s: (self.calls[function as usize] as f64 / span.as_secs_f64()) as u64,
            })
            .collect::<Vec<_>>();
        self.detached.extend(detachments.iter().map(|d| d.function));
        detachments
    }

    /// Without `--budget`: adds a busy step's CPU time and its probes' cost to those of the
    /// steps before, and suggests `--budget` once they add up to more than [`ADVICE_ABOVE`].
    /// Added up, the steps' figures agree: a drain that lags behind a busy machine counts a
    /// step's calls in the next one.
    fn weigh_for_advice(&mut self, cpu_ns: u64, probes_ns: u64) {
        self.advice_weighed.0 += cpu_ns;
        self.advice_weighed.1 += probes_ns;
        self.advice_steps_left -= 1;
        let (cpu_ns, probes_ns) = self.advice_weighed;
        let (_, slowdown) = weigh(cpu_ns, probes_ns);
        if slowdown > ADVICE_ABOVE {
            log::info!(
                "tracing this process costs it over {ADVICE_ABOVE}x (its probes take ~{}% of \
                 its CPU time); --budget {DEFAULT_BUDGET} keeps it near its speed",
                (probes_ns as f64 * 100.0 / cpu_ns.max(1) as f64)
                    .min(100.0)
                    .round()
            );
            self.advice_steps_left = 0;
        }
        if self.advice_steps_left == 0 {
            self.calls.clear();
        }
    }

    /// Starts the counts of the next step.
    fn reset_counts(&mut self) {
        self.calls.fill(0);
        self.depths.fill(0);
    }

    /// What each function's probes cost since the last step, in ns, for those that may be
    /// detached.
    fn probe_costs(&self) -> Vec<(FunctionId, u64)> {
        (0u32..)
            .zip(self.calls.iter().zip(&self.call_cost_ns))
            .filter(|&(id, (&calls, &cost))| calls > 0 && cost > 0 && !self.detached.contains(&id))
            .map(|(id, (&calls, &cost))| (id, calls * cost))
            .collect()
    }

    /// The functions whose probes cost `excess_ns` together, chosen by what they tell for
    /// their cost: leaves first, the costliest first (their calls tell the least: no path goes
    /// through them), then callers, the deepest first (the shorter calls, as a rule: an outer
    /// call's time and count say the most, and where exits go unseen its time is not known).
    /// While the leaves alone save half of it, callers wait for the next step, whose measure no
    /// longer has the leaves' probes in it: while probes take most of the time, the program's
    /// own time is known too roughly to detach more than those first.
    fn choose(&self, mut costs: Vec<(FunctionId, u64)>, excess_ns: u64) -> Vec<FunctionId> {
        // Tenths of a level: calls of one depth on average tie.
        let depth = |id: FunctionId| {
            let id = id as usize;
            self.depths[id] * 10 / self.calls[id].max(1)
        };
        costs.sort_by_key(|&(id, cost)| match self.calls_others[id as usize] {
            false => (false, std::cmp::Reverse(0), std::cmp::Reverse(cost)),
            true => (true, std::cmp::Reverse(depth(id)), std::cmp::Reverse(cost)),
        });
        let mut chosen = Vec::new();
        let mut saved_ns = 0;
        for (id, cost) in costs {
            let is_caller = self.calls_others[id as usize];
            if saved_ns >= excess_ns || (is_caller && saved_ns >= excess_ns / 2) {
                break;
            }
            chosen.push(id);
            saved_ns += cost;
        }
        chosen
    }
}

/// A span of the events' clock whose calls are counted, and the program's CPU time at its
/// start and end.
struct Step {
    start_ns: u64,
    start_cpu_ns: u64,
    /// Once the step's time is up: when it ended, and the CPU time then.
    end: Option<(u64, u64)>,
    /// Whether an event stamped well after its end was drained: its calls are all in.
    counted: bool,
}

impl Step {
    fn starting(start_ns: u64, start_cpu_ns: u64) -> Step {
        Step {
            start_ns,
            start_cpu_ns,
            end: None,
            counted: false,
        }
    }

    /// Whether a call entered at `timestamp_ns` is the step's; notes a late one.
    fn takes(&mut self, timestamp_ns: u64) -> bool {
        match self.end {
            Some((end_ns, _)) if timestamp_ns >= end_ns => {
                self.counted |= timestamp_ns >= end_ns + STRAGGLERS_NS;
                false
            }
            _ => timestamp_ns >= self.start_ns,
        }
    }
}

/// The program's own share of `cpu_ns` of CPU time, whose probes cost `probes_ns`, and how much
/// slower they make it. Calibrated costs are medians: where they exceed the CPU time, most of it
/// is still the probes'.
fn weigh(cpu_ns: u64, probes_ns: u64) -> (u64, f64) {
    let own_ns = cpu_ns.saturating_sub(probes_ns).max(cpu_ns / 50).max(1);
    (own_ns, (own_ns + probes_ns) as f64 / own_ns as f64)
}

/// The CPU time of every thread of process `pid` so far, in ns (`/proc/PID/task/*/schedstat`);
/// `None` once it is gone.
fn process_cpu_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let total = (tasks.flatten())
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|line| line.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slowdowns_are_factors_or_percentages_above_nothing() {
        assert_eq!(Slowdown::parse("2x").map(Slowdown::factor), Ok(2.0));
        assert_eq!(Slowdown::parse("1.5x").map(Slowdown::factor), Ok(1.5));
        assert_eq!(Slowdown::parse("10%").map(Slowdown::factor), Ok(1.1));
        assert_eq!(Slowdown::parse("10%").unwrap().to_string(), "10%");
        assert_eq!(Slowdown::parse("2x").unwrap().to_string(), "2x");
        for bad in ["0", "abc", "1x", "0.5x", "0%", "-5%", "2", "x", "NaNx"] {
            assert!(Slowdown::parse(bad).is_err(), "{bad}");
        }
    }

    fn event(tid: u32, function: u32, exit: bool) -> Event {
        Event {
            timestamp_ns: 0,
            tid,
            function: function | if exit { Event::EXIT } else { 0 },
            stack: 0,
            pid: 0,
        }
    }

    /// A keeper of a 2x budget for functions whose calls cost `call_cost_ns`.
    fn keeper_of(call_cost_ns: Vec<u64>) -> BudgetKeeper {
        let count = call_cost_ns.len();
        BudgetKeeper {
            limit: Some(Slowdown::parse("2x").unwrap()),
            pid: 0,
            started: Instant::now(),
            call_cost_ns,
            calls: vec![0; count],
            calls_others: vec![false; count],
            depths: vec![0; count],
            open: HashMap::new(),
            detached: HashSet::new(),
            step: None,
            observed: 0,
            advice_steps_left: ADVICE_STEPS,
            advice_weighed: (0, 0),
        }
    }

    /// A call of `function` on thread 7 entered and left at `timestamp_ns`.
    fn call_at(function: u32, timestamp_ns: u64) -> [Event; 2] {
        [false, true].map(|exit| Event {
            timestamp_ns,
            ..event(7, function, exit)
        })
    }

    #[test]
    fn a_step_weighs_the_calls_stamped_within_it_whenever_they_are_drained() {
        const MS: u64 = 1_000_000;
        let mut keeper = keeper_of(vec![40 * MS, 40 * MS]);
        let no_read =
            || -> Option<u64> { panic!("the CPU time is read at a step's start and end only") };
        // The step starts at 1 s, the program's CPU time 0 then.
        assert!(keeper.due_at(1000 * MS, || Some(0)).is_empty());
        let drained = [
            call_at(0, 999 * MS),
            call_at(0, 1100 * MS),
            call_at(1, 1200 * MS),
        ];
        keeper.observe(drained.as_flattened());
        assert!(keeper.due_at(1100 * MS, no_read).is_empty());
        // Its time is up at 1.25 s, 100 ms of CPU later.
        assert!(keeper.due_at(1250 * MS, || Some(100 * MS)).is_empty());
        // Its calls drained late count; one after its end does not, and leaves it waiting for
        // the stragglers.
        keeper.observe([call_at(1, 1240 * MS), call_at(1, 1251 * MS)].as_flattened());
        assert!(keeper.due_at(1260 * MS, no_read).is_empty());
        assert_eq!(keeper.calls, vec![1, 2]);
        // Weighed once a call well after its end is drained: 120 ms of probes in 100 ms of CPU,
        // the costliest leaf first, then the other to come back within 2x.
        keeper.observe(&call_at(0, 1300 * MS));
        let detached = keeper.due_at(1310 * MS, no_read);
        let rates: Vec<_> = (detached.iter())
            .map(|d| (d.function, d.calls_per_s))
            .collect();
        assert_eq!(rates, vec![(1, 8), (0, 4)]);
        // The next step starts at the next drain, counting from there.
        keeper.observe(&call_at(0, 1320 * MS));
        assert!(keeper.due_at(1400 * MS, || Some(120 * MS)).is_empty());
        assert_eq!(keeper.calls, vec![0, 0]);
    }

    #[test]
    fn the_costliest_leaves_go_first_and_no_more_than_needed() {
        let mut keeper = keeper_of(vec![1000, 1000, 1000, 0]);
        keeper.step = Some(Step::starting(0, 0));
        // 0 calls 1 twice and 2 once, on thread 7; 3 (named by -f) is a leaf too.
        let events = [(0, false), (1, false), (1, true), (1, false), (1, true)]
            .into_iter()
            .chain([(2, false), (2, true), (3, false), (3, true), (0, true)])
            .map(|(f, exit)| event(7, f, exit))
            .collect::<Vec<_>>();
        keeper.observe(&events);
        assert_eq!(keeper.calls, vec![1, 2, 1, 1]);
        assert_eq!(keeper.calls_others, vec![true, false, false, false]);
        let costs = keeper.probe_costs();
        assert_eq!(costs, vec![(0, 1000), (1, 2000), (2, 1000)]);
        assert_eq!(keeper.choose(costs.clone(), 1500), vec![1]);
        assert_eq!(keeper.choose(costs.clone(), 2500), vec![1, 2]);
        // The caller waits for a step without the leaves' probes while they save half...
        assert_eq!(keeper.choose(costs.clone(), 6000), vec![1, 2]);
        // ... and goes in the same step where they save less.
        assert_eq!(keeper.choose(costs, 7000), vec![1, 2, 0]);
    }
}
