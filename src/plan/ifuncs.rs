//! Which implementation each ifunc of a library resolves to in the traced process, so that a PLT
//! call into an ifunc (`memcmp@plt`) can be probed where it lands, like any other (see
//! [`super::landings`]).
//!
//! An ifunc's resolver picks an implementation for the CPU (`__memcmp_avx2_movbe`) when the
//! loader binds the symbol. The recorder runs on the same machine, and maps libc itself: its own
//! loader, asked (`dlsym`), gives the resolver's choice, which is the traced process's when both
//! run the very same build of the library (the same GNU build id: the same code, so the same
//! addresses) and nothing in the environment steers one of them otherwise (`GLIBC_TUNABLES` can
//! mask CPU features). The recorder gathers the facts ([`crate::record`]); what they allow is
//! decided here, without I/O.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The implementations a library's ifuncs resolve to, as the recorder's own loader chose them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedIfuncs {
    /// The library as the recorder maps it (for messages).
    pub path: PathBuf,
    /// Its GNU build id: the traced program's library must be this very build.
    pub build_id: Vec<u8>,
    /// By symbol name (as `.dynsym` spells it; the default version), the virtual address in the
    /// file of the implementation it resolves to.
    pub implementations: HashMap<String, u64>,
}

/// What utrace knows of the traced process's ifunc choices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IfuncChoices {
    /// Those of the libraries the recorder maps, valid for the traced process wherever it maps
    /// the same build.
    Known(Vec<ResolvedIfuncs>),
    /// None: PLT calls into ifuncs keep their stub.
    Unknown(IfuncsUnknown),
}

impl Default for IfuncChoices {
    fn default() -> IfuncChoices {
        IfuncChoices::Unknown(IfuncsUnknown::NotAsked)
    }
}

/// Why utrace does not know which implementations the traced process's ifuncs resolve to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IfuncsUnknown {
    #[error("utrace did not ask its own loader")]
    NotAsked,
    #[error(
        "GLIBC_TUNABLES is set for the traced process, and may make its loader choose otherwise \
         than utrace's"
    )]
    TargetTunables,
    #[error(
        "GLIBC_TUNABLES is set for utrace, and may have made its loader choose otherwise than \
         the traced process's"
    )]
    RecorderTunables,
    #[error("the traced process's environment cannot be read: {0}")]
    EnvironmentUnreadable(String),
    #[error("utrace itself maps no libc.so.6 to ask")]
    NoLibc,
    #[error("utrace cannot read its own {0}")]
    OwnLibraryUnreadable(String),
}

/// Why a PLT call into an ifunc keeps its stub, though the library is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IfuncNotFollowed {
    /// utrace knows no choice at all (see [`IfuncsUnknown`]).
    Unknown,
    /// utrace maps another build of the library, whose choices say nothing of this one.
    OtherBuild,
    /// utrace does not map the library, or its loader did not resolve the name into it.
    NotResolved,
}

impl IfuncChoices {
    /// What the recorder found (`resolved`, its own libraries' ifuncs as its loader chose
    /// them), judged against the `GLIBC_TUNABLES` of the traced process (`Err` when its
    /// environment cannot be read) and of the recorder.
    pub fn judge(
        target_tunables: Result<Option<String>, String>,
        recorder_tunables: Option<String>,
        resolved: Result<Vec<ResolvedIfuncs>, IfuncsUnknown>,
    ) -> IfuncChoices {
        let set = |value: &Option<String>| value.as_deref().is_some_and(|v| !v.is_empty());
        let known = match target_tunables {
            Err(why) => Err(IfuncsUnknown::EnvironmentUnreadable(why)),
            Ok(target) if set(&target) => Err(IfuncsUnknown::TargetTunables),
            Ok(_) if set(&recorder_tunables) => Err(IfuncsUnknown::RecorderTunables),
            Ok(_) => resolved,
        };
        match known {
            Ok(libraries) => IfuncChoices::Known(libraries),
            Err(why) => IfuncChoices::Unknown(why),
        }
    }

    /// The virtual address (in the library's file) of the implementation that the ifunc
    /// `symbol` of the library at `path`, whose build id is `build_id`, resolves to in the traced
    /// process.
    pub fn implementation(
        &self,
        path: &Path,
        build_id: Option<&[u8]>,
        symbol: &str,
    ) -> Result<u64, IfuncNotFollowed> {
        let IfuncChoices::Known(libraries) = self else {
            return Err(IfuncNotFollowed::Unknown);
        };
        let same_build = libraries
            .iter()
            .find(|l| build_id.is_some_and(|id| l.build_id == id));
        let Some(library) = same_build else {
            let same_name = libraries
                .iter()
                .any(|l| l.path.file_name() == path.file_name());
            return Err(match same_name {
                true => IfuncNotFollowed::OtherBuild,
                false => IfuncNotFollowed::NotResolved,
            });
        };
        let address = library.implementations.get(symbol);
        address.copied().ok_or(IfuncNotFollowed::NotResolved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";

    fn libc(build_id: &[u8]) -> ResolvedIfuncs {
        ResolvedIfuncs {
            path: PathBuf::from(LIBC),
            build_id: build_id.to_vec(),
            implementations: HashMap::from([("memcmp".to_owned(), 0x152320)]),
        }
    }

    #[test]
    fn choices_are_known_only_without_tunables_on_either_side() {
        let resolved = || Ok(vec![libc(b"same")]);
        let known = IfuncChoices::judge(Ok(None), None, resolved());
        assert_eq!(known, IfuncChoices::Known(vec![libc(b"same")]));
        // An empty variable steers nothing.
        let empty = IfuncChoices::judge(Ok(Some(String::new())), None, resolved());
        assert_eq!(empty, known);

        let tunables = "glibc.cpu.hwcaps=-AVX2".to_owned();
        let cases = [
            (
                Ok(Some(tunables.clone())),
                None,
                IfuncsUnknown::TargetTunables,
            ),
            (
                Ok(None),
                Some(tunables.clone()),
                IfuncsUnknown::RecorderTunables,
            ),
            (
                Ok(Some(tunables.clone())),
                Some(tunables),
                IfuncsUnknown::TargetTunables,
            ),
            (
                Err("permission denied".to_owned()),
                None,
                IfuncsUnknown::EnvironmentUnreadable("permission denied".to_owned()),
            ),
        ];
        for (target, recorder, why) in cases {
            let judged = IfuncChoices::judge(target, recorder, resolved());
            assert_eq!(judged, IfuncChoices::Unknown(why.clone()), "{why}");
            assert_eq!(
                judged.implementation(Path::new(LIBC), Some(b"same"), "memcmp"),
                Err(IfuncNotFollowed::Unknown)
            );
        }
        // What the recorder could not find stays the reason.
        let unresolved = IfuncChoices::judge(Ok(None), None, Err(IfuncsUnknown::NoLibc));
        assert_eq!(unresolved, IfuncChoices::Unknown(IfuncsUnknown::NoLibc));
    }

    #[test]
    fn only_the_same_build_of_the_library_takes_the_choice() {
        let choices = IfuncChoices::Known(vec![libc(b"utrace's libc")]);
        let implementation =
            |path: &str, id: Option<&[u8]>, name| choices.implementation(Path::new(path), id, name);
        // The same build, wherever the program finds it (another path to the same file).
        assert_eq!(
            implementation(
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
                Some(b"utrace's libc"),
                "memcmp"
            ),
            Ok(0x152320)
        );
        // Another libc (another build id, or none to compare): the addresses say nothing.
        let own_libc = "/opt/glibc/lib/libc.so.6";
        assert_eq!(
            implementation(own_libc, Some(b"the program's own libc"), "memcmp"),
            Err(IfuncNotFollowed::OtherBuild)
        );
        assert_eq!(
            implementation(own_libc, None, "memcmp"),
            Err(IfuncNotFollowed::OtherBuild)
        );
        // A library utrace does not map, or a name its loader did not resolve there.
        assert_eq!(
            implementation("/usr/lib/libifuncs.so", Some(b"theirs"), "memcmp"),
            Err(IfuncNotFollowed::NotResolved)
        );
        assert_eq!(
            implementation(LIBC, Some(b"utrace's libc"), "strlen"),
            Err(IfuncNotFollowed::NotResolved)
        );
        assert_eq!(
            IfuncChoices::default().implementation(Path::new(LIBC), Some(b"x"), "memcmp"),
            Err(IfuncNotFollowed::Unknown)
        );
    }
}
