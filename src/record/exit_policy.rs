//! How function exits are seen (`--exit-probes`): a planning choice, made with the plan.

/// How function exits are seen (`--exit-probes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExitPolicy {
    /// A probe on each instruction that leaves the function (its `ret`s and tail jumps), and a
    /// uretprobe only where those cannot all be found: the stack is never touched, so C++
    /// exceptions unwind through traced frames.
    Ret,
    /// A uretprobe on every function: the kernel replaces the return address on the stack, which
    /// kills a C++ program whose exception unwinds through the frame.
    #[default]
    Uretprobe,
}

/// An `--exit-probes` value that is neither `ret` nor `uretprobe`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown exit probe kind `{0}`: use ret or uretprobe")]
pub struct UnknownExitPolicy(pub String);

impl std::str::FromStr for ExitPolicy {
    type Err = UnknownExitPolicy;

    fn from_str(name: &str) -> Result<ExitPolicy, UnknownExitPolicy> {
        match name {
            "ret" => Ok(ExitPolicy::Ret),
            "uretprobe" => Ok(ExitPolicy::Uretprobe),
            _ => Err(UnknownExitPolicy(name.to_owned())),
        }
    }
}
