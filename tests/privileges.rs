//! What utrace leaves behind and whom it runs things as: the data file's owner and mode, and a
//! process it may not trace.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;

use common::*;

#[test]
fn under_sudo_the_data_file_belongs_to_the_invoking_user_with_their_umask() {
    if !bpf_available("under_sudo_the_data_file_belongs_to_the_invoking_user_with_their_umask") {
        return;
    }
    let exitcode = compile("exitcode.c", "exitcode", &[]);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("utrace.data");
    // As sudo would start it: SUDO_UID/SUDO_GID set, and the user's umask.
    let output = Command::new("sh")
        .arg("-c")
        .arg(r#"umask 027; exec "$0" record -o "$1" "$2""#)
        .arg(env!("CARGO_BIN_EXE_utrace"))
        .arg(&data)
        .arg(&exitcode)
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65533")
        .output()
        .unwrap();
    assert_success(&output);
    let metadata = std::fs::metadata(&data).unwrap();
    assert_eq!((metadata.uid(), metadata.gid()), (65534, 65533));
    assert_eq!(metadata.permissions().mode() & 0o777, 0o640);
}

#[test]
fn a_process_we_may_not_read_is_refused_in_one_line() {
    // As nobody, pid 1 (root's) cannot be inspected: a clear line, before any BPF.
    let output = utrace_as_nobody()
        .args(["record", "-o", "/tmp/never-written.data", "-p", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("/proc/1") && stderr.contains("root"),
        "{stderr}"
    );
    // Said once, not once by utrace and again by the error it wraps.
    assert_eq!(stderr.matches("ermission denied").count(), 1, "{stderr}");
    assert!(!stderr.contains("panicked"));
    assert!(!std::path::Path::new("/tmp/never-written.data").exists());
}
