//! Kernel functions (`-k GLOB`, `-K N`): each kernel function a glob matches becomes a
//! pseudo-function of module `[kernel]`, as a system call does (see `events`), probed at its
//! entry and return (src/bpf/kernel_functions.bpf.h).
//!
//! Which functions can be probed is the kernel's list, `available_filter_functions` in tracefs:
//! those ftrace can patch, which is what kprobe_multi links need and what kprobes attach to
//! cheapest. A function of the kernel's BTF a glob matches that is not in it (`notrace`, `__init`
//! code already freed, or part of the tracing code itself) cannot be traced: it is listed under
//! `-d` and counted in one warning.

use std::collections::BTreeSet;

use libbpf_rs::btf::types::Func;
use libbpf_rs::btf::Btf;

use crate::filter::{split_list, Glob, GlobError};
use crate::table::ProbeClass;

/// Where tracefs may be mounted, in order.
const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// What `-k` and `-K` ask for.
#[derive(Clone, Debug, Default)]
pub struct KernelFunctionRequests {
    /// The globs, with their text for messages.
    pub patterns: Vec<(String, Glob)>,
    /// `-K`: the deepest level recorded below a system call, 1 for the traced kernel functions
    /// it reaches first; 0 for every level.
    pub depth: u32,
    /// The class of their probes, as the recorder attaches them here (see
    /// [`crate::probe_cost`]).
    pub probes: ProbeClass,
}

/// A `-k` request that cannot be planned.
#[derive(Debug, thiserror::Error)]
pub enum KernelFunctionError {
    #[error("-k '{text}': {source}")]
    Glob { text: String, source: GlobError },
    #[error("-K {0}: the depth counts from 1 (the kernel functions a system call reaches first)")]
    Depth(u32),
    #[error(
        "-k: cannot read the kernel's traceable functions ({TRACEFS_LIST}): {0} (mount tracefs: \
         mount -t tracefs tracefs /sys/kernel/tracing)"
    )]
    Unlisted(std::io::Error),
    #[error("-k '{0}': no kernel function matches (see {TRACEFS_LIST})")]
    NoMatch(String),
    #[error(
        "-k '{asked}': the kernel cannot trace {example}{others} (notrace, __init, or part of \
         the tracer)"
    )]
    NoneTraceable {
        asked: String,
        example: String,
        others: String,
    },
}

/// The list's file, for messages.
const TRACEFS_LIST: &str = "/sys/kernel/tracing/available_filter_functions";

impl KernelFunctionRequests {
    /// Parses the `-k` values (repeatable, comma lists) and `-K`.
    pub fn parse(
        values: &[String],
        depth: Option<u32>,
    ) -> Result<KernelFunctionRequests, KernelFunctionError> {
        let mut patterns = Vec::new();
        for item in values.iter().flat_map(|value| split_list(value)) {
            let glob = Glob::new(item).map_err(|source| KernelFunctionError::Glob {
                text: item.to_owned(),
                source,
            })?;
            patterns.push((item.to_owned(), glob));
        }
        if depth == Some(0) {
            return Err(KernelFunctionError::Depth(0));
        }
        Ok(KernelFunctionRequests {
            patterns,
            depth: depth.unwrap_or(0),
            probes: ProbeClass::default(),
        })
    }

    pub fn any(&self) -> bool {
        !self.patterns.is_empty()
    }

    /// The kernel functions the globs match, by name, in the order of the kernel's list, each
    /// once: those that can be traced, and those of its BTF that cannot.
    pub fn matching(&self) -> Result<MatchedKernelFunctions, KernelFunctionError> {
        let listed = read_tracefs_list().map_err(KernelFunctionError::Unlisted)?;
        // Without the kernel's BTF only the traceable ones are known.
        let btf = Btf::from_vmlinux().ok();
        let functions = btf.iter().flat_map(|btf| btf.type_by_kind::<Func>());
        let names = functions.filter_map(|function| function.name()?.to_str());
        self.match_lists(&listed, names)
    }

    /// [`Self::matching`] on the text of `available_filter_functions` and the names of the
    /// kernel's functions.
    fn match_lists<'a>(
        &self,
        listed: &str,
        functions: impl Iterator<Item = &'a str>,
    ) -> Result<MatchedKernelFunctions, KernelFunctionError> {
        let mut traceable_names = BTreeSet::new();
        let mut matched = MatchedKernelFunctions::default();
        for name in listed_names(listed) {
            if traceable_names.insert(name) && self.matches(name) {
                matched.traceable.push(name.to_owned());
            }
        }
        let mut untraceable = BTreeSet::new();
        for name in functions {
            if !traceable_names.contains(name) && self.matches(name) {
                untraceable.insert(name);
            }
        }
        matched.untraceable = untraceable.into_iter().map(str::to_owned).collect();
        // A glob that matches nothing is a typo; one that matches only what cannot be traced is
        // said in the warning, unless nothing at all can be.
        for (text, glob) in &self.patterns {
            let mut known = matched.traceable.iter().chain(&matched.untraceable);
            if !known.any(|name| glob.matches(name)) {
                return Err(KernelFunctionError::NoMatch(text.clone()));
            }
        }
        if matched.traceable.is_empty() {
            let count = matched.untraceable.len();
            return Err(KernelFunctionError::NoneTraceable {
                asked: self
                    .patterns
                    .iter()
                    .map(|(text, _)| text.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                example: matched.untraceable[0].clone(),
                others: match count {
                    1 => String::new(),
                    n => format!(" nor {} other{}", n - 1, if n == 2 { "" } else { "s" }),
                },
            });
        }
        Ok(matched)
    }

    fn matches(&self, name: &str) -> bool {
        self.patterns.iter().any(|(_, glob)| glob.matches(name))
    }
}

/// The kernel functions `-k` matched.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MatchedKernelFunctions {
    pub traceable: Vec<String>,
    /// Sorted by name.
    pub untraceable: Vec<String>,
}

/// The first of `names` the kernel can trace (see [`TRACEFS_LIST`]), if any.
pub fn first_traceable<'n>(names: &[&'n str]) -> Result<Option<&'n str>, KernelFunctionError> {
    let listed = read_tracefs_list().map_err(KernelFunctionError::Unlisted)?;
    let traceable: BTreeSet<&str> = listed_names(&listed).collect();
    Ok(names.iter().copied().find(|name| traceable.contains(name)))
}

/// The function names of the text of `available_filter_functions` (each line's first word).
fn listed_names(listed: &str) -> impl Iterator<Item = &str> {
    listed
        .lines()
        .filter_map(|line| line.split_whitespace().next())
}

/// The text of the first tracefs's `available_filter_functions` that can be read.
fn read_tracefs_list() -> std::io::Result<String> {
    let mut error = None;
    for dir in TRACEFS {
        match std::fs::read_to_string(format!("{dir}/available_filter_functions")) {
            Ok(text) => return Ok(text),
            Err(e) => error = error.or(Some(e)),
        }
    }
    Err(error.expect("two places were tried"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requests(values: &[&str]) -> KernelFunctionRequests {
        let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        KernelFunctionRequests::parse(&values, None).unwrap()
    }

    const LISTED: &str = "vfs_read\nvfs_write\t0xffffffff81000000\nvfs_read\n\
                          nft_do_chain [nf_tables]\ntcp_sendmsg\n";
    /// The kernel's functions, as its BTF names them.
    const FUNCTIONS: [&str; 4] = ["vfs_read", "vfs_write", "vfs_caches_init", "rw_verify_area"];

    #[test]
    fn globs_match_the_traceable_functions_once_each() {
        let matched = requests(&["vfs_*,tcp_sendmsg"])
            .match_lists(LISTED, FUNCTIONS.into_iter())
            .unwrap();
        assert_eq!(matched.traceable, ["vfs_read", "vfs_write", "tcp_sendmsg"]);
        // A function the kernel cannot trace.
        assert_eq!(matched.untraceable, ["vfs_caches_init"]);
    }

    #[test]
    fn a_glob_matching_nothing_traceable_is_refused() {
        let error = requests(&["vfs_read", "nosuch*"])
            .match_lists(LISTED, FUNCTIONS.into_iter())
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "-k 'nosuch*': no kernel function matches (see /sys/kernel/tracing/available_filter_functions)"
        );
        let error = requests(&["vfs_caches_init"])
            .match_lists(LISTED, FUNCTIONS.into_iter())
            .unwrap_err();
        assert!(
            error.to_string().starts_with(
                "-k 'vfs_caches_init': the kernel cannot trace vfs_caches_init (notrace"
            ),
            "{error}"
        );
        // Beside one that can be traced, it is only said.
        let matched = requests(&["vfs_caches_init,vfs_read"])
            .match_lists(LISTED, FUNCTIONS.into_iter())
            .unwrap();
        assert_eq!(matched.traceable, ["vfs_read"]);
        assert_eq!(matched.untraceable, ["vfs_caches_init"]);
    }

    #[test]
    fn depth_counts_from_one() {
        assert!(KernelFunctionRequests::parse(&[], Some(0)).is_err());
        let values = ["vfs_read".to_owned()];
        let parsed = KernelFunctionRequests::parse(&values, Some(2)).unwrap();
        assert_eq!(parsed.depth, 2);
    }
}
