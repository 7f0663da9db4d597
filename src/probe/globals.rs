//! While the programs run: the switches the recorder sets in their global variables and the
//! counters and maps it reads.

use libbpf_rs::{MapCore, MapFlags};

use super::interface::skel::types;
use super::LoadedProbes;

impl<'obj> LoadedProbes<'obj> {
    /// The ring buffer map the events arrive in.
    pub fn events_map(&self) -> &libbpf_rs::MapMut<'obj> {
        &self.skel.maps.events
    }

    /// The ring buffer the shadow stack's write requests arrive in.
    pub fn stack_writes_map(&self) -> &libbpf_rs::MapMut<'obj> {
        &self.skel.maps.stack_writes
    }

    /// The program's global variables, in memory mapped from the BPF map.
    fn bss(&self) -> &types::bss {
        self.skel
            .maps
            .bss_data
            .as_deref()
            .expect("the BPF object has a .bss")
    }

    fn bss_mut(&mut self) -> &mut types::bss {
        self.skel
            .maps
            .bss_data
            .as_deref_mut()
            .expect("the BPF object has a .bss")
    }

    /// Says whether the recorder serves the shadow stack's write requests: while it does not, the
    /// BPF programs stop the process for none.
    pub fn set_serving_stack_writes(&mut self, on: bool) {
        // SAFETY: as in `set_recording`.
        unsafe { std::ptr::write_volatile(&raw mut self.bss_mut().serving_stack_writes, on) };
    }

    /// Stack write requests sent so far, each with a stop of the process.
    pub fn stack_write_requests(&self) -> u64 {
        // SAFETY: as in `lost_events`.
        unsafe { std::ptr::read_volatile(&raw const self.bss().stack_write_requests) }
    }

    /// Per thread of the target, the return addresses the shadow stack knows the kernel replaced
    /// with its trampoline: see [`replaced_return_addresses`].
    pub fn replaced_return_addresses(&self) -> Vec<(u32, Vec<(u64, u64)>)> {
        replaced_return_addresses(&self.skel.maps.shadow_stacks)
    }

    /// The ids of the maps the guardian opens (`src/record/guardian.rs`): the ring buffer of the
    /// recorder's death notes, the shadow stacks and the followed processes.
    pub fn guardian_map_ids(&self) -> Option<GuardianMaps> {
        let id = |map: &libbpf_rs::MapMut| Some(map.info().ok()?.info.id);
        let maps = &self.skel.maps;
        Some(GuardianMaps {
            deaths: id(&maps.recorder_deaths)?,
            shadow_stacks: id(&maps.shadow_stacks)?,
            followed: id(&maps.followed_processes)?,
        })
    }

    /// Hits the legacy programs could not tie to a probe (see src/bpf/compat.bpf.h).
    pub fn unidentified_hits(&self) -> u64 {
        // SAFETY: as in `lost_events`.
        unsafe { std::ptr::read_volatile(&raw const self.bss().unidentified_hits) }
    }

    /// Tells the BPF programs which process is the guardian: when the recorder dies, they stop
    /// the target for it instead of letting it go.
    pub fn set_guardian(&mut self, pid: u32) {
        // SAFETY: as in `set_recording`.
        unsafe { std::ptr::write_volatile(&raw mut self.bss_mut().guardian_tgid, pid) };
    }

    /// Turns counting on (after every link is attached) or off (before any is detached).
    pub fn set_recording(&mut self, on: bool) {
        // SAFETY: a plain bool in memory mapped from the BPF map, read by the BPF programs
        // concurrently: written with a volatile store so it is not elided or delayed.
        unsafe { std::ptr::write_volatile(&raw mut self.bss_mut().recording, on) };
    }

    /// Calls through the PLT stubs of traced libraries that were not counted: see
    /// `unverified_library_calls` in utrace.bpf.c.
    pub fn unverified_library_calls(&self) -> u64 {
        // SAFETY: as in `lost_events`.
        unsafe { std::ptr::read_volatile(&raw const self.bss().unverified_library_calls) }
    }

    /// Events dropped so far because the ring buffer was full.
    pub fn lost_events(&self) -> u64 {
        // SAFETY: the field is a plain u64 in memory mapped from the BPF map; BPF programs update
        // it concurrently, so it is read with a volatile load rather than cached.
        unsafe { std::ptr::read_volatile(&raw const self.bss().lost_events) }
    }

    /// Events dropped so far because the ring buffer was full, per thread id, by thread id.
    /// Threads beyond the map's capacity are only in [`lost_events`](Self::lost_events).
    pub fn lost_by_thread(&self) -> Vec<(u32, u64)> {
        let map = &self.skel.maps.lost_by_thread;
        let mut lost: Vec<(u32, u64)> = map
            .keys()
            .filter_map(|key| {
                let value = map.lookup(&key, MapFlags::ANY).ok().flatten()?;
                let tid = u32::from_ne_bytes(key.as_slice().try_into().ok()?);
                Some((tid, u64::from_ne_bytes(value.as_slice().try_into().ok()?)))
            })
            .collect();
        lost.sort_unstable();
        lost
    }
}

/// The ids of the BPF maps a guardian may open.
pub struct GuardianMaps {
    pub deaths: u32,
    pub shadow_stacks: u32,
    pub followed: u32,
}

/// Per thread, the frames of `shadow_stacks` (the BPF map of `struct shadow_stack`,
/// src/bpf/shadow.bpf.h) as (slot, original return address) pairs, whether the unwinder has
/// restored them or not: a restore may have been asked for and not made yet (the recorder gone),
/// so the slot itself tells whether it still holds the trampoline.
pub fn replaced_return_addresses(shadow_stacks: &impl MapCore) -> Vec<(u32, Vec<(u64, u64)>)> {
    // struct shadow_stack: depth, unused, unwind_slot, then SHADOW_DEPTH slots and SHADOW_DEPTH
    // return addresses, the top bit of each set once restored.
    const DEPTH: usize = 128;
    const RESTORED: u64 = 1 << 63;
    let quad = |bytes: &[u8], at: usize| -> Option<u64> {
        Some(u64::from_ne_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
    };
    shadow_stacks
        .keys()
        .filter_map(|key| {
            let value = shadow_stacks.lookup(&key, MapFlags::ANY).ok().flatten()?;
            let tid = u32::from_ne_bytes(key.as_slice().try_into().ok()?);
            let depth = (u32::from_ne_bytes(value.get(0..4)?.try_into().ok()?) as usize).min(DEPTH);
            let frames = (0..depth)
                .filter_map(|i| {
                    let slot = quad(&value, 16 + 8 * i)?;
                    let ret = quad(&value, 16 + 8 * (DEPTH + i))?;
                    Some((slot, ret & !RESTORED))
                })
                .collect();
            Some((tid, frames))
        })
        .collect()
}
