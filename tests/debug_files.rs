//! End to end: stripped programs and libraries traced with the symbols of their separate debug
//! files, found where gdb finds them (next to the file, in `.debug/`, under `/usr/lib/debug`, by
//! build id under `--debug-dir`), in MiniDebugInfo, or from a local debuginfod server; and
//! stripped programs traced through their PLT stubs alone.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// The static functions of test/statics.c, which only `.symtab` names.
const STATICS: [&str; 4] = ["main", "square", "twice", "halve"];

/// Runs a tool, failing the test with what it said.
fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {program} (install binutils and xz-utils): {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A copy of test/statics.c's build (or of its `-DOTHER_BUILD` one) as `dir/prog`.
fn statics_in(dir: &Path, other_build: bool) -> PathBuf {
    let built = match other_build {
        false => compile("statics.c", "statics", &[]),
        true => compile("statics.c", "statics-other", &["-DOTHER_BUILD"]),
    };
    let prog = dir.join("prog");
    std::fs::copy(built, &prog).unwrap();
    prog
}

/// Splits `prog` as distributions do: its debug information into `prog.debug` beside it,
/// stripped, linked to it with `.gnu_debuglink`. Returns the debug file.
fn split(prog: &Path) -> PathBuf {
    let debug = prog.with_extension("debug");
    run(
        "objcopy",
        &["--only-keep-debug", path_str(prog), path_str(&debug)],
    );
    run("strip", &[path_str(prog)]);
    let link = format!("--add-gnu-debuglink={}", path_str(&debug));
    run("objcopy", &[&link, path_str(prog)]);
    debug
}

/// A copy of test/statics.c's build in `dir`, split: the program and its debug file.
fn split_statics(dir: &Path) -> (PathBuf, PathBuf) {
    let prog = statics_in(dir, false);
    let debug = split(&prog);
    (prog, debug)
}

/// The build id of `file`, in hexadecimal.
fn build_id(file: &Path) -> String {
    let notes = run("readelf", &["-n", path_str(file)]);
    notes
        .lines()
        .find_map(|line| line.trim().strip_prefix("Build ID: "))
        .expect("a build id")
        .to_owned()
}

/// `dir/.build-id/xx/yyyy.debug` for the build id of `file`.
fn build_id_path(root: &Path, file: &Path) -> PathBuf {
    let id = build_id(file);
    root.join(".build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]))
}

fn move_to(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::rename(from, to).unwrap();
}

/// Records the stripped `prog`, checks that it ran as untraced, that every static function was
/// counted exactly, and that `record -d` and `info --symbols` said where the symbols came from.
fn assert_statics_counted(prog: &Path, extra: &[&str], source: &str) {
    let mut flags = vec!["-d"];
    flags.extend_from_slice(extra);
    let recording = record_unchanged(prog, &["100"], &flags);
    let own = own_counts(&recording.output.stdout);
    assert_eq!(own.get("halve"), Some(&200));
    assert_counts_match(&own, &recording.traced_counts());
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    let said = format!("symbols of {}: 5 functions from {source}", prog.display());
    assert!(stderr.contains(&said), "expected {said:?} in: {stderr}");
    let mut info = utrace();
    info.args(["info", "--symbols", "-i"]).arg(recording.data());
    info.args(extra.iter().filter(|flag| flag.starts_with("--debug-dir")));
    let output = info.output().unwrap();
    assert_success(&output);
    let info = String::from_utf8_lossy(&output.stdout);
    let said = format!(
        "  {}: 5 functions from {source}, 0 from .dynsym, ",
        prog.display()
    );
    assert!(info.contains(&said), "expected {said:?} in: {info}");
}

/// Where a test put the debug file, the record flags that find it there, and what to clean up
/// after the recording.
struct Placed {
    at: PathBuf,
    flags: Vec<String>,
    /// Dropped after the recording: a folder to remove.
    _cleanup: Box<dyn std::any::Any>,
}

/// Splits a copy of test/statics.c's build in a folder of its own, lets `place` move its debug
/// file (given the program's folder and the debug file) and checks that recording the stripped
/// program counts every static function exactly, with the symbols of the debug file there.
fn assert_found(test: &str, place: impl FnOnce(&Path, PathBuf) -> Placed) {
    if !bpf_available(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (prog, debug) = split_statics(dir.path());
    let placed = place(dir.path(), debug);
    let flags: Vec<&str> = placed.flags.iter().map(String::as_str).collect();
    let source = format!("debug file {}", placed.at.display());
    assert_statics_counted(&prog, &flags, &source);
}

#[test]
fn debug_file_next_to_the_program() {
    assert_found("debug_file_next_to_the_program", |_, debug| Placed {
        at: debug,
        flags: vec![],
        _cleanup: Box::new(()),
    });
}

#[test]
fn debug_file_in_the_debug_folder() {
    assert_found("debug_file_in_the_debug_folder", |dir, debug| {
        let at = dir.join(".debug/prog.debug");
        move_to(&debug, &at);
        Placed {
            at,
            flags: vec![],
            _cleanup: Box::new(()),
        }
    });
}

#[test]
fn debug_file_under_usr_lib_debug_by_path() {
    assert_found("debug_file_under_usr_lib_debug_by_path", |dir, debug| {
        let system = Path::new("/usr/lib/debug").join(dir.strip_prefix("/").unwrap());
        let at = system.join("prog.debug");
        move_to(&debug, &at);
        Placed {
            at,
            flags: vec![],
            _cleanup: Box::new(RemoveOnDrop(system)),
        }
    });
}

#[test]
fn debug_file_by_build_id_under_debug_dir() {
    assert_found("debug_file_by_build_id_under_debug_dir", |dir, debug| {
        let root = tempfile::tempdir().unwrap();
        let at = build_id_path(root.path(), &dir.join("prog"));
        move_to(&debug, &at);
        Placed {
            at,
            flags: vec![format!("--debug-dir={}", root.path().display())],
            _cleanup: Box::new(root),
        }
    });
}

#[test]
fn debug_file_of_another_build_is_refused() {
    if !bpf_available("debug_file_of_another_build_is_refused") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (prog, debug) = split_statics(dir.path());
    std::fs::remove_file(&debug).unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let other = split(&statics_in(other_dir.path(), true));
    // By build id: the other build's debug file where the program's should be.
    let root = tempfile::tempdir().unwrap();
    let misplaced = build_id_path(root.path(), &prog);
    std::fs::create_dir_all(misplaced.parent().unwrap()).unwrap();
    std::fs::copy(&other, &misplaced).unwrap();
    // By debug link: the other build's debug file under the linked name.
    std::fs::copy(&other, &debug).unwrap();
    let flag = format!("--debug-dir={}", root.path().display());
    let recording = record_unchanged(&prog, &["100"], &[&flag]);
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    let warned_id = format!(
        "utrace: warning: {} does not match the file it is for (build id {}, the file's is {})",
        misplaced.display(),
        build_id(&other),
        build_id(&prog)
    );
    assert!(stderr.contains(&warned_id), "{stderr}");
    let warned_crc = format!("utrace: warning: {} is not the debug file", debug.display());
    assert!(stderr.contains(&warned_crc), "{stderr}");
    // Only the PLT stubs are traced.
    let traced = recording.traced_counts();
    assert!(
        STATICS.iter().all(|f| !traced.contains_key(*f)),
        "{traced:?}"
    );
    assert_eq!(traced.get("malloc@plt"), Some(&101));
}

#[test]
fn mini_debug_info_made_the_fedora_way() {
    if !bpf_available("mini_debug_info_made_the_fedora_way") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prog = statics_in(dir.path(), false);
    // As Fedora's find-debuginfo does (see gdb's "MiniDebugInfo" documentation): the function
    // symbols .dynsym lacks, in a stripped copy, xz-compressed into .gnu_debugdata.
    let script = r#"set -e
nm -D "$1" --format=posix --defined-only | awk '{ print $1 }' | sort > dynsyms
nm "$1" --format=posix --defined-only | awk '{ if ($2 == "T" || $2 == "t") print $1 }' | sort > funcsyms
comm -13 dynsyms funcsyms > keep_symbols
objcopy --only-keep-debug "$1" mini_debuginfo
objcopy -S --remove-section .gdb_index --remove-section .comment --keep-symbols=keep_symbols mini_debuginfo
strip --strip-all -R .comment "$1"
xz mini_debuginfo
objcopy --add-section .gnu_debugdata=mini_debuginfo.xz "$1"
"#;
    let output = Command::new("sh")
        .args(["-c", script, "sh", path_str(&prog)])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_success(&output);
    assert_statics_counted(&prog, &[], "MiniDebugInfo (.gnu_debugdata)");
}

#[test]
fn debug_file_fetched_from_a_local_debuginfod() {
    if !bpf_available("debug_file_fetched_from_a_local_debuginfod") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (prog, debug) = split_statics(dir.path());
    // The server's folder holds the debug file alone; the program's folder keeps no copy.
    let served = tempfile::tempdir().unwrap();
    move_to(&debug, &served.path().join("prog.debug"));
    let server = Debuginfod::start(served.path());
    let cache = tempfile::tempdir().unwrap();
    let cache_path = cache.path().to_str().unwrap();
    let variables = [
        ("DEBUGINFOD_URLS", server.url.as_str()),
        ("DEBUGINFOD_CACHE_PATH", cache_path),
    ];
    let cached = cache.path().join(build_id(&prog)).join("debuginfo");
    let source = format!("debuginfod {}", cached.display());
    let recording = record_unchanged_with_env(&prog, &["100"], &["-d"], &variables);
    assert_counts_match(
        &own_counts(&recording.output.stdout),
        &recording.traced_counts(),
    );
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert!(stderr.contains("utrace: fetched "), "{stderr}");
    assert!(stderr.contains(&source), "{stderr}");
    // The cache is read with no server set.
    drop(server);
    let variables = [("DEBUGINFOD_CACHE_PATH", cache_path)];
    let recording = record_unchanged_with_env(&prog, &["100"], &["-d"], &variables);
    assert_counts_match(
        &own_counts(&recording.output.stdout),
        &recording.traced_counts(),
    );
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert!(!stderr.contains("fetching"), "{stderr}");
    assert!(stderr.contains(&source), "{stderr}");
}

/// Debian's `debuginfod` serving a folder of debug files, on a free port of 127.0.0.1.
struct Debuginfod {
    child: std::process::Child,
    url: String,
    _database: tempfile::TempDir,
}

impl Debuginfod {
    fn start(folder: &Path) -> Debuginfod {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let database = tempfile::tempdir().unwrap();
        let child = Command::new("debuginfod")
            .arg("-F")
            .arg(format!("--port={port}"))
            .arg(format!(
                "--database={}",
                database.path().join("db").display()
            ))
            .arg(folder)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("running debuginfod (tools/setup.sh installs it)");
        let url = format!("http://127.0.0.1:{port}");
        let server = Debuginfod {
            child,
            url,
            _database: database,
        };
        server.wait_until_scanned();
        server
    }

    /// Waits until the server has indexed the folder: its metrics say a scan is done and no
    /// scan work is pending.
    fn wait_until_scanned(&self) {
        for _ in 0..200 {
            let text = self.metrics().unwrap_or_default();
            if text.contains("thread_work_pending{role=\"scan\"} 0")
                && text.contains("thread_work_total{role=\"traverse\"}")
            {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("debuginfod did not scan its folder in 10 s");
    }

    fn metrics(&self) -> std::io::Result<String> {
        use std::io::{Read, Write};
        let address = self.url.strip_prefix("http://").unwrap();
        let mut stream = std::net::TcpStream::connect(address)?;
        stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        Ok(text)
    }
}

impl Drop for Debuginfod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Removes a folder made for a test outside its temporary directories.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
