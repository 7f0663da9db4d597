//! Captured values (`-A`, `-R`): what a function's probes capture ([`ValueSpec`], parsed from
//! `arg2/u8`), and the captured bytes shown as text. The bytes are laid out as the BPF side
//! writes them (`src/bpf/interface.h`): per spec, in order, an integer's 8 bytes; for a string,
//! the pointer's 8 bytes, a signed 16-bit count of the bytes read (negative: the pointer could
//! not be read, see [`Unreadable`]) and those bytes. An entry's bytes hold its arguments, an
//! exit's its return value.

use std::fmt::Write;

use serde::{Deserialize, Serialize};

/// The most values a function captures (`VALUES_MAX` in interface.h).
pub const VALUES_MAX: usize = 16;
/// The highest argument number that can be read: arguments past the sixth are read from the
/// stack, and the item that names them has 6 bits.
pub const ARGUMENT_MAX: u8 = 63;
/// The most bytes of a string captured (`VALUE_STRING_MAX` in interface.h).
pub const STRING_SIZE_MAX: u16 = 500;
/// The bit of a BPF item that marks a string (`VALUE_STRING` in interface.h).
pub const STRING_ITEM: u8 = 1 << 7;
/// The bit of a BPF item that marks the user stack's id (`VALUE_STACK` in interface.h).
pub const STACK_ITEM: u8 = 1 << 6;
/// The bytes of a string captured unless `--string-size` says otherwise.
pub const STRING_SIZE_DEFAULT: u16 = 64;

/// Where a value is found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ValueSource {
    /// Argument N, from 1 (the System V ABI's integer arguments: 1-6 in registers, 7 and up on
    /// the stack).
    Argument(u8),
    /// What the function returns (rax).
    Return,
}

/// How a value is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ValueFormat {
    /// Signed decimal (`d`, the default).
    Signed,
    /// Unsigned decimal (`u`).
    Unsigned,
    /// Hexadecimal (`x`).
    Hex,
    /// A character (`c`).
    Char,
    /// An address (`p`).
    Pointer,
    /// A C string the value points to (`s`), at most `max` bytes of it.
    String { max: u16 },
}

/// One value a function's probes capture and how it is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ValueSpec {
    pub source: ValueSource,
    pub format: ValueFormat,
    /// How many low bits of the 64 captured count (8, 16, 32 or 64).
    pub bits: u8,
}

/// A value spec that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("`{0}` is not argN (N from 1), fpargN or retval")]
    UnknownItem(String),
    #[error("`{item}`: argument numbers go from 1 to {ARGUMENT_MAX}")]
    ArgumentNumber { item: String },
    #[error("`{item}`: unknown format `{format}` (use d, u, x, c, p or s, with 8, 16, 32 or 64)")]
    UnknownFormat { item: String, format: String },
    #[error(
        "`{0}`: floating-point values are in vector registers, which the kernel does not give \
         uprobe programs"
    )]
    FloatingPoint(String),
    #[error("`{0}` is a return value: use it with -R/--retval")]
    ReturnInArguments(String),
    #[error("`{0}` is an argument: use it with -A/--argument")]
    ArgumentInReturn(String),
}

impl ValueSpec {
    /// A signed 64-bit decimal value from `source`.
    pub fn new(source: ValueSource, format: ValueFormat) -> ValueSpec {
        let bits = match format {
            ValueFormat::Char => 8,
            _ => 64,
        };
        ValueSpec {
            source,
            format,
            bits,
        }
    }

    /// Parses one item: `argN` or `retval`, with an optional `/FMT` (a format letter, a size, or
    /// both: `arg2/u8`, `retval/x32`, `arg1/s`). `string_size` bounds the strings read.
    pub fn parse(item: &str, string_size: u16) -> Result<ValueSpec, SpecError> {
        let (name, format) = item.split_once('/').unwrap_or((item, ""));
        if name.starts_with("fparg") || format == "f" {
            return Err(SpecError::FloatingPoint(item.to_owned()));
        }
        let source = if name == "retval" {
            ValueSource::Return
        } else if let Some(number) = name.strip_prefix("arg") {
            match number.parse::<u8>() {
                Ok(n) if (1..=ARGUMENT_MAX).contains(&n) => ValueSource::Argument(n),
                _ if !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) => {
                    return Err(SpecError::ArgumentNumber {
                        item: item.to_owned(),
                    })
                }
                _ => return Err(SpecError::UnknownItem(item.to_owned())),
            }
        } else {
            return Err(SpecError::UnknownItem(item.to_owned()));
        };
        let unknown = || SpecError::UnknownFormat {
            item: item.to_owned(),
            format: format.to_owned(),
        };
        let letters = format.trim_end_matches(|c: char| c.is_ascii_digit());
        let size = &format[letters.len()..];
        let kind = match letters {
            "" | "d" => ValueFormat::Signed,
            "u" => ValueFormat::Unsigned,
            "x" => ValueFormat::Hex,
            "c" => ValueFormat::Char,
            "p" => ValueFormat::Pointer,
            "s" => ValueFormat::String { max: string_size },
            _ => return Err(unknown()),
        };
        let mut spec = ValueSpec::new(source, kind);
        if !size.is_empty() {
            spec.bits = match size {
                "8" | "16" | "32" | "64" => size.parse().map_err(|_| unknown())?,
                _ => return Err(unknown()),
            };
            if matches!(kind, ValueFormat::String { .. } | ValueFormat::Pointer) && spec.bits != 64
            {
                return Err(unknown());
            }
        }
        Ok(spec)
    }

    fn is_string(&self) -> bool {
        matches!(self.format, ValueFormat::String { .. })
    }

    /// The low `bits` of `raw`.
    fn truncated(&self, raw: u64) -> u64 {
        match self.bits {
            64 => raw,
            bits => raw & ((1u64 << bits) - 1),
        }
    }

    /// `raw` shown as this spec says (strings aside).
    fn write_integer(&self, raw: u64, out: &mut String) {
        let value = self.truncated(raw);
        // Writing to a String cannot fail.
        let _ = match self.format {
            ValueFormat::Signed => {
                let shift = 64 - u32::from(self.bits);
                write!(out, "{}", ((value << shift) as i64) >> shift)
            }
            ValueFormat::Unsigned => write!(out, "{value}"),
            ValueFormat::Hex | ValueFormat::Pointer | ValueFormat::String { .. } => {
                write!(out, "{value:#x}")
            }
            ValueFormat::Char => {
                out.push('\'');
                escape(&[value as u8], '\'', out);
                out.push('\'');
                Ok(())
            }
        };
    }
}

/// The text of a spec, as the user wrote it (`arg2/u8`).
impl std::fmt::Display for ValueSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.source {
            ValueSource::Argument(n) => write!(f, "arg{n}")?,
            ValueSource::Return => f.write_str("retval")?,
        }
        let letter = match self.format {
            ValueFormat::Signed => "",
            ValueFormat::Unsigned => "u",
            ValueFormat::Hex => "x",
            ValueFormat::Char => "c",
            ValueFormat::Pointer => "p",
            ValueFormat::String { .. } => "s",
        };
        match (letter, self.bits) {
            ("", 64) => Ok(()),
            (letter, 64) | (letter @ "c", _) => write!(f, "/{letter}"),
            (letter, bits) => write!(f, "/{letter}{bits}"),
        }
    }
}

/// The specs of `specs` an entry captures (arguments) or an exit (the return value), in order.
pub fn captured_at(specs: &[ValueSpec], exit: bool) -> impl Iterator<Item = &ValueSpec> {
    specs
        .iter()
        .filter(move |spec| (spec.source == ValueSource::Return) == exit)
}

/// The values of `bytes`, captured for `specs` at an entry (`exit == false`) or an exit, shown
/// as text and separated by `", "`, each argument after its name where `names` (by argument
/// number) has one (`count=5`); a value cut short (a damaged file) shows as `?`.
pub fn format_values(specs: &[ValueSpec], names: &[String], exit: bool, bytes: &[u8]) -> String {
    let texts: Vec<String> = value_texts(specs, exit, bytes)
        .into_iter()
        .map(|(spec, text)| match argument_name(spec, names) {
            Some(name) => format!("{name}={text}"),
            None => text,
        })
        .collect();
    texts.join(", ")
}

/// The name `names` (by argument number) gives the argument `spec` captures, if any.
fn argument_name<'n>(spec: &ValueSpec, names: &'n [String]) -> Option<&'n str> {
    let ValueSource::Argument(number) = spec.source else {
        return None;
    };
    let name = names.get(usize::from(number).checked_sub(1)?)?;
    (!name.is_empty()).then_some(name.as_str())
}

/// Each value of `bytes` with its spec, as [`format_values`] shows it.
pub fn value_texts<'s>(
    specs: &'s [ValueSpec],
    exit: bool,
    bytes: &[u8],
) -> Vec<(&'s ValueSpec, String)> {
    let mut rest = bytes;
    captured_at(specs, exit)
        .map(|spec| {
            let mut text = String::new();
            if !write_value(spec, &mut rest, &mut text) {
                text = "?".to_owned();
                rest = &[];
            }
            (spec, text)
        })
        .collect()
}

/// The name of the value a spec captures, as Chrome traces name it (`arg2`, `retval`, or the
/// argument's name where `names`, by argument number, has it).
pub fn value_name(spec: &ValueSpec, names: &[String]) -> String {
    if let Some(name) = argument_name(spec, names) {
        return name.to_owned();
    }
    match spec.source {
        ValueSource::Argument(n) => format!("arg{n}"),
        ValueSource::Return => "retval".to_owned(),
    }
}

/// One captured value as its bytes hold it.
enum Captured<'a> {
    Integer(u64),
    /// A string's pointer and the bytes read, or the (negative) count that says they were not.
    String {
        pointer: u64,
        read: Result<&'a [u8], i16>,
    },
}

/// The value of `spec` at the start of `rest`, which moves past it; None (and `rest` as it was)
/// when `rest` is too short.
fn take_value<'a>(spec: &ValueSpec, rest: &mut &'a [u8]) -> Option<Captured<'a>> {
    let (raw, after) = take_u64(rest)?;
    if !spec.is_string() {
        *rest = after;
        return Some(Captured::Integer(raw));
    }
    let (count, after) = after.split_first_chunk::<2>()?;
    let count = i16::from_le_bytes(*count);
    let (read, after) = match usize::try_from(count) {
        Ok(length) => {
            let (text, after) = after.split_at_checked(length)?;
            (Ok(text), after)
        }
        Err(_) => (Err(count), after),
    };
    *rest = after;
    Some(Captured::String { pointer: raw, read })
}

/// Writes the value at the start of `rest` and moves past it; false when `rest` is too short.
fn write_value(spec: &ValueSpec, rest: &mut &[u8], out: &mut String) -> bool {
    let Some(value) = take_value(spec, rest) else {
        return false;
    };
    match value {
        Captured::Integer(raw) => spec.write_integer(raw, out),
        Captured::String { pointer: 0, .. } => out.push_str("(null)"),
        Captured::String {
            pointer,
            read: Err(count),
        } => {
            // Unreadable: its address says more than nothing, and why, where the recorder
            // found out.
            spec.write_integer(pointer, out);
            if let Some(why) = Unreadable::of_count(count) {
                let _ = write!(out, " <unreadable: {why}>");
            }
        }
        Captured::String { read: Ok(text), .. } => {
            let max = match spec.format {
                ValueFormat::String { max } => usize::from(max),
                _ => text.len(),
            };
            let shown = &text[..text.len().min(max)];
            out.push('"');
            escape(shown, '"', out);
            out.push('"');
            if text.len() > shown.len() {
                out.push_str("...");
            }
        }
    }
    true
}

/// Why the recorder could not read a string the probe could not read either. Stored as the
/// string's count, below the errors the probe writes (-1 to -4095: those show the address
/// alone, as in files written before the recorder read strings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreadable {
    /// No mapping of the process holds the address.
    NotMapped,
    /// The string was in memory only the process held, and it had ended.
    ProcessEnded,
}

impl Unreadable {
    const COUNT_BASE: i32 = -4096;
    const ALL: [Unreadable; 2] = [Unreadable::NotMapped, Unreadable::ProcessEnded];

    /// The count that stores it.
    pub fn count(self) -> i16 {
        (Self::COUNT_BASE - self as i32) as i16
    }

    fn of_count(count: i16) -> Option<Unreadable> {
        Self::ALL.into_iter().find(|why| why.count() == count)
    }
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unreadable::NotMapped => "not mapped",
            Unreadable::ProcessEnded => "process ended",
        })
    }
}

/// `bytes`, captured for `specs` at an entry (`exit == false`) or an exit, with every string
/// the probe could not read given what `read` finds at its pointer (at most the spec's size and
/// one byte more, which marks a string cut) or why it finds nothing; None when there was no such
/// string, as is usual.
pub fn with_unread_strings(
    specs: &[ValueSpec],
    exit: bool,
    bytes: &[u8],
    mut read: impl FnMut(u64, u16) -> Result<Vec<u8>, Unreadable>,
) -> Option<Vec<u8>> {
    let mut rest = bytes;
    let mut out: Option<Vec<u8>> = None;
    for spec in captured_at(specs, exit) {
        let start = bytes.len() - rest.len();
        let Some(value) = take_value(spec, &mut rest) else {
            break;
        };
        let (
            Captured::String {
                pointer: pointer @ 1..,
                read: Err(_),
            },
            ValueFormat::String { max },
        ) = (value, spec.format)
        else {
            if let Some(out) = &mut out {
                out.extend_from_slice(&bytes[start..bytes.len() - rest.len()]);
            }
            continue;
        };
        let out = out.get_or_insert_with(|| bytes[..start].to_vec());
        out.extend(pointer.to_le_bytes());
        match read(pointer, max) {
            Ok(mut text) => {
                text.truncate(usize::from(max) + 1);
                out.extend((text.len() as i16).to_le_bytes());
                out.extend(text);
            }
            Err(why) => out.extend(why.count().to_le_bytes()),
        }
    }
    // What follows the values (a stack id) or was cut short stays as it was.
    let mut out = out?;
    out.extend_from_slice(rest);
    Some(out)
}

fn take_u64(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let (head, rest) = bytes.split_first_chunk::<8>()?;
    Some((u64::from_le_bytes(*head), rest))
}

/// Appends `bytes` as C escapes them, inside quotes `quote`.
fn escape(bytes: &[u8], quote: char, out: &mut String) {
    for &byte in bytes {
        match byte {
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\r' => out.push_str("\\r"),
            b'\0' => out.push_str("\\0"),
            b'\\' => out.push_str("\\\\"),
            _ if char::from(byte) == quote => {
                out.push('\\');
                out.push(quote);
            }
            0x20..=0x7e => out.push(char::from(byte)),
            _ => {
                let _ = write!(out, "\\x{byte:02x}");
            }
        }
    }
}

/// The item bytes of `specs` as the BPF side's `struct value_spec` holds them: the source (0 for
/// the return value, N for argument N) and the string bit; then, for a function that captures
/// its user stack (`--stack`), the stack item, last.
pub fn bpf_items(specs: &[ValueSpec], user_stack: bool) -> Vec<u8> {
    let stack = user_stack.then_some(STACK_ITEM);
    specs
        .iter()
        .map(|spec| {
            let source = match spec.source {
                ValueSource::Argument(n) => n,
                ValueSource::Return => 0,
            };
            source | if spec.is_string() { STRING_ITEM } else { 0 }
        })
        .chain(stack)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> ValueSpec {
        ValueSpec::parse(text, 8).unwrap()
    }

    fn integer(value: u64) -> Vec<u8> {
        value.to_le_bytes().to_vec()
    }

    fn string(pointer: u64, count: i16, text: &[u8]) -> Vec<u8> {
        let mut bytes = integer(pointer);
        bytes.extend(count.to_le_bytes());
        bytes.extend(text);
        bytes
    }

    #[test]
    fn specs_parse_and_print_back() {
        for text in [
            "arg1",
            "arg2/u8",
            "retval/x32",
            "arg1/s",
            "arg7/c",
            "arg3/p",
            "arg4/u",
        ] {
            assert_eq!(spec(text).to_string(), text);
        }
        assert_eq!(spec("arg2/d").to_string(), "arg2");
        assert_eq!(spec("arg2/32").bits, 32);
        assert_eq!(spec("retval").source, ValueSource::Return);
        assert_eq!(
            spec("arg1/s").format,
            ValueFormat::String { max: 8 },
            "strings take the string size"
        );
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let error = |text| ValueSpec::parse(text, 8).unwrap_err().to_string();
        assert_eq!(error("arg0"), "`arg0`: argument numbers go from 1 to 63");
        assert_eq!(error("arg64"), "`arg64`: argument numbers go from 1 to 63");
        assert_eq!(
            error("argx"),
            "`argx` is not argN (N from 1), fpargN or retval"
        );
        assert_eq!(
            error("ret"),
            "`ret` is not argN (N from 1), fpargN or retval"
        );
        assert!(error("arg1/q").starts_with("`arg1/q`: unknown format `q`"));
        assert!(error("arg1/u12").starts_with("`arg1/u12`: unknown format"));
        assert!(error("arg1/s32").starts_with("`arg1/s32`: unknown format"));
        assert!(error("fparg1").contains("vector registers"));
        assert!(error("retval/f").contains("vector registers"));
    }

    #[test]
    fn integers_show_as_their_format_says() {
        let cases = [
            ("arg1", u64::MAX, "-1"),
            ("arg1/u", u64::MAX, "18446744073709551615"),
            ("arg1/u8", 0x1ff, "255"),
            ("arg1/8", 0xff, "-1"),
            ("arg1/32", 0xffff_fffe, "-2"),
            ("arg1/x32", 0x1_0000_00ab, "0xab"),
            ("arg1/x", 255, "0xff"),
            ("arg1/c", u64::from(b'A'), "'A'"),
            ("arg1/c", u64::from(b'\n'), "'\\n'"),
            ("arg1/c", u64::from(b'\''), "'\\''"),
            ("arg1/p", 0x7fff_0000, "0x7fff0000"),
        ];
        for (text, value, shown) in cases {
            assert_eq!(
                format_values(&[spec(text)], &[], false, &integer(value)),
                shown,
                "{text}"
            );
        }
    }

    #[test]
    fn strings_are_quoted_escaped_and_cut() {
        let s = [spec("arg1/s")];
        let shown = |bytes: Vec<u8>| format_values(&s, &[], false, &bytes);
        assert_eq!(shown(string(0x1000, 6, b"hi\n\"x\"")), "\"hi\\n\\\"x\\\"\"");
        assert_eq!(shown(string(0, -14, b"")), "(null)");
        assert_eq!(shown(string(0x1234, -14, b"")), "0x1234");
        assert_eq!(shown(string(0x1000, 9, b"abcdefghi")), "\"abcdefgh\"...");
        assert_eq!(shown(string(0x1000, 8, b"abcdefgh")), "\"abcdefgh\"");
    }

    #[test]
    fn an_unreadable_string_says_why_where_the_recorder_found_out() {
        let s = [spec("arg1/s")];
        let shown = |count: i16| format_values(&s, &[], false, &string(0x1234, count, b""));
        assert_eq!(
            shown(Unreadable::NotMapped.count()),
            "0x1234 <unreadable: not mapped>"
        );
        assert_eq!(
            shown(Unreadable::ProcessEnded.count()),
            "0x1234 <unreadable: process ended>"
        );
        // The probe's own errors (and every count an older file holds): the address alone.
        assert_eq!(shown(-14), "0x1234");
        assert_eq!(shown(-4095), "0x1234");
        assert_eq!(shown(i16::MIN), "0x1234");
    }

    #[test]
    fn unread_strings_are_read_in_place_and_the_rest_kept() {
        let specs = [spec("arg1"), spec("arg2/s"), spec("arg3/s"), spec("arg4/s")];
        let mut bytes = integer(7);
        bytes.extend(string(0x10, -14, b""));
        bytes.extend(string(0x20, 2, b"ok"));
        bytes.extend(string(0x30, -14, b""));
        // The stack id after the values.
        bytes.extend(integer(99));
        let mut asked = Vec::new();
        let read = with_unread_strings(&specs, false, &bytes, |pointer, max| {
            asked.push((pointer, max));
            match pointer {
                0x10 => Ok(b"a longer one".to_vec()),
                _ => Err(Unreadable::ProcessEnded),
            }
        })
        .unwrap();
        assert_eq!(asked, [(0x10, 8), (0x30, 8)]);
        let mut expected = integer(7);
        // At most the size and one byte more, which says the string was cut.
        expected.extend(string(0x10, 9, b"a longer "));
        expected.extend(string(0x20, 2, b"ok"));
        expected.extend(string(0x30, Unreadable::ProcessEnded.count(), b""));
        expected.extend(integer(99));
        assert_eq!(read, expected);
        assert_eq!(
            format_values(&specs, &[], false, &read),
            "7, \"a longer\"..., \"ok\", 0x30 <unreadable: process ended>"
        );
    }

    #[test]
    fn strings_read_null_or_of_the_other_side_are_left_alone() {
        let specs = [spec("arg1/s"), spec("retval/s")];
        let never = |_, _| -> Result<Vec<u8>, Unreadable> { panic!("nothing to read") };
        let entry = string(0, -14, b"");
        assert_eq!(with_unread_strings(&specs, false, &entry, never), None);
        let exit = string(0x40, 3, b"abc");
        assert_eq!(with_unread_strings(&specs, true, &exit, never), None);
        // Cut short (a damaged record): nothing read, nothing changed.
        assert_eq!(with_unread_strings(&specs, false, &entry[..9], never), None);
    }

    #[test]
    fn only_the_values_of_one_side_are_shown_in_order() {
        let specs = [spec("arg1"), spec("retval/x"), spec("arg2/s")];
        let mut bytes = integer(7);
        bytes.extend(string(0x10, 2, b"ok"));
        assert_eq!(format_values(&specs, &[], false, &bytes), "7, \"ok\"");
        assert_eq!(format_values(&specs, &[], true, &integer(16)), "0x10");
        assert_eq!(bpf_items(&specs, false), [1, 0, 2 | 0x80]);
        assert_eq!(bpf_items(&specs, true), [1, 0, 2 | 0x80, 0x40]);
    }

    #[test]
    fn arguments_show_after_their_names_where_known() {
        let names = ["fd".to_owned(), String::new()];
        let specs = [spec("arg1"), spec("arg2"), spec("arg3"), spec("retval")];
        let mut bytes = integer(1);
        bytes.extend(integer(2));
        bytes.extend(integer(3));
        assert_eq!(format_values(&specs, &names, false, &bytes), "fd=1, 2, 3");
        assert_eq!(format_values(&specs, &names, true, &integer(4)), "4");
        assert_eq!(value_name(&specs[0], &names), "fd");
        assert_eq!(value_name(&specs[1], &names), "arg2");
    }

    #[test]
    fn bytes_cut_short_show_a_question_mark() {
        let specs = [spec("arg1"), spec("arg2"), spec("arg3/s")];
        assert_eq!(format_values(&specs, &[], false, &integer(1)), "1, ?, ?");
        let mut bytes = integer(1);
        bytes.extend(integer(2));
        bytes.extend(string(0x10, 5, b"ab"));
        assert_eq!(format_values(&specs, &[], false, &bytes), "1, 2, ?");
    }
}
