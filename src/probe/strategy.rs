//! How probes are attached, chosen once from the kernel's features: as retsnoop chooses
//! between kprobe_multi and single kprobes, utrace uses `uprobe_multi` where the kernel has it
//! and one uprobe per probe site where it does not.

use std::fmt;
use std::sync::OnceLock;

use super::error::ProbeError;
use super::features::KernelFeatures;
use crate::table::ProbeClass;

/// The hidden switch that forces an attach mode: `UTRACE_ATTACH_MODE=single` attaches one uprobe
/// per probe site even where the kernel has `uprobe_multi`, so the fallback is tested on any
/// kernel (tests/attach_modes.rs); `multi` insists on `uprobe_multi`. An environment variable,
/// not a flag: it is for tests and for comparing the two, not for users, and it reaches the
/// calibration's probes as well as the recording's.
pub const ATTACH_MODE_VARIABLE: &str = "UTRACE_ATTACH_MODE";

/// How a set of probes is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// One `uprobe_multi` link per file and kind of probe, the function id in each probe's
    /// cookie.
    Multi,
    /// One uprobe (a perf-event link) per probe site, the function id in its cookie: slower to
    /// attach and detach, the same per hit.
    Single,
}

impl fmt::Display for AttachMode {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            AttachMode::Multi => "uprobe_multi",
            AttachMode::Single => "one uprobe per probe site",
        })
    }
}

/// How kernel functions (`-k`) are attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelAttach {
    /// One kprobe_multi link for the entries and one for the returns, the function id in each
    /// function's cookie.
    Multi,
    /// One kprobe and one kretprobe (perf-event links) per function, with its cookie: slower to
    /// attach and detach, the same per hit.
    Single,
}

impl KernelAttach {
    /// The probe class of the kernel functions it attaches: what their probes cost differs.
    pub fn probe_class(self) -> ProbeClass {
        match self {
            KernelAttach::Multi => ProbeClass::KPROBE_MULTI,
            KernelAttach::Single => ProbeClass::KPROBES,
        }
    }
}

impl fmt::Display for KernelAttach {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            KernelAttach::Multi => "kprobe_multi",
            KernelAttach::Single => "one kprobe and one kretprobe per function",
        })
    }
}

/// Which variant of the probe programs loads (see src/bpf/compat.bpf.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Programs {
    /// Probes read their function from the attach cookie; loops verify with `bpf_loop` or
    /// open-coded iterators.
    Current,
    /// For kernels without BPF cookies for uprobes (5.15), `bpf_loop` or `bpf_find_vma` (5.17):
    /// probes find their function from the address they were hit at, and loops are bounded
    /// loops. No `--stack`.
    Legacy,
}

/// How a process the BPF programs must stop or let go, other than the one they run in, gets its
/// signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signals {
    /// `bpf_send_signal_task` (6.13): a forked child is stopped at its fork, and the target of a
    /// recorder that dies is stopped (or let go) by the BPF program at the recorder's exit.
    FromBpf,
    /// A forked child stops itself at its first return to user space, and the guardian process
    /// stops and lets go the target of a recorder that dies (a few milliseconds later).
    FromGuardian,
}

/// What the probes of a recording can use on this kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttachStrategy {
    pub mode: AttachMode,
    /// Uprobe sessions can be used (they need `uprobe_multi`, sessions and
    /// `bpf_session_is_return`): a function's entry and return probes are one session, whose
    /// entry decides whether the return is probed, and PLT calls can be probed where they land.
    /// Otherwise entries and returns are separate probes, and PLT calls are probed at their
    /// stubs.
    pub sessions: bool,
    pub programs: Programs,
    pub signals: Signals,
    /// What was found, for messages.
    pub features: KernelFeatures,
}

impl AttachStrategy {
    /// The strategy `features` allow, in `asked` mode if one is forced. A feature the probes
    /// could not tell about counts as present: loading or attaching will say what is wrong.
    pub fn choose(features: KernelFeatures, asked: Option<AttachMode>) -> AttachStrategy {
        let mode = match asked {
            Some(mode) => mode,
            None if features.uprobe_multi.missing() => AttachMode::Single,
            None => AttachMode::Multi,
        };
        let legacy = [features.cookies, features.bpf_loop, features.find_vma];
        AttachStrategy {
            mode,
            sessions: mode == AttachMode::Multi
                && !features.uprobe_session.missing()
                && !features.session_is_return.missing(),
            programs: match legacy.iter().any(|feature| feature.missing()) {
                true => Programs::Legacy,
                false => Programs::Current,
            },
            signals: match features.send_signal_task.missing() {
                true => Signals::FromGuardian,
                false => Signals::FromBpf,
            },
            features,
        }
    }

    /// Whether `--stack` can capture stacks: its callers are placed with `bpf_find_vma`, which
    /// the legacy programs do without.
    pub fn user_stacks(&self) -> Result<(), ProbeError> {
        match self.programs {
            Programs::Current => Ok(()),
            Programs::Legacy => Err(ProbeError::Unsupported {
                what: "--stack",
                needs: "bpf_find_vma and BPF cookies for uprobes (Linux 5.17)",
            }),
        }
    }

    /// How kernel functions can be traced (`-k`): with kprobe_multi links where the kernel has
    /// them, else with a kprobe pair per function, whose programs need BPF cookies to know
    /// which function was hit. fentry/fexit would cost less a call, but no Debian kernel can
    /// attach one program to many functions: it takes one program loaded (and verified) per
    /// function, seconds at start for hundreds of them.
    pub fn kernel_functions(&self) -> Result<KernelAttach, ProbeError> {
        let features = &self.features;
        if features.kprobes.missing() {
            return Err(ProbeError::Unsupported {
                what: "-k",
                needs: "kprobes (CONFIG_KPROBES, as in Debian's, Ubuntu's and Fedora's kernels)",
            });
        }
        if !features.kprobe_multi.missing() {
            return Ok(KernelAttach::Multi);
        }
        match features.cookies.missing() {
            false => Ok(KernelAttach::Single),
            true => Err(ProbeError::Unsupported {
                what: "-k",
                needs: "kprobe_multi links (Linux 5.18) or BPF cookies for kprobes (Linux 5.15)",
            }),
        }
    }

    /// Whether USDT probes can be attached to a process not started yet: libbpf tells them
    /// apart by their cookie, or else by their address in a process that runs already.
    pub fn usdt(&self) -> Result<(), ProbeError> {
        match self.features.cookies.missing() {
            false => Ok(()),
            true => Err(ProbeError::Unsupported {
                what: "-E usdt",
                needs: "BPF cookies for uprobes (Linux 5.15)",
            }),
        }
    }
}

/// The strategy for this kernel, probed and chosen on the first call, and said under `-d` (a
/// fallback the user did not ask for, always).
pub fn strategy() -> &'static AttachStrategy {
    static STRATEGY: OnceLock<AttachStrategy> = OnceLock::new();
    STRATEGY.get_or_init(|| {
        let features = KernelFeatures::probe();
        let asked = asked_mode();
        let strategy = AttachStrategy::choose(features, asked);
        say(&strategy, asked);
        strategy
    })
}

/// The mode [`ATTACH_MODE_VARIABLE`] forces, if any.
fn asked_mode() -> Option<AttachMode> {
    let value = std::env::var(ATTACH_MODE_VARIABLE).ok()?;
    match value.as_str() {
        "single" => Some(AttachMode::Single),
        "multi" => Some(AttachMode::Multi),
        "" => None,
        _ => {
            log::warn!("{ATTACH_MODE_VARIABLE}={value} ignored: use single or multi");
            None
        }
    }
}

/// Says what the kernel offers (`-d`) and, in one line each, the fallbacks that cost the user
/// something: time at attach and detach, or per call.
fn say(strategy: &AttachStrategy, asked: Option<AttachMode>) {
    let features = &strategy.features;
    log::debug!(
        "kernel features: {features} (probed in {:.1} ms)",
        features.probe_time.as_secs_f64() * 1e3
    );
    let plt = match strategy.sessions {
        true => "PLT calls may be probed where they land (uprobe sessions)",
        false => "PLT calls probed at their stubs (probing them where they land needs uprobe sessions on uprobe_multi, Linux 6.13)",
    };
    match (strategy.mode, asked) {
        (AttachMode::Single, None) => log::warn!(
            "this kernel has no uprobe_multi links (Linux 6.6): one uprobe per function \
             instead, slower to attach and detach"
        ),
        (mode, Some(_)) => {
            log::debug!("probes attached with {mode}, as {ATTACH_MODE_VARIABLE} asks")
        }
        (mode, None) => log::debug!("probes attached with {mode}"),
    }
    log::debug!("{plt}");
    if strategy.programs == Programs::Legacy {
        log::warn!(
            "this kernel has no BPF cookies for uprobes or no bpf_loop (Linux 5.17): each hit \
             finds its function by its address (a map lookup), loading takes longer, and \
             --stack is not available"
        );
    }
    if strategy.signals == Signals::FromGuardian {
        log::debug!(
            "no bpf_send_signal_task (Linux 6.13): forked children stop at their first return \
             to user space (--follow), and if utrace dies, a guardian process lets the program \
             go on"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Support;
    use std::time::Duration;

    /// Everything there, as on 6.18.
    fn current() -> KernelFeatures {
        KernelFeatures {
            uprobe_multi: Support::Yes,
            uprobe_session: Support::Yes,
            session_is_return: Support::Yes,
            send_signal_task: Support::Yes,
            ring_buffer: Support::Yes,
            cookies: Support::Yes,
            bpf_loop: Support::Yes,
            find_vma: Support::Yes,
            iterators: Support::Yes,
            fentry: Support::Yes,
            kprobes: Support::Yes,
            kprobe_multi: Support::Yes,
            probe_time: Duration::ZERO,
        }
    }

    /// What this machine's 6.18 reports: no kprobes, no fentry.
    fn linux_6_18_here() -> KernelFeatures {
        KernelFeatures {
            fentry: Support::Unknown(libc::EPERM),
            kprobes: Support::No,
            kprobe_multi: Support::No,
            ..current()
        }
    }

    /// What Debian 12's 6.12 reports.
    fn linux_6_12() -> KernelFeatures {
        KernelFeatures {
            uprobe_session: Support::No,
            send_signal_task: Support::No,
            ..current()
        }
    }

    /// Debian 12's 6.1: no uprobe_multi, no open-coded iterators, no kprobe_multi.
    fn linux_6_1() -> KernelFeatures {
        KernelFeatures {
            uprobe_multi: Support::No,
            iterators: Support::No,
            kprobe_multi: Support::No,
            ..linux_6_12()
        }
    }

    /// Debian 11's 5.10: no cookies, no bpf_loop, no bpf_find_vma.
    fn linux_5_10() -> KernelFeatures {
        KernelFeatures {
            cookies: Support::No,
            bpf_loop: Support::No,
            find_vma: Support::No,
            session_is_return: Support::No,
            ..linux_6_1()
        }
    }

    #[test]
    fn everything_where_the_kernel_has_it() {
        let strategy = AttachStrategy::choose(current(), None);
        assert_eq!(strategy.mode, AttachMode::Multi);
        assert!(strategy.sessions);
        assert_eq!(strategy.programs, Programs::Current);
        assert_eq!(strategy.signals, Signals::FromBpf);
        assert!(strategy.user_stacks().is_ok() && strategy.usdt().is_ok());
    }

    #[test]
    fn on_6_12_returns_are_separate_probes_and_the_guardian_sends_signals() {
        let strategy = AttachStrategy::choose(linux_6_12(), None);
        assert_eq!(strategy.mode, AttachMode::Multi);
        assert!(!strategy.sessions);
        assert_eq!(strategy.programs, Programs::Current);
        assert_eq!(strategy.signals, Signals::FromGuardian);
    }

    #[test]
    fn on_6_1_one_uprobe_each_with_the_current_programs() {
        let strategy = AttachStrategy::choose(linux_6_1(), None);
        assert_eq!(strategy.mode, AttachMode::Single);
        assert!(!strategy.sessions);
        assert_eq!(strategy.programs, Programs::Current);
        assert!(strategy.user_stacks().is_ok() && strategy.usdt().is_ok());
    }

    #[test]
    fn on_5_10_the_legacy_programs_without_stacks_or_usdt() {
        let strategy = AttachStrategy::choose(linux_5_10(), None);
        assert_eq!(strategy.mode, AttachMode::Single);
        assert_eq!(strategy.programs, Programs::Legacy);
        assert_eq!(strategy.signals, Signals::FromGuardian);
        assert!(strategy.user_stacks().is_err() && strategy.usdt().is_err());
    }

    #[test]
    fn kernel_functions_are_attached_the_best_way_the_kernel_has() {
        let attach = |features| AttachStrategy::choose(features, None).kernel_functions();
        assert_eq!(attach(linux_6_12()).unwrap(), KernelAttach::Multi);
        assert_eq!(attach(linux_6_1()).unwrap(), KernelAttach::Single);
        let refused = attach(linux_5_10()).unwrap_err().to_string();
        assert!(refused.starts_with("-k needs kprobe_multi links (Linux 5.18) or BPF cookies"));
        let refused = attach(linux_6_18_here()).unwrap_err().to_string();
        assert!(
            refused.starts_with("-k needs kprobes (CONFIG_KPROBES"),
            "{refused}"
        );
    }

    #[test]
    fn a_kernel_with_cookies_but_no_bpf_loop_gets_the_legacy_programs() {
        // 5.15 and 5.16: cookies, but neither bpf_loop nor bpf_find_vma.
        let features = KernelFeatures {
            cookies: Support::Yes,
            ..linux_5_10()
        };
        let strategy = AttachStrategy::choose(features, None);
        assert_eq!(strategy.programs, Programs::Legacy);
        assert!(strategy.usdt().is_ok() && strategy.user_stacks().is_err());
    }

    #[test]
    fn one_uprobe_each_where_asked_for_and_plt_calls_at_their_stubs() {
        let strategy = AttachStrategy::choose(current(), Some(AttachMode::Single));
        assert_eq!(strategy.mode, AttachMode::Single);
        assert!(!strategy.sessions);
    }

    #[test]
    fn plt_calls_at_their_stubs_without_the_session_kfunc() {
        let features = KernelFeatures {
            session_is_return: Support::No,
            ..current()
        };
        let strategy = AttachStrategy::choose(features, None);
        assert_eq!(
            (strategy.mode, strategy.sessions),
            (AttachMode::Multi, false)
        );
    }

    #[test]
    fn what_could_not_be_probed_counts_as_there() {
        let refused = Support::Unknown(libc::EPERM);
        let features = KernelFeatures {
            uprobe_multi: refused,
            uprobe_session: refused,
            send_signal_task: refused,
            cookies: refused,
            bpf_loop: refused,
            find_vma: refused,
            ..current()
        };
        let strategy = AttachStrategy::choose(features, None);
        assert_eq!(strategy.mode, AttachMode::Multi);
        assert!(strategy.sessions);
        assert_eq!(strategy.programs, Programs::Current);
        assert_eq!(strategy.signals, Signals::FromBpf);
    }
}
