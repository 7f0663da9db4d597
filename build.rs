//! Builds the BPF skeleton from `src/bpf/utrace.bpf.c`; nothing else.
use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const SOURCE: &str = "src/bpf/utrace.bpf.c";

fn main() {
    let out =
        PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("utrace.skel.rs");
    let vmlinux =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("vmlinux");
    SkeletonBuilder::new()
        .source(SOURCE)
        .clang_args(["-I", vmlinux.to_str().expect("UTF-8 path"), "-Wall", "-O2"])
        .build_and_generate(&out)
        .expect("building the BPF skeleton (needs clang)");
    println!("cargo:rerun-if-changed={SOURCE}");
    println!("cargo:rerun-if-changed=src/bpf/event.h");
}
