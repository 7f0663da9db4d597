//! End to end: exits are paired with their entries by the return-address slot the events carry,
//! which keeps the replay exact when returns are never seen (longjmp, recursion deeper than the
//! kernel's 64 nested uretprobes, lost events).

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::*;
use utrace::data::DataReader;

/// Pairs the events of a well-nested trace by function id, thread by thread, and returns how many
/// exits there were and the pairs whose entry and exit carry different stack slots.
fn slot_mismatches(data: &Path) -> (u64, Vec<String>) {
    let mut reader = DataReader::open(data).unwrap();
    let names: Vec<String> = reader
        .functions()
        .functions
        .iter()
        .map(|f| f.name.clone())
        .collect();
    let mut stacks: HashMap<u32, Vec<(u32, u32)>> = HashMap::new();
    let (mut exits, mut mismatches) = (0, Vec::new());
    while let Some(events) = reader.next_events().unwrap() {
        for event in events {
            assert_ne!(event.stack, 0, "an event without its stack slot");
            let stack = stacks.entry(event.tid()).or_default();
            if !event.is_exit() {
                stack.push((event.function_id(), event.stack));
                continue;
            }
            exits += 1;
            // Under --exit-probes=ret a PLT call whose return site is also its caller's exit
            // has no exit of its own: skip such frames.
            let (function, slot) = loop {
                let (function, slot) = stack.pop().expect("an exit without an entry");
                if function == event.function_id() {
                    break (function, slot);
                }
            };
            if slot != event.stack {
                mismatches.push(format!(
                    "{}: entry {slot:#x}, exit {:#x}",
                    names[function as usize], event.stack
                ));
            }
        }
    }
    (exits, mismatches)
}

#[test]
fn entries_and_exits_carry_the_same_stack_slot() {
    if !bpf_available("entries_and_exits_carry_the_same_stack_slot") {
        return;
    }
    let plain = compile("calls.c", "calls-slots", &[]);
    // Functions and PLT stubs that start with endbr64: their probes sit past it.
    let cet = compile(
        "calls.c",
        "calls-slots-cet",
        &["-fcf-protection=full", "-Wl,-z,ibtplt"],
    );
    for program in [&plain, &cet] {
        for exits in ["--exit-probes=uretprobe", "--exit-probes=ret"] {
            let recording = record_unchanged(program, &[], &[exits]);
            let (count, mismatches) = slot_mismatches(&recording.data());
            assert!(count > 20_000, "{exits}: only {count} exits");
            assert!(
                mismatches.is_empty(),
                "{} {exits}: {} of {count} exits differ from their entry's slot:\n{}",
                program.display(),
                mismatches.len(),
                mismatches[..mismatches.len().min(20)].join("\n")
            );
        }
    }
}
