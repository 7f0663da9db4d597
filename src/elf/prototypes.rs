//! The prototypes DWARF gives a file's functions: how each parameter and the return value of a
//! function is shown, for `-a/--auto-args`.
//!
//! Only functions whose every parameter travels in an integer register (or on the stack as an
//! integer would) are kept: integers, `bool`, enums, `char`, pointers, references. A function
//! with a parameter of any other type (a struct by value, a float, a vector, `...`) is left
//! out: the registers its integer arguments use cannot be told from its prototype alone
//! without the whole System V classification, and a wrong register shows a wrong value.
//!
//! The DWARF (versions 4 and 5) is read with `gimli`. Out-of-line instances of inlined
//! functions and C++ methods defined outside their class name their types through
//! `DW_AT_abstract_origin` and `DW_AT_specification`, which are followed. GCC's clones with a
//! changed signature (`.isra`, `.constprop`) keep their origin's prototype in DWARF but not in
//! their registers: they are left out (see [`Functions::parameters`]).

use std::borrow::Cow;
use std::collections::HashMap;
use std::convert::Infallible;

use gimli::{
    AttributeValue, DebuggingInformationEntry, DwAt, EndianSlice, LittleEndian, UnitOffset,
};
use goblin::elf::header::{self, Header};
use goblin::elf::section_header::{SectionHeader, SHF_COMPRESSED, SHT_NOBITS};

type Slice<'a> = EndianSlice<'a, LittleEndian>;
type Entry<'u, 'a> = DebuggingInformationEntry<'u, 'u, Slice<'a>>;

/// How a value of a DWARF type is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueKind {
    /// A signed integer or enum of `bits` (8, 16, 32, 64).
    Signed { bits: u8 },
    /// An unsigned integer (including bool and unsigned char used as a number) of `bits`.
    Unsigned { bits: u8 },
    /// `char` (signed or unsigned, 8 bits, DW_ATE_signed_char / unsigned_char).
    Char,
    /// `char *` / `const char *` (pointer to a char base type, through const/volatile typedefs).
    CString,
    /// Any other pointer (including function pointers), a reference, or an array parameter.
    Pointer,
}

/// What a function was declared with in DWARF.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prototype {
    /// Its parameters, in order (formal_parameter children); `this` of a C++ method included.
    pub parameters: Vec<ValueKind>,
    /// None for `void` functions.
    pub returns: Option<ValueKind>,
}

/// Why the DWARF of a file could not be read (for its prototypes or its source lines).
#[derive(Debug, thiserror::Error)]
pub enum DwarfError {
    #[error("not a 64-bit little-endian ELF file: its DWARF is not read")]
    UnsupportedFile,

    #[error("its section headers cannot be read ({0}): check the file with `readelf -S`")]
    Sections(#[from] goblin::error::Error),

    #[error(
        "its .debug_info is malformed near offset {offset:#x} ({error}): check it with \
         `readelf --debug-dump=info`, or rebuild it"
    )]
    Dwarf { offset: usize, error: gimli::Error },
}

/// The prototypes of the functions of an ELF file whose DWARF describes them, by the function's
/// entry virtual address (DW_AT_low_pc, or the start of the first range of DW_AT_ranges: GCC
/// lists the range holding the entry first, and a `.cold` part may lie below it).
///
/// A function with a parameter of any other type (struct by value, float, double, long double,
/// vector, `__int128`, varargs `...` = DW_TAG_unspecified_parameters) is left out: its integer
/// arguments cannot be told apart from the registers it uses.
///
/// A return type that is not shown (a float, or a struct returned in registers) makes
/// `returns` None but keeps the function: its parameters are still in the registers the
/// prototype says. A struct returned in memory (larger than 16 bytes, or a C++ class that is
/// not passed by value) leaves the function out: the caller passes its address in `%rdi`, and
/// every parameter moves up one register.
///
/// A file without `.debug_info` gives an empty map; so does one whose DWARF is compressed
/// (`SHF_COMPRESSED`), which is not decompressed.
pub fn read_prototypes(elf_bytes: &[u8]) -> Result<HashMap<u64, Prototype>, DwarfError> {
    let sections = ElfSections::parse(elf_bytes)?;
    if sections.get(".debug_info").is_none() {
        return Ok(HashMap::new());
    }
    if let Some(name) = sections.compressed_debug_section() {
        log::debug!("{name} is compressed: the DWARF prototypes of the file are not read");
        return Ok(HashMap::new());
    }
    let dwarf = gimli::Dwarf::load(|id| {
        let data = sections.get(id.name()).unwrap_or_default();
        Ok::<_, Infallible>(EndianSlice::new(data, LittleEndian))
    })
    .unwrap_or_else(|never: Infallible| match never {});
    let functions = Functions::read(&dwarf)?;
    let mut prototypes = HashMap::new();
    let mut unreadable = 0;
    for (index, unit) in functions.units.iter().enumerate() {
        let entries = match functions_with_code(&dwarf, &unit.unit) {
            Ok(entries) => entries,
            Err(error) => {
                log::debug!("a DWARF unit's functions cannot be read ({error}): skipped");
                unreadable += 1;
                continue;
            }
        };
        for (offset, address) in entries {
            let die = Die {
                unit: index,
                offset,
            };
            match functions.prototype(die) {
                Ok(Some(prototype)) => {
                    prototypes.entry(address).or_insert(prototype);
                }
                Ok(None) => {}
                Err(_) => unreadable += 1,
            }
        }
    }
    if unreadable > 0 {
        log::debug!("{unreadable} DWARF functions or units could not be read: left out");
    }
    Ok(prototypes)
}

/// The section headers of an ELF file, read without following anything else (a debug file's
/// code sections are `NOBITS`).
pub(super) struct ElfSections<'a> {
    bytes: &'a [u8],
    headers: Vec<SectionHeader>,
    names: Vec<Option<&'a str>>,
}

impl<'a> ElfSections<'a> {
    pub(super) fn parse(bytes: &'a [u8]) -> Result<ElfSections<'a>, DwarfError> {
        if bytes.get(..header::SELFMAG) != Some(header::ELFMAG.as_slice()) {
            return Err(DwarfError::UnsupportedFile);
        }
        let header: Header = goblin::elf::Elf::parse_header(bytes)?;
        if header.e_ident[header::EI_CLASS] != header::ELFCLASS64
            || header.e_ident[header::EI_DATA] != header::ELFDATA2LSB
        {
            return Err(DwarfError::UnsupportedFile);
        }
        let ctx = goblin::container::Ctx::new(
            goblin::container::Container::Big,
            goblin::container::Endian::Little,
        );
        let headers =
            SectionHeader::parse(bytes, header.e_shoff as usize, header.e_shnum as usize, ctx)?;
        let strings = headers
            .get(header.e_shstrndx as usize)
            .and_then(|section| section_bytes(bytes, section))
            .unwrap_or_default();
        let names = headers
            .iter()
            .map(|section| {
                let rest = strings.get(section.sh_name..)?;
                let end = rest.iter().position(|&b| b == 0)?;
                std::str::from_utf8(&rest[..end]).ok()
            })
            .collect();
        Ok(ElfSections {
            bytes,
            headers,
            names,
        })
    }

    fn header(&self, name: &str) -> Option<&SectionHeader> {
        let index = self.names.iter().position(|n| *n == Some(name))?;
        self.headers.get(index)
    }

    /// The contents of the section `name`, if the file has them.
    pub(super) fn get(&self, name: &str) -> Option<&'a [u8]> {
        section_bytes(self.bytes, self.header(name)?)
    }

    /// The contents of the section `name`, decompressed where it is compressed with zlib
    /// (`SHF_COMPRESSED`, `ELFCOMPRESS_ZLIB`: `gcc -gz`, `objcopy --compress-debug-sections`, the
    /// debug files of Debian's packages). None where the file has no such section, or where it
    /// is compressed otherwise (zstd) or damaged (said under `--debug`).
    pub(super) fn decompressed(&self, name: &str) -> Option<Cow<'a, [u8]>> {
        let header = self.header(name)?;
        let bytes = section_bytes(self.bytes, header)?;
        if header.sh_flags & u64::from(SHF_COMPRESSED) == 0 {
            return Some(Cow::Borrowed(bytes));
        }
        // Elf64_Chdr: ch_type u32, ch_reserved u32, ch_size u64, ch_addralign u64.
        const CHDR_LEN: usize = 24;
        const ELFCOMPRESS_ZLIB: u32 = 1;
        let chdr = bytes.get(..CHDR_LEN)?;
        let kind = u32::from_le_bytes(chdr[0..4].try_into().ok()?);
        let size = u64::from_le_bytes(chdr[8..16].try_into().ok()?);
        if kind != ELFCOMPRESS_ZLIB {
            log::debug!("{name} is compressed with type {kind}, not zlib: not read");
            return None;
        }
        let size = usize::try_from(size).ok()?;
        match miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(&bytes[CHDR_LEN..], size) {
            Ok(data) => Some(Cow::Owned(data)),
            Err(error) => {
                log::debug!("{name} does not decompress ({error:?}): not read");
                None
            }
        }
    }

    /// The name of the first compressed `.debug_` section, if any.
    pub(super) fn compressed_debug_section(&self) -> Option<&'a str> {
        self.headers
            .iter()
            .zip(&self.names)
            .filter(|(section, _)| section.sh_flags & u64::from(SHF_COMPRESSED) != 0)
            .find_map(|(_, name)| name.filter(|n| n.starts_with(".debug_")))
    }
}

fn section_bytes<'a>(bytes: &'a [u8], section: &SectionHeader) -> Option<&'a [u8]> {
    if section.sh_type == SHT_NOBITS {
        return None;
    }
    let start = usize::try_from(section.sh_offset).ok()?;
    let size = usize::try_from(section.sh_size).ok()?;
    bytes.get(start..start.checked_add(size)?)
}

/// The `DW_TAG_subprogram`s of `unit` that have code, with their entry addresses.
fn functions_with_code(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &gimli::Unit<Slice<'_>>,
) -> gimli::Result<Vec<(UnitOffset, u64)>> {
    let mut found = Vec::new();
    let mut cursor = unit.entries();
    while let Some((_, entry)) = cursor.next_dfs()? {
        if entry.tag() != gimli::DW_TAG_subprogram {
            continue;
        }
        if let Some(address) = entry_address(dwarf, unit, entry)? {
            found.push((entry.offset(), address));
        }
    }
    Ok(found)
}

/// Where the function of `entry` starts: `DW_AT_low_pc`, or the first range of `DW_AT_ranges`.
/// None for declarations and abstract instances, and for functions the linker discarded (their
/// addresses are 0, or lld's tombstones near `u64::MAX`).
fn entry_address(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &gimli::Unit<Slice<'_>>,
    entry: &Entry<'_, '_>,
) -> gimli::Result<Option<u64>> {
    let mut address = None;
    if let Some(low_pc) = entry.attr_value(gimli::DW_AT_low_pc)? {
        address = dwarf.attr_address(unit, low_pc)?;
    } else if let Some(ranges) = entry.attr_value(gimli::DW_AT_ranges)? {
        if let Some(offset) = dwarf.attr_ranges_offset(unit, ranges)? {
            let mut ranges = dwarf.ranges(unit, offset)?;
            while let Some(range) = ranges.next()? {
                if range.begin < range.end {
                    address = Some(range.begin);
                    break;
                }
            }
        }
    }
    Ok(address.filter(|&a| a != 0 && a < u64::MAX - 1))
}

/// A DIE: the index of its unit in [`Functions::units`], and its offset there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Die {
    unit: usize,
    offset: UnitOffset,
}

struct ReadUnit<'a> {
    unit: gimli::Unit<Slice<'a>>,
    /// Where the unit starts in `.debug_info`.
    start: usize,
    /// Written in C: its structs are returned by value whenever they fit in 16 bytes.
    language_c: bool,
}

/// The units of a file's DWARF, read once, and the questions asked of their DIEs.
struct Functions<'d, 'a> {
    dwarf: &'d gimli::Dwarf<Slice<'a>>,
    /// Sorted by `start`.
    units: Vec<ReadUnit<'a>>,
}

/// What the type of a parameter or return value is, as far as showing it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Value(ValueKind),
    Void,
    /// A struct, union or class returned in `%rax`/`%rdx` or in vector registers.
    RecordInRegisters,
    /// A struct, union or class returned through a hidden pointer in `%rdi`.
    RecordInMemory,
    /// Anything else: floats, vectors, `__int128`, member pointers, types not found.
    Unshown,
}

/// How many qualifiers, typedefs and origins are followed before giving up (cycles).
const MAX_CHAIN: usize = 16;

/// The formal parameters of a subprogram DIE.
struct Parameters {
    dies: Vec<Die>,
    /// It has `DW_TAG_unspecified_parameters` (`...`).
    varargs: bool,
}

impl<'d, 'a> Functions<'d, 'a> {
    fn read(dwarf: &'d gimli::Dwarf<Slice<'a>>) -> Result<Functions<'d, 'a>, DwarfError> {
        let mut units = Vec::new();
        let mut headers = dwarf.units();
        loop {
            let header = match headers.next() {
                Ok(Some(header)) => header,
                Ok(None) => break,
                Err(error) => {
                    let offset = units.last().map_or(0, |u: &ReadUnit| {
                        u.start + u.unit.header.length_including_self()
                    });
                    return Err(DwarfError::Dwarf { offset, error });
                }
            };
            let Some(start) = header.offset().as_debug_info_offset() else {
                continue;
            };
            match dwarf.unit(header) {
                Ok(unit) => {
                    let language_c = root_language(&unit).is_some_and(|language| {
                        matches!(
                            language,
                            gimli::DW_LANG_C
                                | gimli::DW_LANG_C89
                                | gimli::DW_LANG_C99
                                | gimli::DW_LANG_C11
                                | gimli::DW_LANG_C17
                        )
                    });
                    units.push(ReadUnit {
                        unit,
                        start: start.0,
                        language_c,
                    });
                }
                Err(error) => log::debug!(
                    "the DWARF unit at .debug_info offset {:#x} cannot be read ({error}): skipped",
                    start.0
                ),
            }
        }
        Ok(Functions { dwarf, units })
    }

    fn unit(&self, die: Die) -> &gimli::Unit<Slice<'a>> {
        &self.units[die.unit].unit
    }

    fn entry(&self, die: Die) -> gimli::Result<Entry<'_, 'a>> {
        self.unit(die).entry(die.offset)
    }

    /// The DIE the attribute `name` of `die` refers to, in its unit or another.
    fn reference(&self, die: Die, name: DwAt) -> gimli::Result<Option<Die>> {
        let entry = self.entry(die)?;
        Ok(match entry.attr_value(name)? {
            Some(AttributeValue::UnitRef(offset)) => Some(Die {
                unit: die.unit,
                offset,
            }),
            Some(AttributeValue::DebugInfoRef(offset)) => self.in_section(offset),
            _ => None,
        })
    }

    /// The DIE at `offset` in `.debug_info`.
    fn in_section(&self, offset: gimli::DebugInfoOffset) -> Option<Die> {
        let index = self
            .units
            .partition_point(|unit| unit.start <= offset.0)
            .checked_sub(1)?;
        let offset = offset.to_unit_offset(&self.units[index].unit.header)?;
        Some(Die {
            unit: index,
            offset,
        })
    }

    /// Where `die` takes its name-less attributes from: the DIE itself, then the DIEs its
    /// `DW_AT_abstract_origin` or `DW_AT_specification` lead to, in that order.
    fn origins(&self, die: Die) -> gimli::Result<Vec<Die>> {
        let mut chain = vec![die];
        let mut current = die;
        while chain.len() < MAX_CHAIN {
            let next = match self.reference(current, gimli::DW_AT_abstract_origin)? {
                Some(origin) => Some(origin),
                None => self.reference(current, gimli::DW_AT_specification)?,
            };
            match next {
                Some(next) if !chain.contains(&next) => {
                    chain.push(next);
                    current = next;
                }
                _ => break,
            }
        }
        Ok(chain)
    }

    /// The type `die` has, itself or through its origins; None for none (`void`).
    fn type_of(&self, die: Die) -> gimli::Result<Option<Die>> {
        for origin in self.origins(die)? {
            if self.entry(origin)?.attr_value(gimli::DW_AT_type)?.is_some() {
                return self.reference(origin, gimli::DW_AT_type);
            }
        }
        Ok(None)
    }

    /// The prototype of the subprogram `die` (which has code), or None when it is left out.
    fn prototype(&self, die: Die) -> gimli::Result<Option<Prototype>> {
        let returns = match self.type_of(die)? {
            None => None,
            Some(ty) => match self.shape(ty)? {
                Shape::Value(kind) => Some(kind),
                Shape::RecordInMemory => return Ok(None),
                Shape::Void | Shape::RecordInRegisters | Shape::Unshown => None,
            },
        };
        let Some(dies) = self.parameters(die)? else {
            return Ok(None);
        };
        let mut parameters = Vec::with_capacity(dies.len());
        for parameter in dies {
            let shape = match self.type_of(parameter)? {
                Some(ty) => self.shape(ty)?,
                None => Shape::Unshown,
            };
            match shape {
                Shape::Value(kind) => parameters.push(kind),
                _ => return Ok(None),
            }
        }
        Ok(Some(Prototype {
            parameters,
            returns,
        }))
    }

    /// The formal parameter DIEs of the subprogram `die`: its own, or where it has none, those
    /// of the first of its origins that has some. None when the function is left out: it takes
    /// `...`, or it is a clone whose registers are not its origin's.
    ///
    /// A concrete instance (with `DW_AT_abstract_origin`) keeps its origin's registers only if
    /// its parameters are its origin's, in the same order, none of them replaced by a constant
    /// (`DW_AT_const_value`, GCC's `.constprop`) or by what it pointed to
    /// (`DW_OP_GNU_parameter_ref`, GCC's `.isra`).
    fn parameters(&self, die: Die) -> gimli::Result<Option<Vec<Die>>> {
        let origins = self.origins(die)?;
        let mut lists = Vec::with_capacity(origins.len());
        for &origin in &origins {
            let list = self.formal_parameters(origin)?;
            if list.varargs {
                return Ok(None);
            }
            lists.push(list);
        }
        let own = &lists[0].dies;
        if !own.is_empty() {
            if let Some(origin) = self.reference(die, gimli::DW_AT_abstract_origin)? {
                let position = origins.iter().position(|&o| o == origin);
                let theirs = position.map_or(&[][..], |p| &lists[p].dies[..]);
                if !self.same_registers(own, theirs)? {
                    return Ok(None);
                }
            }
            return Ok(Some(own.clone()));
        }
        Ok(Some(
            lists
                .into_iter()
                .map(|list| list.dies)
                .find(|dies| !dies.is_empty())
                .unwrap_or_default(),
        ))
    }

    /// Whether the parameters `own` of a concrete instance are its origin's `theirs`, one for
    /// one, each still a parameter of its own (see [`Functions::parameters`]).
    fn same_registers(&self, own: &[Die], theirs: &[Die]) -> gimli::Result<bool> {
        if own.len() != theirs.len() {
            return Ok(false);
        }
        for (&parameter, &origin) in own.iter().zip(theirs) {
            if self.reference(parameter, gimli::DW_AT_abstract_origin)? != Some(origin) {
                return Ok(false);
            }
            let entry = self.entry(parameter)?;
            if entry.attr_value(gimli::DW_AT_const_value)?.is_some()
                || self.refers_to_caller_parameter(parameter, &entry)?
            {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether the location of the formal parameter `entry` uses `DW_OP_GNU_parameter_ref`: its
    /// value is not passed, but made from a parameter of the function's origin.
    fn refers_to_caller_parameter(&self, die: Die, entry: &Entry<'_, 'a>) -> gimli::Result<bool> {
        let Some(location) = entry.attr_value(gimli::DW_AT_location)? else {
            return Ok(false);
        };
        let unit = self.unit(die);
        let encoding = unit.encoding();
        let mentions = |expression: gimli::Expression<Slice<'a>>| -> gimli::Result<bool> {
            let mut operations = expression.operations(encoding);
            while let Some(operation) = operations.next()? {
                if matches!(operation, gimli::Operation::ParameterRef { .. }) {
                    return Ok(true);
                }
            }
            Ok(false)
        };
        if let AttributeValue::Exprloc(expression) = location {
            return mentions(expression);
        }
        if let Some(mut list) = self.dwarf.attr_locations(unit, location)? {
            while let Some(entry) = list.next()? {
                if mentions(entry.data)? {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// The `DW_TAG_formal_parameter` children of `die`, in order.
    fn formal_parameters(&self, die: Die) -> gimli::Result<Parameters> {
        let mut parameters = Parameters {
            dies: Vec::new(),
            varargs: false,
        };
        let mut tree = self.unit(die).entries_tree(Some(die.offset))?;
        let mut children = tree.root()?.children();
        while let Some(child) = children.next()? {
            match child.entry().tag() {
                gimli::DW_TAG_formal_parameter => parameters.dies.push(Die {
                    unit: die.unit,
                    offset: child.entry().offset(),
                }),
                gimli::DW_TAG_unspecified_parameters => parameters.varargs = true,
                _ => {}
            }
        }
        Ok(parameters)
    }

    /// How a value of the type `ty` is shown.
    fn shape(&self, ty: Die) -> gimli::Result<Shape> {
        let Some(ty) = self.strip_qualifiers(ty)? else {
            return Ok(Shape::Void);
        };
        let entry = self.entry(ty)?;
        Ok(match entry.tag() {
            gimli::DW_TAG_base_type => self.base_type(ty, &entry)?,
            gimli::DW_TAG_enumeration_type => match byte_size(&entry)?.and_then(bits) {
                Some(bits) => Shape::Value(ValueKind::Signed { bits }),
                None => Shape::Unshown,
            },
            gimli::DW_TAG_pointer_type => match self.points_to_char(ty)? {
                true => Shape::Value(ValueKind::CString),
                false => Shape::Value(ValueKind::Pointer),
            },
            gimli::DW_TAG_reference_type
            | gimli::DW_TAG_rvalue_reference_type
            | gimli::DW_TAG_array_type
            | gimli::DW_TAG_subroutine_type => Shape::Value(ValueKind::Pointer),
            gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type | gimli::DW_TAG_class_type => {
                self.record(ty, &entry)?
            }
            _ => Shape::Unshown,
        })
    }

    /// The type under the typedefs and qualifiers of `ty`; None for `void` (a qualifier
    /// without a type).
    fn strip_qualifiers(&self, mut ty: Die) -> gimli::Result<Option<Die>> {
        for _ in 0..MAX_CHAIN {
            match self.entry(ty)?.tag() {
                gimli::DW_TAG_typedef
                | gimli::DW_TAG_const_type
                | gimli::DW_TAG_volatile_type
                | gimli::DW_TAG_restrict_type
                | gimli::DW_TAG_atomic_type
                | gimli::DW_TAG_immutable_type => match self.reference(ty, gimli::DW_AT_type)? {
                    Some(next) => ty = next,
                    None => return Ok(None),
                },
                _ => return Ok(Some(ty)),
            }
        }
        // A cycle, or a chain no compiler writes: nothing to show.
        Ok(None)
    }

    fn base_type(&self, ty: Die, entry: &Entry<'_, 'a>) -> gimli::Result<Shape> {
        let Some(bits) = byte_size(entry)?.and_then(bits) else {
            return Ok(Shape::Unshown);
        };
        let Some(AttributeValue::Encoding(encoding)) = entry.attr_value(gimli::DW_AT_encoding)?
        else {
            return Ok(Shape::Unshown);
        };
        let kind = match encoding {
            gimli::DW_ATE_signed_char | gimli::DW_ATE_unsigned_char
                if self.is_char(ty, entry)? =>
            {
                ValueKind::Char
            }
            gimli::DW_ATE_signed | gimli::DW_ATE_signed_char => ValueKind::Signed { bits },
            gimli::DW_ATE_unsigned
            | gimli::DW_ATE_unsigned_char
            | gimli::DW_ATE_boolean
            | gimli::DW_ATE_UTF => ValueKind::Unsigned { bits },
            _ => return Ok(Shape::Unshown),
        };
        Ok(Shape::Value(kind))
    }

    /// Whether the character base type `entry` is plain `char` (not `signed char` or `unsigned
    /// char`, numbers of one byte).
    fn is_char(&self, ty: Die, entry: &Entry<'_, 'a>) -> gimli::Result<bool> {
        let Some(name) = entry.attr_value(gimli::DW_AT_name)? else {
            return Ok(true);
        };
        let name = self.dwarf.attr_string(self.unit(ty), name)?;
        Ok(name.slice() == b"char")
    }

    /// Whether the pointer type `pointer` points to `char` (through qualifiers and typedefs).
    fn points_to_char(&self, pointer: Die) -> gimli::Result<bool> {
        let Some(target) = self.reference(pointer, gimli::DW_AT_type)? else {
            return Ok(false);
        };
        let Some(target) = self.strip_qualifiers(target)? else {
            return Ok(false);
        };
        Ok(self.shape(target)? == Shape::Value(ValueKind::Char))
    }

    /// Where a struct, union or class of type `ty` is returned (System V x86_64): in registers
    /// when it fits in 16 bytes and is passed by value. A C++ record is taken to be passed by
    /// value only when its DWARF says so: a non-trivial copy or destructor sends it to memory.
    fn record(&self, ty: Die, entry: &Entry<'_, 'a>) -> gimli::Result<Shape> {
        let Some(size) = byte_size(entry)? else {
            return Ok(Shape::RecordInMemory);
        };
        let by_value = match entry.attr_value(gimli::DW_AT_calling_convention)? {
            Some(AttributeValue::CallingConvention(gimli::DW_CC_pass_by_value)) => true,
            Some(AttributeValue::CallingConvention(gimli::DW_CC_pass_by_reference)) => false,
            _ => self.units[ty.unit].language_c,
        };
        Ok(match by_value && size <= 16 {
            true => Shape::RecordInRegisters,
            false => Shape::RecordInMemory,
        })
    }
}

/// The `DW_AT_language` of the unit's root DIE.
fn root_language(unit: &gimli::Unit<Slice<'_>>) -> Option<gimli::DwLang> {
    let mut cursor = unit.entries();
    let (_, root) = cursor.next_dfs().ok()??;
    match root.attr_value(gimli::DW_AT_language).ok()?? {
        AttributeValue::Language(language) => Some(language),
        _ => None,
    }
}

fn byte_size(entry: &Entry<'_, '_>) -> gimli::Result<Option<u64>> {
    Ok(entry
        .attr_value(gimli::DW_AT_byte_size)?
        .and_then(|value| value.udata_value()))
}

/// The bits of a value of `bytes` bytes, for the sizes an integer register holds whole.
fn bits(bytes: u64) -> Option<u8> {
    matches!(bytes, 1 | 2 | 4 | 8).then(|| bytes as u8 * 8)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use goblin::elf::Elf;
    use tempfile::TempDir;

    use super::ValueKind::{CString, Char, Pointer, Signed, Unsigned};
    use super::*;
    use crate::elf::tests::compile;

    const PROTOTYPES_C: &str =
        concat!(env!("CARGO_MANIFEST_DIR"), "/src/elf/testdata/prototypes.c");
    const PROTOTYPES_CPP: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/elf/testdata/prototypes.cpp"
    );

    /// The prototypes of the file at `path`, by the names of its function symbols (those
    /// DWARF leaves out are missing).
    fn prototypes_by_name(path: &Path) -> HashMap<String, Prototype> {
        let bytes = std::fs::read(path).unwrap();
        let prototypes = read_prototypes(&bytes).unwrap();
        let elf = Elf::parse(&bytes).unwrap();
        elf.syms
            .iter()
            .filter(|sym| sym.is_function() && sym.st_value != 0)
            .filter_map(|sym| {
                let name = elf.strtab.get_at(sym.st_name)?;
                let prototype = prototypes.get(&sym.st_value)?;
                Some((name.to_owned(), prototype.clone()))
            })
            .collect()
    }

    fn prototype(parameters: &[ValueKind], returns: Option<ValueKind>) -> Prototype {
        Prototype {
            parameters: parameters.to_vec(),
            returns,
        }
    }

    fn check_c_fixture(flags: &[&str]) {
        let dir = TempDir::new().unwrap();
        let program = compile(&dir, "cc", PROTOTYPES_C, "prototypes", flags);
        let found = prototypes_by_name(&program);
        let expected = [
            (
                "add",
                prototype(&[Signed { bits: 32 }; 2], Some(Signed { bits: 32 })),
            ),
            (
                "neg",
                prototype(&[Signed { bits: 64 }], Some(Signed { bits: 64 })),
            ),
            (
                "u8",
                prototype(&[Unsigned { bits: 8 }], Some(Unsigned { bits: 8 })),
            ),
            ("greet", prototype(&[CString], Some(CString))),
            (
                "mem",
                prototype(&[Pointer, Unsigned { bits: 64 }], Some(Pointer)),
            ),
            (
                "paint",
                prototype(&[Signed { bits: 32 }], Some(Signed { bits: 32 })),
            ),
            ("nothing", prototype(&[], None)),
            (
                "many",
                prototype(
                    &[
                        Signed { bits: 32 },
                        Signed { bits: 32 },
                        Signed { bits: 32 },
                        Signed { bits: 32 },
                        Signed { bits: 32 },
                        Signed { bits: 32 },
                        Signed { bits: 32 },
                        Signed { bits: 64 },
                    ],
                    Some(Signed { bits: 32 }),
                ),
            ),
            ("named", prototype(&[CString], Some(Signed { bits: 32 }))),
            (
                "flag",
                prototype(&[Unsigned { bits: 8 }], Some(Unsigned { bits: 8 })),
            ),
            ("letter", prototype(&[Char], Some(Char))),
            ("make_pair", prototype(&[Signed { bits: 64 }], None)),
            ("third", prototype(&[Signed { bits: 32 }], None)),
            (
                "twice",
                prototype(&[Signed { bits: 16 }], Some(Signed { bits: 16 })),
            ),
            (
                "main",
                prototype(&[Signed { bits: 32 }, Pointer], Some(Signed { bits: 32 })),
            ),
        ];
        for (name, prototype) in &expected {
            assert_eq!(
                found.get(*name),
                Some(prototype),
                "{name} built with {flags:?}"
            );
        }
        for name in ["half", "sum", "byval", "make_big"] {
            assert_eq!(
                found.get(name),
                None,
                "{name} built with {flags:?} is left out"
            );
        }
        // Every function of the fixture is one of those, or the C runtime's (without DWARF).
        assert_eq!(found.len(), expected.len(), "{found:?}");
    }

    #[test]
    fn prototypes_of_c_functions_built_without_optimization() {
        check_c_fixture(&["-O0"]);
    }

    #[test]
    fn prototypes_of_c_functions_built_with_optimization() {
        check_c_fixture(&["-O2", "-fno-inline"]);
    }

    #[test]
    fn prototypes_of_c_functions_in_dwarf_4() {
        check_c_fixture(&["-O2", "-gdwarf-4"]);
    }

    #[test]
    fn cpp_method_defined_outside_its_class_has_this_first() {
        let dir = TempDir::new().unwrap();
        let program = compile(&dir, "c++", PROTOTYPES_CPP, "prototypes-cpp", &["-O2"]);
        let found = prototypes_by_name(&program);
        assert_eq!(
            found.get("_ZN7Counter4bumpEi"),
            Some(&prototype(
                &[Pointer, Signed { bits: 32 }],
                Some(Signed { bits: 32 })
            ))
        );
        // References are pointers; a class with a destructor is returned through memory.
        assert_eq!(
            found.get("_Z5resetR7Counter"),
            Some(&prototype(&[Pointer], None))
        );
        assert_eq!(found.get("_Z4makel"), None);
    }

    #[test]
    fn gcc_clones_with_other_registers_are_left_out() {
        let dir = TempDir::new().unwrap();
        let program = compile(&dir, "cc", PROTOTYPES_C, "clones", &["-O2", "-DCLONES"]);
        let bytes = std::fs::read(&program).unwrap();
        let elf = Elf::parse(&bytes).unwrap();
        let clones: Vec<&str> = elf
            .syms
            .iter()
            .filter_map(|sym| elf.strtab.get_at(sym.st_name))
            .filter(|name| name.contains(".constprop") || name.contains(".isra"))
            .collect();
        for clone in ["scale.constprop", "second.isra"] {
            assert!(
                clones.iter().any(|name| name.starts_with(clone)),
                "GCC made no {clone} clone: {clones:?}"
            );
        }
        let found = prototypes_by_name(&program);
        for clone in clones {
            assert_eq!(found.get(clone), None, "{clone}");
        }
        assert_eq!(
            found.get("clones"),
            Some(&prototype(&[Pointer], Some(Signed { bits: 64 })))
        );
    }

    #[test]
    fn a_stripped_file_takes_its_prototypes_from_its_debug_file() {
        let dir = TempDir::new().unwrap();
        let program = compile(&dir, "cc", PROTOTYPES_C, "stripped", &["-O2"]);
        let debug = crate::elf::tests::split_off_debug_file(&dir, &program);

        let mut file = crate::elf::ElfFile::open(&program).unwrap();
        assert_eq!(file.prototypes(), HashMap::new());
        file.load_debug_symbols(&crate::elf::DebugLookup::with_dirs(&[]), &program);
        let from_debug_file = file.prototypes();
        let debug_bytes = std::fs::read(&debug).unwrap();
        assert_eq!(from_debug_file, read_prototypes(&debug_bytes).unwrap());
        assert!(from_debug_file.len() > 10, "{from_debug_file:?}");
    }

    #[test]
    fn a_file_without_dwarf_has_no_prototypes() {
        let dir = TempDir::new().unwrap();
        let program = compile(&dir, "cc", PROTOTYPES_C, "nodwarf", &["-g0"]);
        let bytes = std::fs::read(program).unwrap();
        assert_eq!(read_prototypes(&bytes).unwrap(), HashMap::new());
    }

    #[test]
    fn compressed_dwarf_is_not_read() {
        let dir = TempDir::new().unwrap();
        let program = compile(&dir, "cc", PROTOTYPES_C, "zlib", &["-gz=zlib"]);
        let bytes = std::fs::read(program).unwrap();
        assert_eq!(read_prototypes(&bytes).unwrap(), HashMap::new());
    }

    #[test]
    fn text_is_not_an_elf_file() {
        assert!(matches!(
            read_prototypes(b"#!/bin/sh\n"),
            Err(DwarfError::UnsupportedFile)
        ));
    }
}
