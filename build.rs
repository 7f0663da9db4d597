//! Builds the BPF skeletons: utrace's own from `src/bpf/utrace.bpf.c`, and the benchmark's floor
//! (`uprobe-floor`) from `src/bpf/floor.bpf.c`; nothing else.
use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

/// Each BPF source and the skeleton it becomes in `OUT_DIR`.
const SKELETONS: [(&str, &str); 2] = [
    ("src/bpf/utrace.bpf.c", "utrace.skel.rs"),
    ("src/bpf/floor.bpf.c", "floor.skel.rs"),
];

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let vmlinux =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("vmlinux");
    // libbpf's usdt.bpf.h includes <linux/errno.h>, which needs the multiarch <asm/…> headers.
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets it");
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    for (source, skeleton) in SKELETONS {
        SkeletonBuilder::new()
            .source(source)
            .clang_args([
                "-I",
                vmlinux.to_str().expect("UTF-8 path"),
                "-idirafter",
                &multiarch,
                "-Wall",
                "-O2",
            ])
            .build_and_generate(out_dir.join(skeleton))
            .expect("building the BPF skeleton (needs clang)");
    }
    // The sources and every header they include: cargo looks at each file of the directory.
    println!("cargo:rerun-if-changed=src/bpf");
}
