//! Which values each kernel function (`-k`) captures: `-A` and `-R` by name, as for user
//! functions, an item without a format typed by the kernel's BTF; under `-a`, every parameter
//! BTF gives, named, and the return value. A kprobe reads registers: an argument past the sixth,
//! or past a parameter no single register holds, is not captured (one warning per item).

use std::collections::{BTreeMap, HashSet};

use super::kernel_prototypes::{kernel_prototypes, KernelPrototype, KERNEL_REGISTER_ARGUMENTS};
use super::values::{prototype_specs, spec_of_kind, ValueRequests};
use super::ProbePlan;
use crate::value::{ValueSource, ValueSpec, VALUES_MAX};

/// What one kernel function captures.
#[derive(Debug, Default, PartialEq, Eq)]
struct KernelValues {
    specs: Vec<ValueSpec>,
    /// Its parameters' names, by argument number, when it captures an argument.
    argument_names: Vec<String>,
}

impl KernelValues {
    fn add(&mut self, spec: ValueSpec) {
        if self.specs.len() < VALUES_MAX && !self.specs.contains(&spec) {
            self.specs.push(spec);
        }
    }
}

/// Why an item is not captured on a kernel function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Skipped {
    BeyondParameters,
    OnTheStack,
    AfterUnreadable,
    Void,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Skipped::BeyondParameters => "beyond the parameters the kernel's BTF gives",
            Skipped::OnTheStack => "past the sixth argument (a kprobe reads argument registers)",
            Skipped::AfterUnreadable => {
                "at or after a parameter no single register holds (a struct passed by value)"
            }
            Skipped::Void => "the kernel's BTF says it returns nothing",
        })
    }
}

/// The values not captured as asked, said in warnings.
#[derive(Debug, Default)]
struct Refused {
    /// (the `-A`/`-R` text, the item, why) → the functions.
    skipped: BTreeMap<(String, String, Skipped), Vec<String>>,
    /// `-a` on functions the kernel's BTF does not describe.
    no_btf: Vec<String>,
    /// Functions whose entries capture the stacks (`--stack`): no arguments.
    stacked: Vec<String>,
}

/// Sets the values of `plan`'s kernel functions: none unless some `-A`/`-R` names one or `-a`.
pub(super) fn plan_kernel_values(requests: &ValueRequests, plan: &mut ProbePlan) {
    let ids: Vec<usize> = (plan.events.kernel_functions.iter())
        .map(|k| k.function as usize)
        .collect();
    let functions = &plan.table.functions;
    let names: HashSet<&str> = ids.iter().map(|&id| functions[id].name.as_str()).collect();
    let asked = |name: &&str| requests.requests.iter().any(|r| r.functions.matches(name));
    if ids.is_empty() || !(requests.auto || names.iter().any(asked)) {
        return;
    }
    let prototypes = kernel_prototypes(&names);
    let mut refused = Refused::default();
    for id in ids {
        let function = &mut plan.table.functions[id];
        let prototype = prototypes.get(&function.name);
        let values = kernel_values(
            requests,
            &function.name,
            function.user_stack,
            prototype,
            &mut refused,
        );
        function.values = values.specs;
        function.argument_names = values.argument_names;
    }
    refused.warn();
}

/// The values of kernel function `name` (whose entries capture the stacks when `stacked`) that
/// `requests` ask for, typed and named by its `prototype` where BTF gives it.
fn kernel_values(
    requests: &ValueRequests,
    name: &str,
    stacked: bool,
    prototype: Option<&KernelPrototype>,
    refused: &mut Refused,
) -> KernelValues {
    let mut values = KernelValues::default();
    let asking = requests
        .requests
        .iter()
        .filter(|r| r.functions.matches(name));
    for request in asking {
        for (&spec, &formatted) in request.specs.iter().zip(&request.formatted) {
            match typed(spec, formatted, prototype, requests.string_size) {
                Ok(spec) => values.add(spec),
                Err(why) => {
                    let key = (request.text.clone(), spec.to_string(), why);
                    refused
                        .skipped
                        .entry(key)
                        .or_default()
                        .push(name.to_owned());
                }
            }
        }
    }
    if requests.auto {
        match prototype {
            Some(prototype) => prototype_specs(&prototype.prototype, requests.string_size)
                .for_each(|spec| values.add(spec)),
            None => refused.no_btf.push(name.to_owned()),
        }
    }
    let is_argument = |spec: &ValueSpec| matches!(spec.source, ValueSource::Argument(_));
    if stacked && values.specs.iter().any(is_argument) {
        // Such an entry's record holds the stacks' id (kernel_functions.bpf.h).
        values.specs.retain(|spec| !is_argument(spec));
        refused.stacked.push(name.to_owned());
    }
    if let (Some(prototype), true) = (prototype, values.specs.iter().any(is_argument)) {
        values.argument_names = prototype.names.clone();
    }
    values
}

/// `spec` as a kernel function with `prototype` captures it: with the type BTF gives where the
/// item named no format (`formatted`), or why it is not captured.
fn typed(
    spec: ValueSpec,
    formatted: bool,
    prototype: Option<&KernelPrototype>,
    string_size: u16,
) -> Result<ValueSpec, Skipped> {
    let kind = match (spec.source, prototype) {
        (ValueSource::Argument(number), _) => {
            let index = usize::from(number) - 1;
            if prototype.is_some_and(|p| index >= p.parameter_count) {
                return Err(Skipped::BeyondParameters);
            }
            if index >= KERNEL_REGISTER_ARGUMENTS {
                return Err(Skipped::OnTheStack);
            }
            let parameters = prototype.map(|p| &p.prototype.parameters);
            match parameters.map(|parameters| parameters.get(index)) {
                Some(None) => return Err(Skipped::AfterUnreadable),
                Some(Some(&kind)) => Some(kind),
                None => None,
            }
        }
        (ValueSource::Return, Some(prototype)) => {
            Some(prototype.prototype.returns.ok_or(Skipped::Void)?)
        }
        (ValueSource::Return, None) => None,
    };
    Ok(match (kind, formatted) {
        (Some(kind), false) => spec_of_kind(spec.source, kind, string_size),
        _ => spec,
    })
}

impl Refused {
    fn warn(&self) {
        for ((text, item, why), functions) in &self.skipped {
            log::warn!(
                "{text}: {item} is not captured on {}: {why}",
                listed("kernel function", functions)
            );
        }
        if !self.no_btf.is_empty() {
            log::warn!(
                "-a: the kernel's BTF (/sys/kernel/btf/vmlinux) describes no {}: their values \
                 are not captured",
                listed("kernel function", &self.no_btf)
            );
        }
        if !self.stacked.is_empty() {
            log::warn!(
                "the arguments of {} are not captured: --stack captures the stacks at their \
                 entries instead",
                listed("kernel function", &self.stacked)
            );
        }
    }
}

/// `kernel function vfs_write`, `3 kernel functions (a, b, c)`: at most five named.
fn listed(what: &str, names: &[String]) -> String {
    const SHOWN: usize = 5;
    if let [name] = names {
        return format!("{what} {name}");
    }
    let mut shown: Vec<&str> = names.iter().take(SHOWN).map(String::as_str).collect();
    if names.len() > SHOWN {
        shown.push("…");
    }
    format!("{} {what}s ({})", names.len(), shown.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    use crate::elf::prototypes::{Prototype, ValueKind};

    /// The prototypes of the kernel functions the tests use, as BTF gives them.
    fn test_prototypes() -> HashMap<String, KernelPrototype> {
        let vfs_write = KernelPrototype {
            prototype: Prototype {
                parameters: vec![
                    ValueKind::Pointer,
                    ValueKind::CString,
                    ValueKind::Unsigned { bits: 64 },
                    ValueKind::Pointer,
                ],
                returns: Some(ValueKind::Signed { bits: 64 }),
            },
            names: ["file", "buf", "count", "pos"].map(String::from).to_vec(),
            parameter_count: 4,
        };
        // A struct by value second: only the first is read.
        let by_value = KernelPrototype {
            prototype: Prototype {
                parameters: vec![ValueKind::Signed { bits: 32 }],
                returns: None,
            },
            names: vec!["fd".to_owned()],
            parameter_count: 3,
        };
        HashMap::from([
            ("vfs_write".to_owned(), vfs_write),
            ("by_value".to_owned(), by_value),
        ])
    }

    fn requests(arguments: &[&str], retvals: &[&str], auto: bool) -> ValueRequests {
        let own = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        ValueRequests::parse(&own(arguments), &own(retvals), auto, 64).unwrap()
    }

    /// The values of vfs_write (with the stacks when `stacked`) `requests` ask for.
    fn vfs_write(requests: &ValueRequests, stacked: bool, refused: &mut Refused) -> KernelValues {
        let prototypes = test_prototypes();
        let prototype = prototypes.get("vfs_write");
        kernel_values(requests, "vfs_write", stacked, prototype, refused)
    }

    fn texts(values: &KernelValues) -> Vec<String> {
        values.specs.iter().map(ValueSpec::to_string).collect()
    }

    #[test]
    fn items_without_a_format_take_the_btf_type() {
        let requests = requests(&["vfs_*@arg3,arg1/x"], &["vfs_write@retval/x"], false);
        let mut refused = Refused::default();
        let values = vfs_write(&requests, false, &mut refused);
        assert_eq!(texts(&values), ["arg3/u", "arg1/x", "retval/x"]);
        assert_eq!(values.argument_names, ["file", "buf", "count", "pos"]);
        // Without BTF, as given.
        let values = kernel_values(&requests, "vfs_read", false, None, &mut refused);
        assert_eq!(texts(&values), ["arg3", "arg1/x"]);
        assert!(values.argument_names.is_empty());
        assert!(refused.skipped.is_empty() && refused.no_btf.is_empty());
    }

    #[test]
    fn auto_args_give_every_readable_parameter_and_the_return_value() {
        let requests = requests(&["vfs_write@arg3"], &[], true);
        let mut refused = Refused::default();
        let values = vfs_write(&requests, false, &mut refused);
        // arg3 once: as -A typed it, so -a does.
        assert_eq!(
            texts(&values),
            ["arg3/u", "arg1/p", "arg2/s", "arg4/p", "retval"]
        );
        let values = kernel_values(&requests, "nobtf", false, None, &mut refused);
        assert!(values.specs.is_empty());
        assert_eq!(refused.no_btf, ["nobtf"]);
        // --stack: the return value alone.
        let values = vfs_write(&requests, true, &mut refused);
        assert_eq!(texts(&values), ["retval"]);
        assert!(values.argument_names.is_empty());
        assert_eq!(refused.stacked, ["vfs_write"]);
    }

    #[test]
    fn items_a_kprobe_cannot_read_are_refused_with_why() {
        let prototypes = test_prototypes();
        let requests = requests(&["*@arg2,arg5,arg9,arg1"], &["by_value@retval"], false);
        let mut refused = Refused::default();
        let write = prototypes.get("vfs_write");
        let values = kernel_values(&requests, "vfs_write", false, write, &mut refused);
        assert_eq!(texts(&values), ["arg2/s", "arg1/p"]);
        let values = kernel_values(
            &requests,
            "by_value",
            false,
            prototypes.get("by_value"),
            &mut refused,
        );
        assert_eq!(texts(&values), ["arg1/32"]);
        // Without BTF: up to the sixth.
        let values = kernel_values(&requests, "nobtf", false, None, &mut refused);
        assert_eq!(texts(&values), ["arg2", "arg5", "arg1"]);
        let whys: Vec<(&str, Skipped, Vec<String>)> = (refused.skipped.iter())
            .map(|((_, item, why), functions)| (item.as_str(), *why, functions.clone()))
            .collect();
        let own = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(
            whys,
            [
                ("arg2", Skipped::AfterUnreadable, own(&["by_value"])),
                (
                    "arg5",
                    Skipped::BeyondParameters,
                    own(&["vfs_write", "by_value"])
                ),
                (
                    "arg9",
                    Skipped::BeyondParameters,
                    own(&["vfs_write", "by_value"])
                ),
                ("arg9", Skipped::OnTheStack, own(&["nobtf"])),
                ("retval", Skipped::Void, own(&["by_value"])),
            ]
        );
        assert_eq!(
            listed("kernel function", &own(&["a", "b"])),
            "2 kernel functions (a, b)"
        );
    }
}
