//! Replacing the links of the target's functions by links without some of them (`--budget`
//! detaches the functions whose probes cost the most): a `uprobe_multi` link cannot drop one
//! function, so the recorder attaches a new set of links beside the old one and releases the
//! old. Each function probed at start has a generation (0 or 1) in the BPF map
//! `link_generations`, and each probe carries the generation of its link in its cookie: only
//! the probes of the function's current generation record (`current_link` in utrace.bpf.c).
//! While both sets are attached, a kept function's calls are recorded once: by the old links
//! until its generation switches, by the new ones after. A call entered before the switch
//! returns to the old link's session, which records it while that link stays attached.

use std::collections::HashSet;

use libbpf_rs::{MapCore, MapFlags};

use super::error::ProbeError;
use super::interface::COOKIE_GENERATION;
use super::LoadedProbes;
use crate::table::FunctionId;

/// The generation of each function's links, as the next links attached get it.
#[derive(Default)]
pub(super) struct Generations {
    /// By function id: those planned at start (the map's size); the others never change.
    next: Vec<bool>,
    /// Functions whose probes are left out of the links attached from now on.
    detached: HashSet<FunctionId>,
}

impl Generations {
    /// For the `functions` planned at start; none when no link will be replaced.
    pub(super) fn new(functions: u32) -> Generations {
        Generations {
            next: vec![false; functions as usize],
            detached: HashSet::new(),
        }
    }

    /// The bit to set in the cookies of function `id`'s probes.
    pub(super) fn cookie_bit(&self, id: FunctionId) -> u64 {
        match self.next.get(id as usize) {
            Some(true) => COOKIE_GENERATION,
            _ => 0,
        }
    }

    /// Whether the function `id` gets no more probes.
    pub(super) fn is_detached(&self, id: FunctionId) -> bool {
        self.detached.contains(&id)
    }
}

impl LoadedProbes<'_> {
    /// Starts replacing the links of the functions planned at start: the links attached from
    /// now on leave `detached` out, and the others' record once
    /// [`switch_generations`](Self::switch_generations) says so.
    pub fn start_replacing(&self, detached: &[FunctionId]) {
        let mut generations = self.generations.borrow_mut();
        generations.detached.extend(detached);
        for next in &mut generations.next {
            *next = !*next;
        }
    }

    /// Hands the recording of each kept function to its links attached last. A detached
    /// function's calls are no longer recorded from here on (no link has its new generation),
    /// but for the returns of those entered before.
    pub fn switch_generations(&self) -> Result<(), ProbeError> {
        let generations = self.generations.borrow();
        let map = &self.skel.maps.link_generations;
        for (id, &next) in (0u32..).zip(&generations.next) {
            map.update(
                &id.to_ne_bytes(),
                &u32::from(next).to_ne_bytes(),
                MapFlags::ANY,
            )
            .map_err(ProbeError::LinkGenerations)?;
        }
        Ok(())
    }
}
