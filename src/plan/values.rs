//! Which values each function's probes capture: `-A/--argument` and `-R/--retval` specs by
//! function glob, and `-a/--auto-args`, the prototypes of common libc functions and those a
//! traced file's DWARF declares.

use std::collections::HashMap;

use crate::elf::prototypes::{Prototype, ValueKind};
use crate::elf::{ElfFile, FunctionSymbol, SiteKind};
use crate::filter::{Glob, GlobError};
use crate::value::{SpecError, ValueFormat, ValueSource, ValueSpec, STRING_SIZE_DEFAULT};
use crate::value::{STRING_SIZE_MAX, VALUES_MAX};

/// The values asked for, by function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueRequests {
    /// `-A` and `-R` specs in the order given.
    pub requests: Vec<ValueRequest>,
    /// `-a`: the known prototypes too.
    pub auto: bool,
    /// The most bytes of a string read (`--string-size`).
    pub string_size: u16,
    /// `--stack`: the functions whose entry also captures the user stack.
    pub user_stacks: Vec<Glob>,
}

impl Default for ValueRequests {
    fn default() -> Self {
        ValueRequests {
            requests: Vec::new(),
            auto: false,
            string_size: STRING_SIZE_DEFAULT,
            user_stacks: Vec::new(),
        }
    }
}

/// One `-A` or `-R`: the functions it names and what to capture of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueRequest {
    /// The flag and value as given, for messages.
    pub text: String,
    pub functions: Glob,
    pub specs: Vec<ValueSpec>,
    /// Per spec, whether its item named a format (`arg3/u`): one without takes its type from
    /// the kernel's BTF on a kernel function.
    pub formatted: Vec<bool>,
}

/// A `-A`/`-R` value that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum ValueRequestError {
    #[error("{flag} '{text}': expected FUNCTION@ITEM[,ITEM...], such as 'add@arg1,arg2/x'")]
    NoItems { flag: &'static str, text: String },
    #[error("{flag} '{text}': {source}")]
    Spec {
        flag: &'static str,
        text: String,
        source: SpecError,
    },
    #[error("{flag} '{text}': {source}")]
    Glob {
        flag: &'static str,
        text: String,
        source: GlobError,
    },
    #[error("{flag} '{text}': at most {VALUES_MAX} values per function")]
    TooMany { flag: &'static str, text: String },
    #[error("--string-size {0}: give a number of bytes from 1 to {STRING_SIZE_MAX}")]
    StringSize(u64),
}

impl ValueRequests {
    /// Parses `-A` values (`arguments`) and `-R` values (`retvals`), each `GLOB@ITEM[,ITEM...]`
    /// (the last `@` separates them: `write@plt@arg1`).
    pub fn parse(
        arguments: &[String],
        retvals: &[String],
        auto: bool,
        string_size: u64,
    ) -> Result<ValueRequests, ValueRequestError> {
        let string_size = match u16::try_from(string_size) {
            Ok(size) if (1..=STRING_SIZE_MAX).contains(&size) => size,
            _ => return Err(ValueRequestError::StringSize(string_size)),
        };
        let flags = arguments
            .iter()
            .map(|text| ("-A", text, false))
            .chain(retvals.iter().map(|text| ("-R", text, true)));
        let requests = flags
            .map(|(flag, text, retval)| parse_request(flag, text, retval, string_size))
            .collect::<Result<_, _>>()?;
        Ok(ValueRequests {
            requests,
            auto,
            string_size,
            user_stacks: Vec::new(),
        })
    }

    /// Whether `function`'s entry captures the user stack (`--stack`).
    pub fn captures_user_stack(&self, function: &FunctionSymbol) -> bool {
        self.user_stacks
            .iter()
            .any(|glob| glob.matches(&function.name))
    }

    /// Whether any value may be captured.
    pub fn any(&self) -> bool {
        self.auto || !self.requests.is_empty()
    }

    /// The specs of `function` (named as reports name it), at most [`VALUES_MAX`]: those asked
    /// for by name, then, under `-a`, its known prototype's or the one `prototypes` (from DWARF,
    /// by address) gives.
    pub fn specs_for(
        &self,
        function: &FunctionSymbol,
        prototypes: &HashMap<u64, Prototype>,
    ) -> Vec<ValueSpec> {
        let mut specs: Vec<ValueSpec> = Vec::new();
        let mut add = |spec: ValueSpec| {
            if specs.len() < VALUES_MAX && !specs.contains(&spec) {
                specs.push(spec);
            }
        };
        for request in &self.requests {
            if request.functions.matches(&function.name) {
                request.specs.iter().copied().for_each(&mut add);
            }
        }
        if self.auto {
            let name = function.name.strip_suffix("@plt").unwrap_or(&function.name);
            match known_prototype(name) {
                Some((arguments, retval)) => {
                    let items = arguments.split(',').chain(retval).filter(|i| !i.is_empty());
                    items
                        .map(|item| {
                            ValueSpec::parse(item, self.string_size)
                                .expect("the known prototypes parse")
                        })
                        .for_each(&mut add);
                }
                None => {
                    if let Some(prototype) = prototypes.get(&function.address) {
                        prototype_specs(prototype, self.string_size).for_each(&mut add);
                    }
                }
            }
        }
        specs
    }
}

fn parse_request(
    flag: &'static str,
    text: &str,
    retval: bool,
    string_size: u16,
) -> Result<ValueRequest, ValueRequestError> {
    let no_items = || ValueRequestError::NoItems {
        flag,
        text: text.to_owned(),
    };
    let (functions, items) = text.rsplit_once('@').ok_or_else(no_items)?;
    if functions.is_empty() || items.is_empty() {
        return Err(no_items());
    }
    let spec_error = |source| ValueRequestError::Spec {
        flag,
        text: text.to_owned(),
        source,
    };
    let (mut specs, mut formatted) = (Vec::new(), Vec::new());
    for item in items.split(',') {
        formatted.push(item.contains('/'));
        let spec = ValueSpec::parse(item, string_size).map_err(spec_error)?;
        match (spec.source, retval) {
            (ValueSource::Return, false) => {
                return Err(spec_error(SpecError::ReturnInArguments(item.to_owned())))
            }
            (ValueSource::Argument(_), true) => {
                return Err(spec_error(SpecError::ArgumentInReturn(item.to_owned())))
            }
            _ => specs.push(spec),
        }
    }
    if specs.len() > VALUES_MAX {
        return Err(ValueRequestError::TooMany {
            flag,
            text: text.to_owned(),
        });
    }
    let functions = Glob::new(functions).map_err(|source| ValueRequestError::Glob {
        flag,
        text: text.to_owned(),
        source,
    })?;
    Ok(ValueRequest {
        text: format!("{flag} '{text}'"),
        functions,
        specs,
        formatted,
    })
}

/// The values `-a` captures of common libc functions: (name, arguments, return value).
const KNOWN_PROTOTYPES: &[(&str, &str, Option<&str>)] = &[
    ("open", "arg1/s,arg2/x", Some("retval")),
    ("open64", "arg1/s,arg2/x", Some("retval")),
    ("openat", "arg1,arg2/s,arg3/x", Some("retval")),
    ("openat64", "arg1,arg2/s,arg3/x", Some("retval")),
    ("creat", "arg1/s,arg2/x", Some("retval")),
    ("read", "arg1,arg2/p,arg3/u", Some("retval")),
    ("write", "arg1,arg2/p,arg3/u", Some("retval")),
    ("pread64", "arg1,arg2/p,arg3/u,arg4", Some("retval")),
    ("pwrite64", "arg1,arg2/p,arg3/u,arg4", Some("retval")),
    ("close", "arg1", Some("retval")),
    ("malloc", "arg1/u", Some("retval/p")),
    ("calloc", "arg1/u,arg2/u", Some("retval/p")),
    ("realloc", "arg1/p,arg2/u", Some("retval/p")),
    ("free", "arg1/p", None),
    ("strlen", "arg1/s", Some("retval/u")),
    ("strcmp", "arg1/s,arg2/s", Some("retval/32")),
    ("strncmp", "arg1/s,arg2/s,arg3/u", Some("retval/32")),
    ("strcpy", "arg1/p,arg2/s", Some("retval/p")),
    ("strdup", "arg1/s", Some("retval/p")),
    ("memcpy", "arg1/p,arg2/p,arg3/u", Some("retval/p")),
    ("memmove", "arg1/p,arg2/p,arg3/u", Some("retval/p")),
    ("memset", "arg1/p,arg2/32,arg3/u", Some("retval/p")),
    ("memcmp", "arg1/p,arg2/p,arg3/u", Some("retval/32")),
    ("fopen", "arg1/s,arg2/s", Some("retval/p")),
    ("fopen64", "arg1/s,arg2/s", Some("retval/p")),
    ("fclose", "arg1/p", Some("retval/32")),
    ("fread", "arg1/p,arg2/u,arg3/u,arg4/p", Some("retval/u")),
    ("fwrite", "arg1/p,arg2/u,arg3/u,arg4/p", Some("retval/u")),
    ("puts", "arg1/s", Some("retval/32")),
    ("getenv", "arg1/s", Some("retval/s")),
    ("setenv", "arg1/s,arg2/s,arg3/32", Some("retval/32")),
    ("unlink", "arg1/s", Some("retval/32")),
    ("mkdir", "arg1/s,arg2/x32", Some("retval/32")),
    ("stat", "arg1/s,arg2/p", Some("retval/32")),
    ("access", "arg1/s,arg2/32", Some("retval/32")),
    ("chdir", "arg1/s", Some("retval/32")),
    ("socket", "arg1/32,arg2/32,arg3/32", Some("retval/32")),
    ("connect", "arg1/32,arg2/p,arg3/u32", Some("retval/32")),
    ("bind", "arg1/32,arg2/p,arg3/u32", Some("retval/32")),
    ("listen", "arg1/32,arg2/32", Some("retval/32")),
    ("accept", "arg1/32,arg2/p,arg3/p", Some("retval/32")),
    ("send", "arg1/32,arg2/p,arg3/u,arg4/x32", Some("retval")),
    ("recv", "arg1/32,arg2/p,arg3/u,arg4/x32", Some("retval")),
    (
        "mmap",
        "arg1/p,arg2/u,arg3/x32,arg4/x32,arg5/32,arg6",
        Some("retval/p"),
    ),
    ("munmap", "arg1/p,arg2/u", Some("retval/32")),
    ("dlopen", "arg1/s,arg2/x32", Some("retval/p")),
    ("dlsym", "arg1/p,arg2/s", Some("retval/p")),
    ("exit", "arg1/32", None),
    ("_exit", "arg1/32", None),
    ("abort", "", None),
    ("sleep", "arg1/u32", Some("retval/u32")),
    ("usleep", "arg1/u32", Some("retval/32")),
    ("atoi", "arg1/s", Some("retval/32")),
    ("strtol", "arg1/s,arg2/p,arg3/32", Some("retval")),
    ("fork", "", Some("retval/32")),
    ("execve", "arg1/s,arg2/p,arg3/p", Some("retval/32")),
    ("system", "arg1/s", Some("retval/32")),
    (
        "pthread_create",
        "arg1/p,arg2/p,arg3/p,arg4/p",
        Some("retval/32"),
    ),
    ("pthread_join", "arg1/x,arg2/p", Some("retval/32")),
    ("pthread_mutex_lock", "arg1/p", Some("retval/32")),
    ("pthread_mutex_unlock", "arg1/p", Some("retval/32")),
];

/// The arguments and return value `-a` captures of the libc function `name`, if it knows it.
fn known_prototype(name: &str) -> Option<(&'static str, Option<&'static str>)> {
    let name = name.split_once('@').map_or(name, |(base, _)| base);
    KNOWN_PROTOTYPES
        .iter()
        .find(|(known, ..)| *known == name)
        .map(|&(_, arguments, retval)| (arguments, retval))
}

/// The spec of a value of `kind` from `source`.
pub(super) fn spec_of_kind(source: ValueSource, kind: ValueKind, string_size: u16) -> ValueSpec {
    let (format, bits) = match kind {
        ValueKind::Signed { bits } => (ValueFormat::Signed, bits),
        ValueKind::Unsigned { bits } => (ValueFormat::Unsigned, bits),
        ValueKind::Char => (ValueFormat::Char, 8),
        ValueKind::CString => (ValueFormat::String { max: string_size }, 64),
        ValueKind::Pointer => (ValueFormat::Pointer, 64),
    };
    ValueSpec {
        source,
        format,
        bits,
    }
}

/// The specs a prototype (from DWARF or BTF) gives: every parameter, and the return value.
pub(super) fn prototype_specs(
    prototype: &Prototype,
    string_size: u16,
) -> impl Iterator<Item = ValueSpec> + '_ {
    let spec = move |source, kind| spec_of_kind(source, kind, string_size);
    let parameters = prototype.parameters.iter().enumerate();
    parameters
        .filter_map(move |(i, &kind)| {
            let number = u8::try_from(i + 1).ok()?;
            Some(spec(ValueSource::Argument(number), kind))
        })
        .chain(
            prototype
                .returns
                .map(|kind| spec(ValueSource::Return, kind)),
        )
}

/// Why a function's values are not all captured as asked.
#[derive(Debug, Default)]
pub(super) struct Refused {
    /// Functions of a Go program: Go passes arguments in registers of its own ABI.
    pub go: Vec<String>,
    /// Functions whose probe site is past instructions that may change the arguments.
    pub moved_site: Vec<String>,
}

/// The specs of each of `functions` of `elf`, with the arguments left out where the probe
/// cannot see them as the function received them (noted in `refused`).
pub(super) fn plan_values(
    requests: &ValueRequests,
    elf: &ElfFile,
    functions: &[FunctionSymbol],
    refused: &mut Refused,
) -> Vec<Vec<ValueSpec>> {
    if !requests.any() {
        return vec![Vec::new(); functions.len()];
    }
    let prototypes = match requests.auto {
        true => elf.prototypes(),
        false => HashMap::new(),
    };
    let is_go = elf.is_go();
    functions
        .iter()
        .map(|function| {
            let mut specs = requests.specs_for(function, &prototypes);
            if specs.is_empty() {
                return specs;
            }
            if is_go {
                refused.go.push(function.name.clone());
                return Vec::new();
            }
            // Past endbr64 the registers are as they were at the entry; past straight-line
            // instructions, all but the argument registers they write; past a skipped
            // instruction that is not, they may not be.
            let changed = |source: ValueSource| match (function.site.kind, source) {
                (_, ValueSource::Return) => false,
                (SiteKind::Entry | SiteKind::AfterEndbr64, _) => false,
                (SiteKind::AfterStraightLine { changed_arguments }, ValueSource::Argument(n)) => {
                    (1..=6).contains(&n) && changed_arguments & (1 << (n - 1)) != 0
                }
                _ => true,
            };
            if specs.iter().any(|s| changed(s.source)) {
                refused.moved_site.push(function.name.clone());
                specs.retain(|s| !changed(s.source));
            }
            specs
        })
        .collect()
}

impl Refused {
    /// Warns of the functions whose values are not captured.
    pub fn warn(&self) {
        const SHOWN: usize = 5;
        let names = |list: &[String]| {
            let mut shown: Vec<&str> = list.iter().take(SHOWN).map(String::as_str).collect();
            if list.len() > SHOWN {
                shown.push("…");
            }
            shown.join(", ")
        };
        if !self.go.is_empty() {
            log::warn!(
                "values of Go functions are not captured (Go passes them in registers of its \
                 own ABI): {}",
                names(&self.go)
            );
        }
        if !self.moved_site.is_empty() {
            log::warn!(
                "arguments of {} functions are not captured: their probe sits past \
                 instructions that may change them (one the kernel cannot probe, or register \
                 arithmetic that writes them): {}",
                self.moved_site.len(),
                names(&self.moved_site)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(arguments: &[&str], retvals: &[&str]) -> Result<ValueRequests, String> {
        let own = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        ValueRequests::parse(&own(arguments), &own(retvals), false, 64).map_err(|e| e.to_string())
    }

    #[test]
    fn requests_split_at_the_last_at_sign() {
        let requests = parse(&["write@plt@arg1,arg3/u"], &["add@retval/x32"]).unwrap();
        assert_eq!(requests.requests[0].functions.as_str(), "write@plt");
        assert_eq!(requests.requests[0].specs.len(), 2);
        assert_eq!(requests.requests[1].specs[0].to_string(), "retval/x32");
        assert_eq!(requests.requests[1].text, "-R 'add@retval/x32'");
    }

    #[test]
    fn bad_requests_name_the_flag_and_the_value() {
        assert_eq!(
            parse(&["add"], &[]).unwrap_err(),
            "-A 'add': expected FUNCTION@ITEM[,ITEM...], such as 'add@arg1,arg2/x'"
        );
        assert_eq!(
            parse(&["add@retval"], &[]).unwrap_err(),
            "-A 'add@retval': `retval` is a return value: use it with -R/--retval"
        );
        assert_eq!(
            parse(&[], &["add@arg1"]).unwrap_err(),
            "-R 'add@arg1': `arg1` is an argument: use it with -A/--argument"
        );
        assert!(parse(&["add@arg1/z"], &[])
            .unwrap_err()
            .contains("unknown format `z`"));
        let seventeen: Vec<String> = (1..=17).map(|n| format!("arg{n}")).collect();
        assert!(parse(&[&format!("a@{}", seventeen.join(","))], &[])
            .unwrap_err()
            .contains("at most 16 values"));
        let own = |s: &str| vec![s.to_owned()];
        assert_eq!(
            ValueRequests::parse(&own("a@arg1"), &[], false, 0)
                .unwrap_err()
                .to_string(),
            "--string-size 0: give a number of bytes from 1 to 500"
        );
    }

    #[test]
    fn every_known_prototype_parses() {
        for (name, arguments, retval) in KNOWN_PROTOTYPES {
            for item in arguments
                .split(',')
                .chain(*retval)
                .filter(|i| !i.is_empty())
            {
                assert!(ValueSpec::parse(item, 64).is_ok(), "{name}: {item}");
            }
        }
        assert_eq!(
            known_prototype("open@GLIBC_2.2.5").unwrap().0,
            "arg1/s,arg2/x"
        );
    }
}
