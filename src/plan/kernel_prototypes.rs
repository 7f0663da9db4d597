//! The prototypes of kernel functions (`-k`) from the kernel's BTF (`/sys/kernel/btf/vmlinux`):
//! what `-a` captures of each, with its parameters' names, and the types `-A` items without a
//! format take.
//!
//! Only the parameters a kprobe's registers hold as the System V ABI passes them: the first six,
//! up to the first that is not an integer, an enum or a pointer (a struct passed by value may
//! take two registers, or the stack, and moves the ones after it).

use std::collections::{HashMap, HashSet};

use libbpf_rs::btf::types::{Enum, Enum64, Func, FuncProto, Int, IntEncoding};
use libbpf_rs::btf::{Btf, BtfKind, BtfType, HasSize};

use crate::elf::prototypes::{Prototype, ValueKind};

/// The arguments a kprobe reads from registers (di, si, dx, cx, r8, r9).
pub const KERNEL_REGISTER_ARGUMENTS: usize = 6;

/// A kernel function's prototype, as far as its registers hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelPrototype {
    /// The kinds of its leading parameters that can be read, and their return value's.
    pub prototype: Prototype,
    /// The names of those parameters (empty where BTF has none).
    pub names: Vec<String>,
    /// How many parameters it has in all.
    pub parameter_count: usize,
}

/// The prototypes of `names` the kernel's BTF gives, by name; empty when it has no BTF (said
/// under `-d`).
pub fn kernel_prototypes(names: &HashSet<&str>) -> HashMap<String, KernelPrototype> {
    let btf = match Btf::from_vmlinux() {
        Ok(btf) => btf,
        Err(error) => {
            log::debug!("kernel functions: no BTF for their prototypes: {error}");
            return HashMap::new();
        }
    };
    let mut prototypes = HashMap::new();
    for function in btf.type_by_kind::<Func>() {
        let Some(name) = function.name().and_then(|name| name.to_str()) else {
            continue;
        };
        // A static function may have namesakes: the first is the one kept.
        if !names.contains(name) || prototypes.contains_key(name) {
            continue;
        }
        let proto = function
            .next_type()
            .and_then(|t| FuncProto::try_from(t).ok());
        if let Some(proto) = proto {
            prototypes.insert(name.to_owned(), prototype_of(&btf, &proto));
        }
    }
    prototypes
}

/// The readable part of the prototype `proto`.
fn prototype_of(btf: &Btf, proto: &FuncProto<'_>) -> KernelPrototype {
    let mut prototype = Prototype {
        parameters: Vec::new(),
        returns: proto.next_type().and_then(|t| value_kind(&t)),
    };
    let mut names = Vec::new();
    // A variadic function's last parameter has type 0 and no name.
    let types: Vec<Option<BtfType<'_>>> = proto
        .iter()
        .map(|parameter| match u32::from(parameter.ty) {
            0 => None,
            _ => btf.type_by_id::<BtfType>(parameter.ty),
        })
        .collect();
    let mut readable = true;
    for (index, parameter) in proto.iter().enumerate() {
        let mut kind = types[index].and_then(|ty| value_kind(&ty));
        // `const char *buf, size_t count`: a buffer and its length, not a string (vfs_write's).
        let sized = types
            .get(index + 1)
            .copied()
            .flatten()
            .is_some_and(is_size_t);
        if kind == Some(ValueKind::CString) && sized {
            kind = Some(ValueKind::Pointer);
        }
        readable &= kind.is_some() && prototype.parameters.len() < KERNEL_REGISTER_ARGUMENTS;
        if let (true, Some(kind)) = (readable, kind) {
            prototype.parameters.push(kind);
            let name = parameter.name.and_then(|n| n.to_str()).unwrap_or_default();
            names.push(name.to_owned());
        }
    }
    let parameter_count = types.len();
    KernelPrototype {
        prototype,
        names,
        parameter_count,
    }
}

/// How a value of BTF type `ty` is shown, when one register holds it: integers by their size
/// and sign, `const char *` as a string (in the kernel or in the process: BTF marks `__user`
/// only on some kernels, and the probe tells them apart by the address), any other pointer as an
/// address. None for `void` and what a register does not hold.
fn value_kind(ty: &BtfType<'_>) -> Option<ValueKind> {
    let ty = ty.skip_mods_and_typedefs();
    match ty.kind() {
        BtfKind::Int => {
            let int = Int::try_from(ty).ok()?;
            let bits = register_bits(int.size())?;
            Some(match int.encoding {
                IntEncoding::Signed if bits == 8 && is_char(&ty) => ValueKind::Char,
                IntEncoding::Signed => ValueKind::Signed { bits },
                IntEncoding::Char => ValueKind::Char,
                IntEncoding::None if bits == 8 && is_char(&ty) => ValueKind::Char,
                IntEncoding::None | IntEncoding::Bool => ValueKind::Unsigned { bits },
            })
        }
        BtfKind::Enum => {
            let e = Enum::try_from(ty).ok()?;
            integer_kind(register_bits(e.size())?, e.is_signed())
        }
        BtfKind::Enum64 => {
            let e = Enum64::try_from(ty).ok()?;
            integer_kind(register_bits(e.size())?, e.is_signed())
        }
        BtfKind::Ptr => Some(match points_to_const_char(&ty) {
            true => ValueKind::CString,
            false => ValueKind::Pointer,
        }),
        _ => None,
    }
}

fn integer_kind(bits: u8, signed: bool) -> Option<ValueKind> {
    Some(match signed {
        true => ValueKind::Signed { bits },
        false => ValueKind::Unsigned { bits },
    })
}

/// The bits of an integer of `bytes` that fits a register: 8, 16, 32 or 64.
fn register_bits(bytes: usize) -> Option<u8> {
    matches!(bytes, 1 | 2 | 4 | 8).then(|| (bytes * 8) as u8)
}

/// Whether `ty` is `size_t` (through modifiers).
fn is_size_t(ty: BtfType<'_>) -> bool {
    let mut ty = Some(ty);
    while let Some(t) = ty.filter(|t| t.is_mod()) {
        ty = t.next_type();
    }
    ty.is_some_and(|t| t.kind() == BtfKind::Typedef && t.name().is_some_and(|n| n == "size_t"))
}

fn is_char(ty: &BtfType<'_>) -> bool {
    ty.name().is_some_and(|name| name == "char")
}

/// Whether pointer `ty` points to `const char` (through typedefs and other modifiers): a
/// `char *` that is not const is mostly a buffer the function fills, its bytes not yet a string
/// at the entry.
fn points_to_const_char(ty: &BtfType<'_>) -> bool {
    let mut constant = false;
    let mut pointee = ty.next_type();
    while let Some(ty) = pointee {
        match ty.kind() {
            BtfKind::Const => constant = true,
            kind if ty.is_mod() || kind == BtfKind::Typedef => {}
            BtfKind::Int => return constant && is_char(&ty),
            _ => return false,
        }
        pointee = ty.next_type();
    }
    false
}
