//! How probes are attached, chosen once from the kernel's features: as retsnoop chooses
//! between kprobe_multi and single kprobes, utrace uses `uprobe_multi` where the kernel has it
//! and one uprobe per probe site where it does not.

use std::fmt;
use std::sync::OnceLock;

use super::features::KernelFeatures;

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
    /// Forked children can be stopped until they are probed (`--follow`): needs
    /// `bpf_send_signal_task`.
    pub follow: bool,
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
        AttachStrategy {
            mode,
            sessions: mode == AttachMode::Multi
                && !features.uprobe_session.missing()
                && !features.session_is_return.missing(),
            follow: !features.send_signal_task.missing(),
            features,
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

fn say(strategy: &AttachStrategy, asked: Option<AttachMode>) {
    let features = &strategy.features;
    log::debug!(
        "kernel features: {features} (probed in {:.1} ms)",
        features.probe_time.as_secs_f64() * 1e3
    );
    let plt = match strategy.sessions {
        true => "PLT calls may be probed where they land (uprobe sessions)",
        false => "PLT calls probed at their stubs (probing them where they land needs uprobe sessions on uprobe_multi)",
    };
    match (strategy.mode, asked) {
        (AttachMode::Single, None) => log::warn!(
            "this kernel has no uprobe_multi links (Linux 6.6 or newer): one uprobe per \
             function instead, slower to attach and detach; {plt}"
        ),
        (mode, Some(_)) => {
            log::debug!("probes attached with {mode}, as {ATTACH_MODE_VARIABLE} asks; {plt}")
        }
        (mode, None) => log::debug!("probes attached with {mode}; {plt}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Support;
    use std::time::Duration;

    fn features(uprobe_multi: Support, uprobe_session: Support) -> KernelFeatures {
        KernelFeatures {
            uprobe_multi,
            uprobe_session,
            session_is_return: Support::Yes,
            send_signal_task: Support::Yes,
            ring_buffer: Support::Yes,
            fentry: Support::Yes,
            probe_time: Duration::ZERO,
        }
    }

    #[test]
    fn uprobe_multi_where_the_kernel_has_it() {
        let strategy = AttachStrategy::choose(features(Support::Yes, Support::Yes), None);
        assert_eq!(strategy.mode, AttachMode::Multi);
        assert!(strategy.sessions && strategy.follow);
    }

    #[test]
    fn one_uprobe_each_where_it_is_missing_or_asked_for_and_plt_calls_at_their_stubs() {
        let missing = AttachStrategy::choose(features(Support::No, Support::No), None);
        let asked = AttachStrategy::choose(
            features(Support::Yes, Support::Yes),
            Some(AttachMode::Single),
        );
        for strategy in [missing, asked] {
            assert_eq!(strategy.mode, AttachMode::Single);
            assert!(!strategy.sessions);
        }
    }

    #[test]
    fn plt_calls_at_their_stubs_without_sessions_or_their_kfunc() {
        let strategy = AttachStrategy::choose(features(Support::Yes, Support::No), None);
        assert_eq!(
            (strategy.mode, strategy.sessions),
            (AttachMode::Multi, false)
        );
        let mut no_kfunc = features(Support::Yes, Support::Yes);
        no_kfunc.session_is_return = Support::No;
        assert!(!AttachStrategy::choose(no_kfunc, None).sessions);
    }

    #[test]
    fn what_could_not_be_probed_counts_as_there() {
        let refused = Support::Unknown(libc::EPERM);
        let mut features = features(refused, refused);
        features.send_signal_task = refused;
        let strategy = AttachStrategy::choose(features, None);
        assert_eq!(strategy.mode, AttachMode::Multi);
        assert!(strategy.sessions && strategy.follow);
    }
}
