//! Tests on real ELF files: fixtures compiled from `testdata/` at test time, checked against
//! what binutils (`objdump`, `readelf`) say about the same files.
//!
//! The tests need `cc`, `c++`, `objdump`, `readelf` and `strip`. When one is missing they fail
//! and say which; they never skip.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use super::*;

const FIXTURE_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/elf/testdata/fixture.c");
const FIXTURE_CPP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/elf/testdata/fixture.cpp");
const IFUNC_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/elf/testdata/ifunc.c");

// ---------------------------------------------------------------------------------------------
// Running the tools

/// Runs a tool and returns its standard output; fails the test with a clear message when the
/// tool is missing or fails.
pub(crate) fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "cannot run `{program}` ({error}): the elf tests need gcc, g++ and binutils \
             (cc, c++, objdump, readelf, strip) on PATH; install them"
            )
        });
    assert!(
        output.status.success(),
        "`{program} {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("tool output is UTF-8")
}

/// Compiles `source` with `compiler` and `flags` into `dir/name`.
pub(crate) fn compile(
    dir: &TempDir,
    compiler: &str,
    source: &str,
    name: &str,
    flags: &[&str],
) -> PathBuf {
    let out = dir.path().join(name);
    let out_str = out.to_str().expect("temp path is UTF-8");
    let mut args = vec!["-O2", "-g"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[source, "-o", out_str]);
    run(compiler, &args);
    out
}

/// Splits the debug information of `program` (in `dir`) into `dir/<its name>.debug`, strips the
/// program and links it to that file (`.gnu_debuglink`), as distributions ship them; returns
/// the debug file's path.
pub(crate) fn split_off_debug_file(dir: &TempDir, program: &Path) -> PathBuf {
    let program_str = program.to_str().expect("temp path is UTF-8");
    let name = program.file_name().expect("a file").to_string_lossy();
    let debug = dir.path().join(format!("{name}.debug"));
    let debug_str = debug.to_str().expect("temp path is UTF-8");
    run("objcopy", &["--only-keep-debug", program_str, debug_str]);
    run("strip", &["--strip-all", program_str]);
    let link = format!("--add-gnu-debuglink={debug_str}");
    run("objcopy", &[&link, program_str]);
    debug
}

/// The fixture builds of `fixture.c`: (name, flags).
const C_VARIANTS: &[(&str, &[&str])] = &[
    ("pie", &[]),
    ("no-pie", &["-no-pie"]),
    // Distributions without IBT-marked crt files need `-z ibtplt` to get `.plt.sec`.
    ("cet", &["-fcf-protection=full", "-Wl,-z,ibtplt"]),
    ("now", &["-Wl,-z,now"]),
    ("no-plt", &["-fno-plt"]),
    ("shared", &["-shared", "-fPIC", "-DFIXTURE_LIBRARY"]),
];

// ---------------------------------------------------------------------------------------------
// What binutils says

/// `objdump -d`: every labelled address (`0000000000001030 <qsort@plt>:`) with its label and
/// the bytes of its first instruction.
struct Disassembly {
    labels: BTreeMap<u64, (String, Vec<u8>)>,
}

impl Disassembly {
    fn of(path: &Path) -> Self {
        let text = run("objdump", &["-d", "-w", path.to_str().unwrap()]);
        let mut labels = BTreeMap::new();
        let mut pending: Option<(u64, String)> = None;
        for line in text.lines() {
            if let Some((address, label)) = parse_label(line) {
                pending = Some((address, label));
            } else if let Some((address, label)) = pending.take() {
                // The first instruction: `    1030:\tff 25 ca 2f 00 00 \tjmp ...`
                let bytes = line
                    .split('\t')
                    .nth(1)
                    .map(|hex| {
                        hex.split_whitespace()
                            .map_while(|byte| u8::from_str_radix(byte, 16).ok())
                            .collect()
                    })
                    .unwrap_or_default();
                labels.insert(address, (label, bytes));
            }
        }
        Disassembly { labels }
    }

    /// The PLT stubs objdump names: address → name (`qsort@plt`).
    fn plt(&self) -> BTreeMap<u64, String> {
        self.labels
            .iter()
            .filter(|(_, (label, _))| label.ends_with("@plt"))
            .map(|(&address, (label, _))| (address, label.clone()))
            .collect()
    }
}

pub(super) fn parse_label(line: &str) -> Option<(u64, String)> {
    let (address, rest) = line.split_once(" <")?;
    let label = rest.strip_suffix(">:")?;
    Some((u64::from_str_radix(address, 16).ok()?, label.to_owned()))
}

/// `readelf -sW`: a symbol of `.symtab` or `.dynsym`.
struct ElfSymbol {
    address: u64,
    size: u64,
    kind: String,
    binding: String,
    defined: bool,
    name: String,
}

/// The entry point address from `readelf -hW`.
fn readelf_entry(path: &Path) -> u64 {
    let text = run("readelf", &["-hW", path.to_str().unwrap()]);
    let field = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("Entry point address:"))
        .expect("readelf -h names the entry point");
    u64::from_str_radix(field.trim().trim_start_matches("0x"), 16).unwrap()
}

fn readelf_symbols(path: &Path) -> Vec<ElfSymbol> {
    let text = run("readelf", &["-sW", path.to_str().unwrap()]);
    let mut symbols = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // Num: Value Size Type Bind Vis Ndx Name
        let [num, value, size, kind, binding, _vis, ndx, name, ..] = fields[..] else {
            continue;
        };
        if !num.ends_with(':') {
            continue;
        }
        // readelf prints sizes in decimal, but from 100000 on in hex (`0x1bcfa`).
        let size = match size.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => size.parse::<u64>(),
        };
        let (Ok(address), Ok(size)) = (u64::from_str_radix(value, 16), size) else {
            continue;
        };
        symbols.push(ElfSymbol {
            address,
            size,
            kind: kind.to_owned(),
            binding: binding.to_owned(),
            defined: ndx != "UND",
            // `.dynsym` names carry their version: `puts@GLIBC_2.2.5`, `foo@@VERS`.
            name: name.split('@').next().unwrap().to_owned(),
        });
    }
    symbols
}

/// `readelf -lW`: the executable `LOAD` segments as (offset, vaddr, filesz).
pub(super) fn readelf_executable_loads(path: &Path) -> Vec<(u64, u64, u64)> {
    let text = run("readelf", &["-lW", path.to_str().unwrap()]);
    let hex = |field: &str| u64::from_str_radix(field.trim_start_matches("0x"), 16).unwrap();
    text.lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .filter(|fields| fields.first() == Some(&"LOAD") && fields.len() >= 8)
        // LOAD Offset VirtAddr PhysAddr FileSiz MemSiz Flg(s: `R E`) Align
        .filter(|fields| fields[6..fields.len() - 1].iter().any(|f| f.contains('E')))
        .map(|fields| (hex(fields[1]), hex(fields[2]), hex(fields[4])))
        .collect()
}

pub(super) fn expected_offset(loads: &[(u64, u64, u64)], address: u64) -> Option<u64> {
    loads
        .iter()
        .find(|&&(_, vaddr, filesz)| address >= vaddr && address < vaddr + filesz)
        .map(|&(offset, vaddr, _)| address - vaddr + offset)
}

// ---------------------------------------------------------------------------------------------
// Checks shared by the fixtures

/// Checks `functions` of `path` against binutils: PLT stubs against the labels of
/// `objdump -d`, and [`check_symbols_and_offsets`].
pub(super) fn check_against_binutils(path: &Path, elf: &ElfFunctions) {
    check_plt_labels(path, &elf.functions);
    check_symbols_and_offsets(path, elf);
}

fn check_plt_labels(path: &Path, functions: &[FunctionSymbol]) {
    let what = path.display();
    let disassembly = Disassembly::of(path);
    let symbols = readelf_symbols(path);

    // PLT stubs: exactly the ones objdump names, at the same addresses. objdump names ifunc
    // stubs `*ABS*+0x<resolver>@plt`; utrace names them after an ifunc symbol at the resolver.
    let expected_plt: BTreeMap<u64, Vec<String>> = disassembly
        .plt()
        .into_iter()
        .map(|(address, label)| {
            let name = label.strip_suffix("@plt").unwrap();
            let names = match name.strip_prefix("*ABS*+0x") {
                Some(resolver) => {
                    let resolver = u64::from_str_radix(resolver, 16).unwrap();
                    symbols
                        .iter()
                        .filter(|s| s.kind == "IFUNC" && s.address == resolver)
                        .map(|s| s.name.clone())
                        .chain([name.to_owned()])
                        .collect()
                }
                None => vec![name.to_owned()],
            };
            let names = names
                .iter()
                .map(|name| format!("{}@plt", demangle(name)))
                .collect();
            (address, names)
        })
        .collect();
    let plt: BTreeMap<u64, &str> = functions
        .iter()
        .filter(|f| f.kind == FunctionKind::Plt)
        .map(|f| (f.address, f.name.as_str()))
        .collect();
    assert_eq!(
        plt.keys().collect::<Vec<_>>(),
        expected_plt.keys().collect::<Vec<_>>(),
        "{what}: PLT stub addresses against objdump -d"
    );
    for (address, name) in plt {
        let expected = &expected_plt[&address];
        assert!(
            expected.iter().any(|e| e == name),
            "{what}: PLT stub at {address:#x} is {name}, objdump says {expected:?}"
        );
    }
}

/// Checks function symbols (probeable or not) against `readelf -sW`, file offsets against
/// `readelf -lW` and against the bytes objdump shows at each address, and probe sites against the
/// prefixes the kernel refuses.
fn check_symbols_and_offsets(path: &Path, elf: &ElfFunctions) {
    let functions = &elf.functions;
    let what = path.display();
    let disassembly = Disassembly::of(path);
    let symbols = readelf_symbols(path);
    let loads = readelf_executable_loads(path);
    let file = std::fs::read(path).unwrap();

    assert!(
        functions.windows(2).all(|w| w[0].address < w[1].address),
        "{what}: sorted by address, one per address"
    );

    // Function symbols: every defined, sized STT_FUNC symbol but the `.cold` fragments and the
    // entry point (never called), one per address, with a name and a size of one of the symbols
    // there.
    let entry = readelf_entry(path);
    let mut expected: BTreeMap<u64, Vec<&ElfSymbol>> = BTreeMap::new();
    for symbol in &symbols {
        if symbol.kind == "FUNC"
            && symbol.defined
            && symbol.size > 0
            && symbol.address != entry
            && !symbols::is_cold_fragment(&symbol.name)
        {
            expected.entry(symbol.address).or_default().push(symbol);
        }
    }
    let actual: BTreeMap<u64, &FunctionSymbol> = functions
        .iter()
        .filter(|f| f.kind == FunctionKind::Function)
        .map(|f| (f.address, f))
        .collect();
    let mut actual_addresses: BTreeSet<u64> = actual.keys().copied().collect();
    for function in &elf.unprobeable {
        assert!(
            actual_addresses.insert(function.address),
            "{what}: {} at {:#x} both probeable and not",
            function.name,
            function.address
        );
    }
    let expected_addresses: BTreeSet<u64> = expected.keys().copied().collect();
    assert_eq!(
        actual_addresses,
        expected_addresses,
        "{what}: function addresses against readelf -sW (only ours: {:x?}, only readelf: {:x?})",
        actual_addresses
            .difference(&expected_addresses)
            .take(10)
            .collect::<Vec<_>>(),
        expected_addresses
            .difference(&actual_addresses)
            .take(10)
            .collect::<Vec<_>>(),
    );
    for (address, function) in &actual {
        // Aliases: the name comes from a symbol of the strongest binding there.
        let binding_rank = |s: &ElfSymbol| match s.binding.as_str() {
            "GLOBAL" | "UNIQUE" => 0,
            "WEAK" => 1,
            _ => 2,
        };
        let candidates = &expected[address];
        let strongest = candidates.iter().map(|s| binding_rank(s)).min();
        assert!(
            candidates.iter().any(|s| demangle(&s.name) == function.name
                && s.size == function.size
                && Some(binding_rank(s)) == strongest),
            "{what}: {} at {address:#x} (size {}) is none of the strongest symbols readelf shows \
             there",
            function.name,
            function.size
        );
    }

    // File offsets: from readelf's program headers, and the bytes there are the ones objdump
    // disassembles at the address. Probes sit at the entry unless the kernel cannot probe it.
    for function in functions {
        let entry = function.offset - function.site.offset_in_function;
        assert_eq!(
            Some(entry),
            expected_offset(&loads, function.address),
            "{what}: file offset of {} against readelf -lW",
            function.name
        );
        let at = |offset: u64| &file[usize::try_from(offset).unwrap()..];
        assert!(
            site::kernel_can_probe(at(function.offset)),
            "{what}: the probe site of {} has a prefix the kernel refuses",
            function.name
        );
        assert_eq!(
            function.site.kind == SiteKind::Entry,
            function.site.offset_in_function == 0,
            "{what}: {} at {:?}",
            function.name,
            function.site
        );
        if function.site.kind == SiteKind::AfterEndbr64 {
            assert!(
                at(entry).starts_with(&[0xf3, 0x0f, 0x1e, 0xfa]),
                "{what}: {} moved past an endbr64 it does not start with",
                function.name
            );
        }
        if function.site.kind == SiteKind::AfterUnprobeablePrefix {
            assert!(
                !site::kernel_can_probe(at(entry)),
                "{what}: the probe site of {} moved from a probeable entry",
                function.name
            );
        }
        if let Some((label, first)) = disassembly.labels.get(&function.address) {
            let at = usize::try_from(entry).unwrap();
            assert_eq!(
                file.get(at..at + first.len()),
                Some(first.as_slice()),
                "{what}: bytes at the file offset of {} (objdump: <{label}>)",
                function.name
            );
        }
    }
}

fn names(functions: &[FunctionSymbol]) -> BTreeSet<&str> {
    functions.iter().map(|f| f.name.as_str()).collect()
}

// ---------------------------------------------------------------------------------------------
// Fixtures

#[test]
fn c_fixture_in_every_build_matches_binutils() {
    let dir = TempDir::new().unwrap();
    for (variant, flags) in C_VARIANTS {
        let path = compile(&dir, "cc", FIXTURE_C, &format!("fixture-{variant}"), flags);
        let elf = read_elf_functions(&path).unwrap();
        check_against_binutils(&path, &elf);
        let functions = elf.functions;

        let names = names(&functions);
        let what = path.display();
        for name in [
            "checked_parse",
            "report_failure",
            "compare_ints",
            "fixture_main",
        ] {
            assert!(names.contains(name), "{what}: {name} missing: {names:?}");
        }
        assert!(
            names.iter().any(|n| n.starts_with("sort_and_sum")),
            "{what}: the static sort_and_sum (or its GCC clone) missing"
        );
        assert!(!names.contains("global_counter"), "{what}: a variable");
        // The weak alias and its function are one function, named after the global symbol.
        assert!(names.contains("fixture_plain"), "{what}: fixture_plain");
        assert!(!names.contains("fixture_alias"), "{what}: alias kept");
        // The cold fragment exists, and is left out.
        let emitted = readelf_symbols(&path)
            .iter()
            .any(|s| s.name == "checked_parse.cold");
        assert!(emitted, "{what}: gcc did not emit checked_parse.cold");
        assert!(
            !names.iter().any(|n| n.contains(".cold")),
            "{what}: .cold fragment kept"
        );
        // Calls into libc through the PLT (`-fno-plt` calls through the GOT instead).
        if *variant != "no-plt" {
            for name in ["qsort@plt", "puts@plt", "getpid@plt", "strtol@plt"] {
                assert!(names.contains(name), "{what}: {name} missing: {names:?}");
            }
        }
        if *variant != "no-pie" && *variant != "shared" {
            assert!(names.contains("__cxa_finalize@plt"), "{what}: .plt.got");
        }
    }
}

#[test]
fn cet_build_names_the_stubs_in_plt_sec() {
    let dir = TempDir::new().unwrap();
    let (_, flags) = C_VARIANTS.iter().find(|(v, _)| *v == "cet").unwrap();
    let path = compile(&dir, "cc", FIXTURE_C, "fixture-cet", flags);
    let sections = run("readelf", &["-SW", path.to_str().unwrap()]);
    let plt_sec = sections
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let at = fields.iter().position(|f| *f == ".plt.sec")?;
            let address = u64::from_str_radix(fields.get(at + 2)?, 16).ok()?;
            let size = u64::from_str_radix(fields.get(at + 4)?, 16).ok()?;
            Some(address..address + size)
        })
        .expect("the CET build has a .plt.sec section");
    let functions = read_function_symbols(&path).unwrap();
    let qsort = functions.iter().find(|f| f.name == "qsort@plt").unwrap();
    assert!(plt_sec.contains(&qsort.address), "qsort@plt in .plt.sec");
    assert_eq!(qsort.size, 16);
}

#[test]
fn ifunc_stubs_are_named_after_the_ifunc() {
    let dir = TempDir::new().unwrap();
    for (variant, flags) in [("pie", &[][..]), ("no-pie", &["-no-pie"][..])] {
        let path = compile(&dir, "cc", IFUNC_C, &format!("ifunc-{variant}"), flags);
        let elf = read_elf_functions(&path).unwrap();
        check_against_binutils(&path, &elf);
        let functions = elf.functions;
        assert!(names(&functions).contains("add_one@plt"), "{variant}");
    }
}

/// A static executable has no dynamic relocations and objdump gives its stubs no `@plt` labels:
/// each `jmp *slot(%rip)` objdump disassembles in `.plt` is matched to the IRELATIVE relocation
/// of its slot (`readelf -rW`), whose addend is where the ifunc symbols point.
#[test]
fn static_executable_has_its_8_byte_ifunc_stubs() {
    let dir = TempDir::new().unwrap();
    // Needs the static C library (Debian: libc6-dev; Fedora: glibc-static).
    let path = compile(&dir, "cc", IFUNC_C, "ifunc-static", &["-static", "-no-pie"]);
    let path_str = path.to_str().unwrap();
    let elf = read_elf_functions(&path).unwrap();
    check_symbols_and_offsets(&path, &elf);
    let functions = elf.functions;

    // `  401018:\tff 25 e2 2f 0a 00 \tjmp    *0xa2fe2(%rip)        # 4a4000 <...>`
    let jumps: BTreeMap<u64, u64> = run("objdump", &["-d", "-w", "-j", ".plt", path_str])
        .lines()
        .filter(|line| line.contains("jmp    *") && line.contains("(%rip)"))
        .map(|line| {
            let address = line.split(':').next().unwrap().trim();
            let slot = line.split("# ").nth(1).unwrap().split_whitespace().next();
            (
                u64::from_str_radix(address, 16).unwrap(),
                u64::from_str_radix(slot.unwrap(), 16).unwrap(),
            )
        })
        .collect();
    // `00000000004a40c0  0000000000000025 R_X86_64_IRELATIVE                        41e420`
    let resolvers: BTreeMap<u64, u64> = run("readelf", &["-rW", path_str])
        .lines()
        .filter(|line| line.contains("R_X86_64_IRELATIVE"))
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let hex = |field: &str| u64::from_str_radix(field, 16).unwrap();
            (hex(fields[0]), hex(fields[fields.len() - 1]))
        })
        .collect();
    let symbols = readelf_symbols(&path);
    let stubs: Vec<&FunctionSymbol> = functions
        .iter()
        .filter(|f| f.kind == FunctionKind::Plt)
        .collect();
    assert_eq!(
        stubs.iter().map(|f| f.address).collect::<Vec<_>>(),
        jumps.keys().copied().collect::<Vec<_>>(),
        "stub addresses against objdump -d -j .plt"
    );
    for stub in stubs {
        let resolver = resolvers[&jumps[&stub.address]];
        let ifunc_names: Vec<String> = symbols
            .iter()
            .filter(|s| s.kind == "IFUNC" && s.address == resolver)
            .map(|s| format!("{}@plt", s.name))
            .collect();
        assert!(
            ifunc_names.contains(&stub.name),
            "{} not in {ifunc_names:?}",
            stub.name
        );
        assert_eq!(
            stub.size, 8,
            "static .plt stubs are jmp *slot; xchg %ax,%ax"
        );
    }
    assert!(names(&functions).contains("add_one@plt"));
}

#[test]
fn cpp_fixture_names_are_demangled() {
    let dir = TempDir::new().unwrap();
    let path = compile(&dir, "c++", FIXTURE_CPP, "fixture-cpp", &["-O0"]);
    let elf = read_elf_functions(&path).unwrap();
    check_against_binutils(&path, &elf);
    let functions = elf.functions;
    let names = names(&functions);
    for name in [
        "outer::inner::Widget::get() const",
        "outer::inner::Widget::operator+(outer::inner::Widget const&) const",
        "outer::inner::Widget::operator<(outer::inner::Widget const&) const",
        "long outer::inner::Widget::as<long>() const",
        "use(std::vector<int, std::allocator<int> >&, std::map<std::__cxx11::basic_string<char, \
         std::char_traits<char>, std::allocator<char> >, int, std::less<std::__cxx11::\
         basic_string<char, std::char_traits<char>, std::allocator<char> > >, std::allocator<\
         std::pair<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> \
         > const, int> > >&)",
        "std::vector<int, std::allocator<int> >::at(unsigned long)",
        "operator new(unsigned long)@plt",
        "operator delete(void*, unsigned long)@plt",
        "std::__throw_out_of_range_fmt(char const*, ...)@plt",
        "main",
    ] {
        assert!(names.contains(name), "{name} missing: {names:#?}");
    }
}

/// The C and C++ runtime libraries the fixtures link against: real builds with the layouts the
/// distribution's toolchain produces (ifuncs, `.plt.got`, thousands of C++ stubs).
#[test]
fn system_libraries_match_binutils() {
    for (compiler, library) in [("cc", "libc.so.6"), ("c++", "libstdc++.so.6")] {
        let path = run(compiler, &[&format!("-print-file-name={library}")]);
        let path = PathBuf::from(path.trim());
        assert!(
            path.is_absolute(),
            "`{compiler} -print-file-name={library}` does not find it"
        );
        let elf = read_elf_functions(&path).unwrap();
        check_against_binutils(&path, &elf);
        let functions = elf.functions;
        assert!(
            functions.iter().any(|f| f.kind == FunctionKind::Plt),
            "{library}"
        );
    }
}

/// The unwinder's entry points where readelf puts them in `libgcc_s.so.1`, and none in libc.
#[test]
fn unwinder_entry_points_are_found_in_libgcc_s_only() {
    let library = |name: &str| {
        let path = run("c++", &[&format!("-print-file-name={name}")]);
        PathBuf::from(path.trim())
    };
    let libgcc_s = library("libgcc_s.so.1");
    let loads = readelf_executable_loads(&libgcc_s);
    let expected: BTreeSet<u64> = readelf_symbols(&libgcc_s)
        .iter()
        .filter(|s| s.defined && unwinder::UNWINDER_ENTRY_POINTS.contains(&s.name.as_str()))
        .filter_map(|s| expected_offset(&loads, s.address))
        .collect();
    assert_eq!(expected.len(), unwinder::UNWINDER_ENTRY_POINTS.len());
    let found = ElfFile::open(&libgcc_s).unwrap().unwinder_entry_offsets();
    assert_eq!(found.into_iter().collect::<BTreeSet<u64>>(), expected);
    let libc = library("libc.so.6");
    assert_eq!(
        ElfFile::open(&libc).unwrap().unwinder_entry_offsets(),
        Vec::<u64>::new()
    );
}

// ---------------------------------------------------------------------------------------------
// Errors

fn fixture(dir: &TempDir) -> PathBuf {
    compile(dir, "cc", FIXTURE_C, "fixture", &[])
}

#[test]
fn missing_file_is_an_io_error() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("no-such-file");
    let error = read_function_symbols(&path).unwrap_err();
    assert!(matches!(error, ElfError::Io { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("no-such-file"), "{message}");
    assert!(!message.contains('\n'), "{message}");
}

#[test]
fn directory_is_refused() {
    let dir = TempDir::new().unwrap();
    let error = read_function_symbols(dir.path()).unwrap_err();
    assert!(matches!(error, ElfError::IsDirectory { .. }), "{error:?}");
}

#[test]
fn text_file_is_not_elf() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("script.sh");
    std::fs::write(&path, "#!/bin/sh\necho hello\n").unwrap();
    let error = read_function_symbols(&path).unwrap_err();
    assert!(matches!(error, ElfError::NotElf { .. }), "{error:?}");
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "").unwrap();
    let error = read_function_symbols(&empty).unwrap_err();
    assert!(matches!(error, ElfError::NotElf { .. }), "{error:?}");
}

#[test]
fn stripped_binary_keeps_its_plt_stubs() {
    let dir = TempDir::new().unwrap();
    let path = fixture(&dir);
    let stripped = dir.path().join("fixture-stripped");
    run(
        "strip",
        &[path.to_str().unwrap(), "-o", stripped.to_str().unwrap()],
    );
    let functions = read_function_symbols(&stripped).unwrap();
    assert!(!functions.is_empty());
    assert!(functions.iter().all(|f| f.kind == FunctionKind::Plt));
}

#[test]
fn stripped_binary_without_plt_stubs_has_nothing_to_probe() {
    let dir = TempDir::new().unwrap();
    let source = dir.path().join("bare.c");
    std::fs::write(
        &source,
        "void _start(void) { __asm__ volatile(\"mov $60, %eax; xor %edi, %edi; syscall\"); }\n",
    )
    .unwrap();
    let bare = compile(
        &dir,
        "cc",
        source.to_str().unwrap(),
        "bare",
        &["-nostdlib", "-static", "-s"],
    );
    let error = read_function_symbols(&bare).unwrap_err();
    assert!(
        matches!(error, ElfError::NoFunctionSymbols { .. }),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        format!(
            "{} has no function symbols and no PLT stubs: nothing in it can be probed; install \
             its debug file (Debian: its -dbgsym package), give its folder with --debug-dir, or \
             use a build with symbols",
            bare.display()
        )
    );
}

#[test]
fn other_machines_and_object_files_are_refused() {
    let dir = TempDir::new().unwrap();
    let bytes = std::fs::read(fixture(&dir)).unwrap();
    let path = Path::new("patched");

    let mut aarch64 = bytes.clone();
    aarch64[18..20].copy_from_slice(&183u16.to_le_bytes()); // e_machine = EM_AARCH64
    let error = functions_in(path, &aarch64, SitePolicy::Best).unwrap_err();
    assert!(
        matches!(error, ElfError::UnsupportedMachine { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("AARCH64"), "{error}");

    let mut elf32 = bytes.clone();
    elf32[4] = 1; // ELFCLASS32
    let error = functions_in(path, &elf32, SitePolicy::Best).unwrap_err();
    assert!(error.to_string().contains("32-bit"), "{error}");

    let object = dir.path().join("fixture.o");
    run("cc", &["-c", FIXTURE_C, "-o", object.to_str().unwrap()]);
    let error = read_function_symbols(&object).unwrap_err();
    assert!(
        matches!(error, ElfError::UnsupportedType { .. }),
        "{error:?}"
    );
}

#[test]
fn truncated_elf_is_an_error() {
    let dir = TempDir::new().unwrap();
    let bytes = std::fs::read(fixture(&dir)).unwrap();
    let truncated = dir.path().join("truncated");
    std::fs::write(&truncated, &bytes[..100]).unwrap();
    let error = read_function_symbols(&truncated).unwrap_err();
    assert!(matches!(error, ElfError::Malformed { .. }), "{error:?}");
    assert!(!error.to_string().contains('\n'), "{error}");
}

/// Cut short anywhere or with bytes overwritten, a file gives an error or some functions, never a
/// panic.
#[test]
fn damaged_elf_never_panics() {
    let dir = TempDir::new().unwrap();
    let bytes = std::fs::read(fixture(&dir)).unwrap();
    let path = Path::new("damaged");
    for length in (0..bytes.len()).step_by(61) {
        let _ = functions_in(path, &bytes[..length], SitePolicy::Best);
    }
    // A fixed xorshift sequence, so a failure can be replayed.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let iterations: usize = std::env::var("UTRACE_ELF_DAMAGE_ITERATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3000);
    let len = bytes.len() as u64;
    for _ in 0..iterations {
        let mut damaged = bytes.clone();
        for _ in 0..1 + next() % 8 {
            // Half of the damage goes where the tables are: the ELF and program headers with
            // `.dynsym` and the relocations at the start, the section headers at the end.
            let at = match next() % 4 {
                0 => next() % len.min(0x800),
                1 => len - 1 - next() % len.min(0x800),
                _ => next() % len,
            };
            damaged[usize::try_from(at).unwrap()] = next() as u8;
        }
        let _ = functions_in(path, &damaged, SitePolicy::Best);
    }
}
