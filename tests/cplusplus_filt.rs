//! C++ names read exactly as `c++filt` prints them (test/README.md): every C++ symbol of
//! libstdc++'s and of libLLVM's `.dynsym` (about 44,000 names) is demangled by utrace and by
//! binutils' `c++filt` (one process, all names on its standard input), and no name may differ.
//!
//! Without `c++filt` or libLLVM (clang's) the test is skipped with a message, except in CI
//! (`CI` set), where that is a failure: `tools/setup.sh` installs both.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const LIBSTDCXX: &str = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6";

/// The differences shown in a failure, at most.
const SHOWN: usize = 20;

/// Skips the test with a message when `what` is missing, or fails it in CI.
fn missing(what: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{what} is missing, and CI needs it: run tools/setup.sh"
    );
    eprintln!("cplusplus_filt: skipped: {what} is missing (tools/setup.sh installs it)");
}

fn cplusplus_filt_present() -> bool {
    Command::new("c++filt")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success())
}

/// clang's libLLVM (`/usr/lib/llvm-N/lib/libLLVM-N.so`), the newest installed.
fn libllvm() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib")
        .ok()?
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let version: u32 = name.strip_prefix("llvm-")?.parse().ok()?;
            let library = entry.path().join(format!("lib/libLLVM-{version}.so"));
            library.is_file().then_some((version, library))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, library)| library)
}

/// The distinct C++ names (`_Z…`) of a file's `.dynsym`.
fn cplusplus_names(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let elf = goblin::elf::Elf::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut names: Vec<String> = elf
        .dynsyms
        .iter()
        .filter_map(|symbol| elf.dynstrtab.get_at(symbol.st_name))
        .filter(|name| name.starts_with("_Z"))
        .map(str::to_owned)
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// `c++filt`'s text for each name, one process fed them all.
fn cplusplus_filt(names: &[String]) -> Vec<String> {
    let mut child = Command::new("c++filt")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("running c++filt");
    let mut stdin = child.stdin.take().unwrap();
    let input = names.join("\n") + "\n";
    // Written from a thread of its own: c++filt answers as it reads, and a full pipe either way
    // would block both.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().expect("reading c++filt's output");
    writer.join().unwrap().expect("writing to c++filt");
    assert!(
        output.status.success(),
        "c++filt failed: {:?}",
        output.status
    );
    let text = String::from_utf8(output.stdout).expect("c++filt's output is UTF-8");
    let demangled: Vec<String> = text.lines().map(str::to_owned).collect();
    assert_eq!(
        demangled.len(),
        names.len(),
        "c++filt gave one line per name"
    );
    demangled
}

/// The names utrace demangles otherwise than `c++filt`: (mangled, ours, c++filt's).
fn differences(path: &Path) -> Vec<(String, String, String)> {
    let names = cplusplus_names(path);
    assert!(
        names.len() > 1000,
        "{}: only {} C++ names in .dynsym",
        path.display(),
        names.len()
    );
    let theirs = cplusplus_filt(&names);
    let differing: Vec<_> = names
        .into_iter()
        .zip(theirs)
        .filter_map(|(name, theirs)| {
            let ours = utrace::elf::demangle(&name);
            (ours != theirs).then_some((name, ours, theirs))
        })
        .collect();
    eprintln!(
        "{}: {} C++ names differ from c++filt's",
        path.display(),
        differing.len()
    );
    differing
}

fn assert_same_as_cplusplus_filt(path: &Path) {
    let differing = differences(path);
    let shown: String = differing
        .iter()
        .take(SHOWN)
        .map(|(name, ours, theirs)| format!("\n{name}\n  utrace:  {ours}\n  c++filt: {theirs}"))
        .collect();
    assert!(
        differing.is_empty(),
        "{}: {} names differ from c++filt's (the first {SHOWN}):{shown}",
        path.display(),
        differing.len()
    );
}

#[test]
fn libstdcxx_names_read_as_cplusplus_filt_prints_them() {
    if !cplusplus_filt_present() {
        return missing("c++filt (binutils)");
    }
    assert_same_as_cplusplus_filt(Path::new(LIBSTDCXX));
}

#[test]
fn libllvm_names_read_as_cplusplus_filt_prints_them() {
    if !cplusplus_filt_present() {
        return missing("c++filt (binutils)");
    }
    let Some(library) = libllvm() else {
        return missing("libLLVM (/usr/lib/llvm-*/lib/libLLVM-*.so, clang's)");
    };
    assert_same_as_cplusplus_filt(&library);
}
