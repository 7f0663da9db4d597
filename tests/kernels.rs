//! End to end, on whatever kernel runs the tests (this machine's, or one of Debian's in a guest:
//! tools/vm-test.sh): what the kernel lacks is said in one line, naming the feature and the
//! kernel version that brings it, before the program runs; what it has works.

mod common;

use common::*;

#[test]
fn what_the_kernel_lacks_is_refused_before_anything_runs() {
    if !bpf_available("what_the_kernel_lacks_is_refused_before_anything_runs") {
        return;
    }
    let features = kernel_features();
    let usdt = compile("usdt.c", "usdt", &[]);
    let cases = [
        (
            ["--stack", "main"],
            kernel_lacks("bpf_find_vma") || kernel_lacks("bpf_get_attach_cookie"),
            "--stack needs bpf_find_vma and BPF cookies for uprobes (Linux 5.17), which this \
             kernel lacks",
        ),
        (
            ["-E", "usdt:myapp:*"],
            kernel_lacks("bpf_get_attach_cookie"),
            "-E usdt needs BPF cookies for uprobes (Linux 5.15), which this kernel lacks",
        ),
    ];
    for (flags, lacking, refusal) in cases {
        let dir = tempfile::tempdir().unwrap();
        let output = utrace()
            .arg("record")
            .arg("-o")
            .arg(dir.path().join("utrace.data"))
            .args(flags)
            .arg("--")
            .arg(&usdt)
            .arg("2")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        if lacking {
            assert!(!output.status.success(), "{flags:?} on {features}");
            // The kernel's fallbacks may be said before, in lines of their own.
            let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
            assert_eq!(errors, [format!("utrace: error: {refusal}")], "{flags:?}");
            // Refused before the program ran: it prints its counts when it ends.
            assert!(output.stdout.is_empty(), "{flags:?}");
        } else {
            assert!(output.status.success(), "{flags:?} on {features}: {stderr}");
            assert!(!output.stdout.is_empty(), "{flags:?}");
        }
    }
}
