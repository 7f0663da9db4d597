// got_rust.rs - a Rust program's calls into libc go through its GOT (`call *write@GOTPCREL(%rip)`):
// writes N bytes to /dev/null one `write` at a time, then prints how many it made.
//
// Usage: got_rust N
use std::io::Write;

fn main() {
    let rounds: u64 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(10);
    let mut null = std::fs::File::create("/dev/null").expect("opening /dev/null");
    for _ in 0..rounds {
        null.write_all(b"x").expect("writing to /dev/null");
    }
    println!("writes {rounds}");
}
