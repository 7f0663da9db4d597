//! libbpf's own messages: passed on to the log at trace level (`-dd`), and its warnings kept, so
//! that a program the kernel's verifier rejects is named with the verifier's reason rather than
//! taken for a missing permission.

use std::collections::VecDeque;
use std::sync::Mutex;

/// The warnings kept: a rejection is the load's last words.
const KEPT: usize = 32;

static WARNINGS: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());

/// Sends libbpf's messages to the log at trace level (`-dd`) and keeps its warnings; asks libbpf
/// for nothing below a warning otherwise: errors reach the user as one line through
/// [`ProbeError`](super::ProbeError).
pub fn forward_libbpf_messages() {
    fn print(level: libbpf_rs::PrintLevel, message: String) {
        if level == libbpf_rs::PrintLevel::Warn {
            let mut kept = WARNINGS
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if kept.len() == KEPT {
                kept.pop_front();
            }
            kept.push_back(message.clone());
        }
        log::trace!(target: crate::diagnostics::LIBBPF_TARGET, "{message}");
    }
    let all = log::log_enabled!(target: crate::diagnostics::LIBBPF_TARGET, log::Level::Trace);
    let level = match all {
        true => libbpf_rs::PrintLevel::Debug,
        false => libbpf_rs::PrintLevel::Warn,
    };
    libbpf_rs::set_print(Some((level, print as _)));
}

/// A program the verifier refused: its name and the verifier's reason.
#[derive(Debug, PartialEq, Eq)]
pub struct Rejection {
    pub program: String,
    pub reason: String,
}

/// The last program libbpf said the kernel refused to load, if any, with the verifier's reason.
pub(super) fn last_rejection() -> Option<Rejection> {
    let kept = WARNINGS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    rejection_in(kept.iter().map(String::as_str))
}

/// The last rejection among libbpf's `warnings`: libbpf prints the program's verifier log between
/// `prog 'NAME': -- BEGIN PROG LOAD LOG --` and `-- END PROG LOAD LOG --`.
fn rejection_in<'a>(warnings: impl DoubleEndedIterator<Item = &'a str>) -> Option<Rejection> {
    let log = warnings
        .rev()
        .find(|message| message.contains("-- BEGIN PROG LOAD LOG --"))?;
    let program = log.strip_prefix("libbpf: prog '")?.split('\'').next()?;
    Some(Rejection {
        program: program.to_owned(),
        reason: verifier_reason(log),
    })
}

/// The verifier's reason in its log: its last line before the statistics, with the line before
/// when that is a sentence too rather than an instruction or the registers' state.
fn verifier_reason(log: &str) -> String {
    let statistics = [
        "processed ",
        "verification time",
        "stack depth",
        "-- END PROG LOAD LOG",
    ];
    let lines: Vec<&str> = log
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|line| !line.is_empty() && !statistics.iter().any(|s| line.starts_with(s)))
        .collect();
    let Some((last, before)) = lines.split_last() else {
        return "no reason given".to_owned();
    };
    let is_sentence = |line: &str| {
        let first = line.chars().next().unwrap_or(' ');
        first.is_ascii_alphabetic()
            && !line.starts_with('R')
            && !line.starts_with("last_idx")
            && !line.starts_with("regs=")
    };
    match before.last() {
        Some(previous) if is_sentence(previous) && is_sentence(last) => {
            format!("{previous}: {last}")
        }
        _ => (*last).to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejection_is_named_with_the_verifiers_last_words() {
        // What libbpf printed when 6.12 refused process_exit (its tracepoint has one argument).
        let warnings = [
            "libbpf: prog 'process_exit': BPF program load failed: -EACCES\n",
            "libbpf: prog 'process_exit': -- BEGIN PROG LOAD LOG --\n\
             reg type unsupported for arg#0 function process_exit#57\n\
             0: R1=ctx() R10=fp0\n\
             ; int BPF_PROG(process_exit, struct task_struct *task, bool group_dead)\n\
             0: (79) r2 = *(u64 *)(r1 +8)\n\
             func 'sched_process_exit' doesn't have 2-th argument\n\
             invalid bpf_context access off=8 size=8\n\
             processed 1 insns (limit 1000000) max_states_per_insn 0 total_states 0\n\
             -- END PROG LOAD LOG --\n",
            "libbpf: prog 'process_exit': failed to load: -EACCES\n",
        ];
        assert_eq!(
            rejection_in(warnings.into_iter()),
            Some(Rejection {
                program: "process_exit".to_owned(),
                reason: "func 'sched_process_exit' doesn't have 2-th argument: invalid \
                         bpf_context access off=8 size=8"
                    .to_owned(),
            })
        );
    }

    #[test]
    fn a_reason_after_the_registers_stands_alone() {
        let warnings = [
            "libbpf: prog 'function_exit_legacy': -- BEGIN PROG LOAD LOG --\n\
             55: (79) r9 = *(u64 *)(r0 +0)\n\
             R0_w=map_value(id=0,off=0,ks=16,vs=40) R1_w=inv(id=3)\n\
             R0 unbounded memory access, make sure to bounds check any such access\n\
             processed 40 insns (limit 1000000)\n\
             -- END PROG LOAD LOG --\n",
        ];
        let rejection = rejection_in(warnings.into_iter()).expect("a rejection");
        assert_eq!(rejection.program, "function_exit_legacy");
        assert_eq!(
            rejection.reason,
            "R0 unbounded memory access, make sure to bounds check any such access"
        );
    }

    #[test]
    fn no_rejection_without_a_load_log() {
        let warnings = ["libbpf: failed to find BTF for extern 'bpf_task_from_pid'\n"];
        assert_eq!(rejection_in(warnings.into_iter()), None);
    }
}
