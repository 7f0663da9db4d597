//! Kernel functions (`-k`, src/bpf/kernel_functions.bpf.h): their entries and returns attached
//! the way [`super::strategy`] chose, each function's id (and whether it captures the stacks)
//! in its cookie, what it captures (`-A`, `-R`, `-a`) in `value_specs`; says under `-d` how, and
//! how long it took, and once what could not be traced.

use std::time::Instant;

use libbpf_rs::{KprobeMultiOpts, KprobeOpts, Link};

use super::error::ProbeError;
use super::events::kernel_event_id;
use super::strategy::KernelAttach;
use super::LoadedProbes;
use crate::plan::PlannedEvents;
use crate::table::FunctionTable;

impl LoadedProbes<'_> {
    /// Attaches the entries and returns of `events`'s kernel functions: none without any. Says
    /// under `-d` how long it took, and warns of those the kernel refused.
    pub(super) fn attach_kernel_functions(
        &self,
        events: &PlannedEvents,
        table: &FunctionTable,
    ) -> Result<Vec<Link>, ProbeError> {
        if events.kernel_functions.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let attach = self.strategy.kernel_functions()?;
        let (links, refused) = self.attach_kernel_functions_unsaid(events, table)?;
        log::debug!(
            "kernel functions: {} attached with {attach} in {:.3} ms",
            events.kernel_functions.len() - refused.len(),
            started.elapsed().as_secs_f64() * 1e3
        );
        say_untraceable(&events.untraceable_kernel_functions, &refused);
        Ok(links)
    }

    /// [`attach_kernel_functions`](Self::attach_kernel_functions) without a word, with the
    /// functions the kernel refused: for the calibration's probes on `getppid`'s kernel function,
    /// which is no function the user asked for.
    pub fn attach_kernel_functions_unsaid(
        &self,
        events: &PlannedEvents,
        table: &FunctionTable,
    ) -> Result<(Vec<Link>, Vec<String>), ProbeError> {
        // Their stacks, when captured, are not values: kernel_functions.bpf.h writes them.
        for planned in &events.kernel_functions {
            let function = &table.functions[planned.function as usize];
            if !function.values.is_empty() {
                self.set_value_spec(planned.function, function, false)?;
            }
        }
        Ok(match self.strategy.kernel_functions()? {
            KernelAttach::Multi => (self.attach_kernel_functions_at_once(events, table)?, vec![]),
            KernelAttach::Single => self.attach_kernel_functions_one_by_one(events, table),
        })
    }

    /// Two kprobe_multi links: the entries, then the returns.
    fn attach_kernel_functions_at_once(
        &self,
        events: &PlannedEvents,
        table: &FunctionTable,
    ) -> Result<Vec<Link>, ProbeError> {
        let symbols: Vec<String> = events
            .kernel_functions
            .iter()
            .map(|k| k.symbol.clone())
            .collect();
        let cookies: Vec<u64> = (events.kernel_functions.iter())
            .map(|k| u64::from(kernel_event_id(table, k.function)))
            .collect();
        let progs = &self.skel.progs;
        let programs = [
            (&progs.kernel_function_entered_multi, false),
            (&progs.kernel_function_returned_multi, true),
        ];
        programs
            .into_iter()
            .map(|(program, retprobe)| {
                let opts = KprobeMultiOpts {
                    symbols: symbols.clone(),
                    cookies: cookies.clone(),
                    retprobe,
                    ..Default::default()
                };
                program
                    .attach_kprobe_multi_with_opts(opts)
                    .map_err(|error| ProbeError::KernelFunctions {
                        asked: format!("{} functions", symbols.len()),
                        why: format!("cannot attach them with kprobe_multi: {error}"),
                    })
            })
            .collect()
    }

    /// A kprobe and a kretprobe per function: the links, and the functions the kernel refused
    /// (as kprobes refuse the functions of their blacklist), which are left out.
    fn attach_kernel_functions_one_by_one(
        &self,
        events: &PlannedEvents,
        table: &FunctionTable,
    ) -> (Vec<Link>, Vec<String>) {
        let progs = &self.skel.progs;
        let (mut links, mut refused) = (Vec::new(), Vec::new());
        for planned in &events.kernel_functions {
            let cookie = u64::from(kernel_event_id(table, planned.function));
            let pair = [
                (&progs.kernel_function_entered, false),
                (&progs.kernel_function_returned, true),
            ]
            .into_iter()
            .map(|(program, retprobe)| {
                let opts = KprobeOpts {
                    cookie,
                    ..Default::default()
                };
                program.attach_kprobe_with_opts(retprobe, &planned.symbol, opts)
            })
            .collect::<Result<Vec<Link>, _>>();
            match pair {
                Ok(pair) => links.extend(pair),
                Err(error) => {
                    log::debug!("kernel function {} not traced: {error}", planned.symbol);
                    refused.push(planned.symbol.clone());
                }
            }
        }
        (links, refused)
    }
}

/// Lists under `-d` the kernel functions `-k` matched that could not be traced (`untraceable`:
/// not in the kernel's list; `refused`: refused at attach), and counts them in one warning.
fn say_untraceable(untraceable: &[String], refused: &[String]) {
    let count = untraceable.len() + refused.len();
    if count == 0 {
        return;
    }
    if !untraceable.is_empty() {
        log::debug!(
            "kernel functions -k matched that the kernel cannot trace: {}",
            untraceable.join(", ")
        );
    }
    let first = untraceable.iter().chain(refused).next().expect("count > 0");
    let functions = if count == 1 { "function" } else { "functions" };
    log::warn!(
        "{count} kernel {functions} -k matched cannot be traced ({first}{}: notrace, __init, or \
         part of the tracer; utrace -d lists them)",
        if count > 1 { ", ..." } else { "" }
    );
}
