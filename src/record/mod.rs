//! Recording: start or attach to the target, load and attach BPF, drain the ring buffer.

mod skel {
    include!(concat!(env!("OUT_DIR"), "/utrace.skel.rs"));
}
