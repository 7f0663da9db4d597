//! Property tests of the ELF reader over mutations of a compiled fixture: bytes overwritten
//! (mostly in the headers and tables, where a parser trusts offsets and counts), cuts, and
//! hostile counts in the headers. No mutation may panic. Parsed in memory, through
//! [`functions_in`], so a case costs no file.

use std::path::Path;
use std::sync::OnceLock;

use proptest::prelude::*;
use tempfile::TempDir;

use super::tests::compile;
use super::{functions_in, SitePolicy};
use crate::fuzz_cases::config;

/// The fixture's bytes, compiled once per test run (PLT stubs, `.symtab`, `.dynsym`).
fn fixture() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let dir = TempDir::new().unwrap();
        let source = concat!(env!("CARGO_MANIFEST_DIR"), "/src/elf/testdata/fixture.c");
        std::fs::read(compile(&dir, "cc", source, "fixture", &[])).unwrap()
    })
}

/// Where in the file a mutation lands: the first and last 2 KiB hold the ELF and program
/// headers, `.dynsym` and the relocations, and the section headers.
fn position(len: usize) -> impl Strategy<Value = usize> {
    let edge = len.min(0x800);
    prop_oneof![
        2 => 0..edge,
        1 => (len - edge)..len,
        1 => 0..len,
    ]
}

/// A field of the ELF header or of the first program or section header, with a hostile value.
fn hostile_field() -> impl Strategy<Value = (usize, u64)> {
    let values = prop_oneof![
        Just(0u64),
        Just(u64::MAX),
        Just(u64::from(u32::MAX)),
        Just(u64::from(u16::MAX)),
        Just(1u64 << 40),
        any::<u64>(),
    ];
    // e_entry, e_phoff, e_shoff, e_phnum/e_shnum/e_shstrndx (16-bit, read from the low bytes).
    (
        prop::sample::select(vec![24usize, 32, 40, 56, 60, 62]),
        values,
    )
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn overwritten_bytes_never_panic(
        changes in prop::collection::vec((position(fixture().len()), any::<u8>()), 1..16),
    ) {
        let mut bytes = fixture().to_vec();
        for (at, value) in changes {
            bytes[at] = value;
        }
        let _ = functions_in(Path::new("fuzzed"), &bytes, SitePolicy::Best);
    }

    #[test]
    fn cut_files_never_panic(len in 0..fixture().len()) {
        let _ = functions_in(Path::new("cut"), &fixture()[..len], SitePolicy::Best);
    }

    #[test]
    fn hostile_header_fields_never_panic((at, value) in hostile_field(), extra in any::<(u16, u8)>()) {
        let mut bytes = fixture().to_vec();
        let width = if at >= 56 { 2 } else { 8 };
        bytes[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        // And one more byte anywhere, to meet the damage somewhere else too.
        let (where_, byte) = extra;
        let where_ = usize::from(where_) % bytes.len();
        bytes[where_] = byte;
        let _ = functions_in(Path::new("hostile"), &bytes, SitePolicy::Best);
    }
}
