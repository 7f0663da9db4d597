// panics.rs - Rust program for utrace: panics that unwind through traced
// frames and are caught by std::panic::catch_unwind. Each frame the panic
// leaves has a return address that a uretprobe may have replaced; traced,
// this program must behave exactly as untraced.
//
// Build: rustc -O panics.rs (panic=unwind, the default).
// Usage: panics [R]     (R rounds, 1..1000, default 3)
//
// Each round catches three panics, through 1, 2 and 5 traced frames
// (thrower, plus 0, 1 and 4 `pass` frames, each with a guard to drop), and
// calls after_catch after each catch, so calls that follow a catch are counted
// too.
//
// Expected counts for R rounds (R = 3 in brackets):
//   panics::main 1   panics::catching 3R (9)   panics::thrower 3R (9)
//   panics::pass 5R (15)   <panics::Guard as core::ops::drop::Drop>::drop 5R (15)
//   panics::after_catch 3R (9)
use std::panic;
use std::sync::atomic::{AtomicU64, Ordering};

static MAIN: AtomicU64 = AtomicU64::new(0);
static CATCHING: AtomicU64 = AtomicU64::new(0);
static THROWER: AtomicU64 = AtomicU64::new(0);
static PASS: AtomicU64 = AtomicU64::new(0);
static GUARD_DROP: AtomicU64 = AtomicU64::new(0);
static AFTER_CATCH: AtomicU64 = AtomicU64::new(0);

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Dropped while the panic unwinds its frame: the unwinder runs the drop and
/// resumes with _Unwind_Resume.
struct Guard;

impl Drop for Guard {
    #[inline(never)]
    fn drop(&mut self) {
        bump(&GUARD_DROP);
    }
}

#[inline(never)]
fn thrower(round: u64) -> u64 {
    bump(&THROWER);
    // Always true; the compiler cannot tell, so the function keeps returning.
    if round < u64::MAX {
        panic!("boom {round}");
    }
    round
}

/// `depth` more frames of pass, then the thrower.
#[inline(never)]
fn pass(depth: u32, round: u64) -> u64 {
    bump(&PASS);
    let _guard = Guard;
    let inner = if depth == 0 {
        thrower(round)
    } else {
        pass(depth - 1, round)
    };
    // Not reached; keeps the calls above from being tail calls.
    inner.wrapping_add(1)
}

/// Catches the panic of `frames` traced frames: the thrower alone, or
/// `frames - 1` pass frames and the thrower.
#[inline(never)]
fn catching(frames: u32, round: u64) -> bool {
    bump(&CATCHING);
    let caught = panic::catch_unwind(|| {
        if frames == 1 {
            thrower(round)
        } else {
            pass(frames - 2, round)
        }
    });
    caught.is_err()
}

#[inline(never)]
fn after_catch(x: u64) -> u64 {
    bump(&AFTER_CATCH);
    x + 1
}

fn main() {
    bump(&MAIN);
    let rounds: u64 = match std::env::args().nth(1).map(|arg| arg.parse()) {
        None => 3,
        Some(Ok(rounds)) if (1..=1000).contains(&rounds) => rounds,
        Some(_) => {
            eprintln!("usage: panics [R]  (1..1000)");
            std::process::exit(2);
        }
    };
    // No message per panic: they are expected.
    panic::set_hook(Box::new(|_| {}));
    let mut caught = 0;
    let mut total = 0;
    for round in 0..rounds {
        for frames in [1, 2, 5] {
            caught += u64::from(catching(frames, round));
            total += after_catch(round);
        }
    }
    println!("caught {caught}, total {total}");
    let counts = [
        (&MAIN, "panics::main"),
        (&CATCHING, "panics::catching"),
        (&THROWER, "panics::thrower"),
        (&PASS, "panics::pass"),
        (&GUARD_DROP, "<panics::Guard as core::ops::drop::Drop>::drop"),
        (&AFTER_CATCH, "panics::after_catch"),
    ];
    for (counter, name) in counts {
        println!("calls {} {name}", counter.load(Ordering::Relaxed));
    }
}
