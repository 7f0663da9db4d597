//! What can go wrong loading and attaching the BPF programs.

use super::libbpf_log::{last_rejection, Rejection};
use super::AttachMode;

/// Errors of loading and attaching the BPF side.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "loading BPF programs is not permitted ({missing} missing): run as root, or give utrace \
         CAP_BPF and CAP_PERFMON"
    )]
    NotPermitted {
        /// The capabilities this process lacks, as named in capabilities(7).
        missing: String,
    },
    #[error("cannot load the BPF programs: {0}")]
    Load(libbpf_rs::Error),
    #[error(
        "the kernel's verifier refused BPF program {program}: {reason} (utrace -dd shows its \
         whole log)"
    )]
    Rejected { program: String, reason: String },
    #[error("{what} needs {needs}, which this kernel lacks")]
    Unsupported {
        what: &'static str,
        needs: &'static str,
    },
    #[error("cannot tell the probes which values {function} captures: {error}")]
    ValueSpecs {
        function: String,
        error: libbpf_rs::Error,
    },
    #[error("cannot hand the recording of the functions to their new probes: {0}")]
    LinkGenerations(libbpf_rs::Error),
    #[error("cannot open the map of where unread strings lie: {0}")]
    StringPlaces(libbpf_rs::Error),
    #[error("cannot tell the probes where the PLT stubs of {path} are: {error}")]
    CallingLibrary {
        path: String,
        error: libbpf_rs::Error,
    },
    #[error("cannot tell the probes where the functions of {path} are: {error}")]
    SiteCookies { path: String, error: String },
    #[error("-k '{asked}': {why}")]
    KernelFunctions { asked: String, why: String },
    #[error("cannot trace system call {number}: {error}")]
    Syscalls {
        number: u32,
        error: libbpf_rs::Error,
    },
    #[error("cannot attach USDT probe {probe} of {path}: {error}")]
    Usdt {
        probe: String,
        path: String,
        error: libbpf_rs::Error,
    },
    #[error("cannot attach {count} {direction} probes to {path} with {mode}: {error}")]
    Attach {
        count: usize,
        direction: &'static str,
        path: String,
        mode: AttachMode,
        // Not `source`: the message shows it already, and anyhow would repeat a source.
        error: libbpf_rs::Error,
    },
}

/// The error of a failed load step: [`ProbeError::Rejected`] when the verifier refused a program
/// (libbpf said so), [`ProbeError::NotPermitted`] when the kernel refused for want of privileges.
pub(super) fn load_error(error: libbpf_rs::Error) -> ProbeError {
    if let Some(Rejection { program, reason }) = last_rejection() {
        return ProbeError::Rejected { program, reason };
    }
    if error.kind() == libbpf_rs::ErrorKind::PermissionDenied {
        ProbeError::NotPermitted {
            missing: missing_capabilities(),
        }
    } else {
        ProbeError::Load(error)
    }
}

/// Which of the capabilities uprobes with BPF need this process lacks, from the effective set in
/// `/proc/self/status` ("CapEff: <hex>").
fn missing_capabilities() -> String {
    const NEEDED: [(u32, &str); 2] = [(39, "CAP_BPF"), (38, "CAP_PERFMON")];
    let effective = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
            u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
        });
    let Some(effective) = effective else {
        return "capabilities unknown".to_string();
    };
    let missing: Vec<&str> = NEEDED
        .iter()
        .filter(|(bit, _)| effective & (1 << bit) == 0)
        .map(|(_, name)| *name)
        .collect();
    if missing.is_empty() {
        // Both are there: something else refuses, such as a security module.
        "no capability".to_string()
    } else {
        missing.join(" and ")
    }
}
