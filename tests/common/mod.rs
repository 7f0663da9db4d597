//! Shared by the end-to-end tests: compiling the programs of `test/`, running utrace on them, and
//! reading what each side counted.
#![allow(dead_code)] // each test binary uses its own part of this module

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};

/// Flags every test program is compiled with: tail calls would make the machine's calls differ
/// from the source's.
const C_FLAGS: &[&str] = &["-O2", "-g", "-fno-optimize-sibling-calls", "-pthread"];

pub fn utrace() -> Command {
    Command::new(env!("CARGO_BIN_EXE_utrace"))
}

/// utrace run as nobody, with no capabilities: what a user without BPF rights gets.
pub fn utrace_as_nobody() -> Command {
    let mut command = Command::new("setpriv");
    command
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_utrace"));
    command
}

/// Asserts that a run of utrace succeeded, showing what it said when it did not.
pub fn assert_success(output: &Output) {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Whether BPF tests can run here. Outside CI a machine without root skips them with a message;
/// with UTRACE_REQUIRE_BPF=1 (set by .ci/run) a skip is a failure.
pub fn bpf_available(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        return true;
    }
    let required = std::env::var("UTRACE_REQUIRE_BPF").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "{test}: BPF tests need root, and UTRACE_REQUIRE_BPF=1 forbids skipping them"
    );
    eprintln!("{test}: skipped: BPF tests need root (set UTRACE_REQUIRE_BPF=1 to fail instead)");
    false
}

pub fn build_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // One directory per test binary, so test binaries running one after another never
        // replace a program another one has just traced either.
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("test-programs")
            .join(std::process::id().to_string());
        std::fs::create_dir_all(&dir).expect("creating the test program directory");
        dir
    })
}

/// Compiles `test/<source>` (C or C++ by its extension) with `extra` flags into a binary named
/// `name`, and returns its path. See [`built_once`] for where it goes.
pub fn compile(source: &str, name: &str, extra: &[&str]) -> PathBuf {
    let compiler = if source.ends_with(".cpp") {
        "c++"
    } else {
        "cc"
    };
    let source_path = test_source(source);
    // `extra` goes after the source, where libraries (`-lname`) must stand.
    let mut command = Command::new(compiler);
    command.args(C_FLAGS).arg(&source_path).args(extra);
    built_once(command, &source_path, name)
}

/// Compiles `test/<source>` like [`compile`], linked with `library` (a shared library built by
/// [`compile`]), which it finds beside itself through an `$ORIGIN` runpath, as the loader does.
pub fn compile_against(source: &str, name: &str, extra: &[&str], library: &Path) -> PathBuf {
    let dir = library
        .parent()
        .expect("in a directory")
        .to_str()
        .expect("UTF-8");
    let file = library
        .file_name()
        .expect("a file")
        .to_str()
        .expect("UTF-8");
    let stem = file
        .strip_prefix("lib")
        .and_then(|rest| rest.strip_suffix(".so"))
        .expect("a libNAME.so");
    let link = format!("-l{stem}");
    let mut args = extra.to_vec();
    args.extend(["-L", dir, &link, "-Wl,-rpath,$ORIGIN"]);
    let program = compile(source, name, &args);
    match std::fs::hard_link(library, program.with_file_name(file)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("placing {file} beside {}: {e}", program.display()),
    }
    program
}

/// Compiles `test/<source>` with `rustc -O` (panic=unwind, the default) into `name`.
pub fn compile_rust(source: &str, name: &str) -> PathBuf {
    let source_path = test_source(source);
    let mut command = Command::new("rustc");
    command
        .args(["-O", "--edition=2021", "-C", "panic=unwind"])
        .arg(&source_path);
    built_once(command, &source_path, name)
}

fn test_source(source: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("test")
        .join(source)
}

/// Runs `compiler` (its arguments given, but for `-o OUTPUT`) on `source` into a program named
/// `name`, unless a program built the same way is there already, and returns its path.
///
/// Programs are kept by what they are built from (the compiler's command line, the source and the
/// headers of `test/`), under the target directory, and never rebuilt once there: tests run in
/// parallel, and a program rebuilt under a test that traces it would lose its probes (they sit on
/// the file that was there at attach). A new one is linked into place only if none is there. So a
/// guest kernel booted with this machine's files (tools/vm-test.sh) runs the programs the host's
/// tests compiled, rather than compiling them again under emulation.
fn built_once(mut compiler: Command, source: &Path, name: &str) -> PathBuf {
    // One build at a time in this test binary: its tests often ask for the same program.
    static BUILDING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = BUILDING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let key = build_key(&compiler, source);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("test-programs")
        .join(format!("{key:016x}"));
    let program = dir.join(name);
    if program.exists() {
        return program;
    }
    std::fs::create_dir_all(&dir).expect("creating the test program directory");
    let building = dir.join(format!(".{name}.{}", std::process::id()));
    let status = compiler
        .arg("-o")
        .arg(&building)
        .status()
        .unwrap_or_else(|e| panic!("running {compiler:?} (install gcc, g++ and rustc): {e}"));
    assert!(status.success(), "{compiler:?} failed");
    // Another test binary may have linked the same program meanwhile: theirs stays.
    match std::fs::hard_link(&building, &program) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("placing {}: {e}", program.display()),
    }
    let _ = std::fs::remove_file(&building);
    program
}

/// What a program is built from, hashed (FNV-1a): the command line, the source and every header
/// of `test/`.
fn build_key(compiler: &Command, source: &Path) -> u64 {
    let mut hash: u64 = 0xcbf29ce484222325;
    let mut add = |bytes: &[u8]| {
        for &byte in bytes.iter().chain([0u8].iter()) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x100000001b3);
        }
    };
    add(compiler.get_program().as_encoded_bytes());
    for arg in compiler.get_args() {
        add(arg.as_encoded_bytes());
    }
    add(&std::fs::read(source).expect("reading the test program's source"));
    let mut headers: Vec<PathBuf> = std::fs::read_dir(source.parent().expect("in test/"))
        .expect("listing test/")
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "h"))
        .collect();
    headers.sort();
    for header in headers {
        add(&std::fs::read(header).expect("reading a header of test/"));
    }
    hash
}

/// test/reopen.c, and the libraries it opens, closes and opens again: `libcount.so` and
/// `libspacer.so`, traced with `--nest-lib libcount* --nest-lib libspacer*`.
pub struct Reopen {
    pub program: PathBuf,
    pub counted: PathBuf,
    pub spacer: PathBuf,
}

impl Reopen {
    pub const NEST_LIBS: [&'static str; 4] =
        ["--nest-lib", "libcount*", "--nest-lib", "libspacer*"];

    pub fn build() -> Reopen {
        Reopen {
            program: compile("reopen.c", "reopen", &["-ldl"]),
            counted: compile("libcount.c", "libcount.so", &["-shared", "-fPIC"]),
            spacer: compile("libspacer.c", "libspacer.so", &["-shared", "-fPIC"]),
        }
    }

    /// Its arguments: the libraries' paths.
    pub fn libraries(&self) -> [&str; 2] {
        [
            self.counted.to_str().unwrap(),
            self.spacer.to_str().unwrap(),
        ]
    }

    /// What one process counts: `outer` calls of lib_outer(10), `steps` of spacer_step.
    pub fn counts(outer: u64, steps: u64) -> BTreeMap<String, u64> {
        let counts = [
            ("lib_outer", outer),
            ("lib_inner", 10 * outer),
            ("lib_static", 10 * outer),
            ("spacer_step", steps),
        ];
        counts.map(|(name, count)| (name.to_string(), count)).into()
    }
}

/// The `calls <count> <name>` lines a test program prints about itself.
pub fn own_counts(stdout: &[u8]) -> BTreeMap<String, u64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|line| line.strip_prefix("calls "))
        .map(|rest| {
            let (count, name) = rest.split_once(' ').expect("calls <count> <name>");
            (name.to_string(), count.parse().expect("a count"))
        })
        .collect()
}

/// A recording made in its own temporary directory.
pub struct Recording {
    pub dir: tempfile::TempDir,
    pub output: Output,
}

impl Recording {
    pub fn data(&self) -> PathBuf {
        self.dir.path().join("utrace.data")
    }

    /// Runs `utrace report` on this recording with extra arguments; asserts it succeeds.
    pub fn report(&self, args: &[&str]) -> String {
        let output = utrace()
            .arg("report")
            .arg("-i")
            .arg(self.data())
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "utrace report {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// What `utrace info` says about this recording; asserts it succeeds.
    pub fn info(&self) -> String {
        let output = utrace()
            .arg("info")
            .arg("-i")
            .arg(self.data())
            .output()
            .unwrap();
        assert_success(&output);
        String::from_utf8(output.stdout).unwrap()
    }

    /// The report in JSON.
    pub fn json(&self) -> serde_json::Value {
        report_json(&self.data())
    }

    /// Calls per function name, from the JSON report.
    pub fn traced_counts(&self) -> BTreeMap<String, u64> {
        counts_of(&self.json())
    }
}

/// `utrace report --format=json` of a data file, and what it said on stderr (a file cut short
/// is reported with a warning there).
pub fn report_json_and_stderr(data: &Path) -> (serde_json::Value, String) {
    let output = report_output(data, &["--format=json"]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "utrace report failed: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    (
        serde_json::from_slice(&output.stdout).expect("report is JSON"),
        stderr,
    )
}

/// `utrace report --format=json` of a data file.
pub fn report_json(data: &Path) -> serde_json::Value {
    report_json_and_stderr(data).0
}

/// The module of the function `name` in a JSON report, if it is there (the first one of that
/// name).
pub fn module_of(json: &serde_json::Value, name: &str) -> Option<String> {
    json["functions"]
        .as_array()
        .expect("functions array")
        .iter()
        .find(|f| f["name"] == name)
        .map(|f| f["module"].as_str().unwrap().to_string())
}

/// The calls of `name` in a JSON report; 0 when it is not there.
pub fn calls_of(json: &serde_json::Value, name: &str) -> u64 {
    counts_of(json).get(name).copied().unwrap_or(0)
}

/// The `<role> calls <count> <name>` lines test/forkexec.c prints for `role`.
pub fn role_counts(stdout: &[u8], role: &str) -> BTreeMap<String, u64> {
    let prefix = format!("{role} ");
    let lines: Vec<&str> = std::str::from_utf8(stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.strip_prefix(prefix.as_str()))
        .collect();
    own_counts(lines.join("\n").as_bytes())
}

/// Calls per function name of each process in a JSON report of several processes.
pub fn counts_by_pid(json: &serde_json::Value) -> BTreeMap<u64, BTreeMap<String, u64>> {
    let mut processes: BTreeMap<u64, BTreeMap<String, u64>> = BTreeMap::new();
    for f in json["functions"].as_array().expect("functions array") {
        let pid = f["pid"].as_u64().expect("every function has a pid");
        *processes
            .entry(pid)
            .or_default()
            .entry(f["name"].as_str().unwrap().to_string())
            .or_insert(0) += f["calls"].as_u64().unwrap();
    }
    processes
}

/// Calls per function name of each module (by its file name) in a JSON report.
pub fn counts_by_module(json: &serde_json::Value) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut modules: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for f in json["functions"].as_array().expect("functions array") {
        let module = f["module"].as_str().unwrap();
        let file = module.rsplit('/').next().unwrap().to_string();
        *modules
            .entry(file)
            .or_default()
            .entry(f["name"].as_str().unwrap().to_string())
            .or_insert(0) += f["calls"].as_u64().unwrap();
    }
    modules
}

/// How many calls of `name` the JSON report says had unknown time.
pub fn unknown_time_of(json: &serde_json::Value, name: &str) -> u64 {
    json["functions"]
        .as_array()
        .expect("functions array")
        .iter()
        .filter(|f| f["name"] == name)
        .map(|f| f["unknown_time_calls"].as_u64().unwrap())
        .sum()
}

/// Calls per function name in a JSON report (a name in two modules: the counts added).
pub fn counts_of(json: &serde_json::Value) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for f in json["functions"].as_array().expect("functions array") {
        *counts
            .entry(f["name"].as_str().unwrap().to_string())
            .or_insert(0) += f["calls"].as_u64().unwrap();
    }
    counts
}

/// Runs `utrace live FLAGS -o FILE -- PROGRAM ARGS`; checks it succeeds, and returns its
/// output and the tree it wrote.
pub fn live_to_file(flags: &[&str], program: &Path, args: &[&str]) -> (Output, String) {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("live.txt");
    let output = utrace()
        .arg("live")
        .args(flags)
        .arg("-o")
        .arg(&tree)
        .arg("--")
        .arg(program)
        .args(args)
        .output()
        .unwrap();
    assert_success(&output);
    let tree = std::fs::read_to_string(&tree).unwrap();
    (output, tree)
}

/// Records `program args` with utrace (plus `extra` record flags).
pub fn record(program: &Path, args: &[&str], extra: &[&str]) -> Recording {
    record_with_env(program, args, extra, &[])
}

/// Records `program args` with utrace (plus `extra` record flags), with `variables` set in its
/// environment.
pub fn record_with_env(
    program: &Path,
    args: &[&str],
    extra: &[&str],
    variables: &[(&str, &str)],
) -> Recording {
    let dir = tempfile::tempdir().unwrap();
    let output = utrace()
        .envs(variables.iter().copied())
        .arg("record")
        .arg("-o")
        .arg(dir.path().join("utrace.data"))
        .args(extra)
        .arg("--")
        .arg(program)
        .args(args)
        .output()
        .unwrap();
    Recording { dir, output }
}

/// The exit code a shell reports: the code, or 128 + the signal that ended the process.
pub fn shell_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .expect("the process ended")
}

/// Records `program args` (with `extra` record flags), checks the program behaved as untraced
/// (exit code, stdout) and that no event was lost, and returns the recording.
pub fn record_unchanged(program: &Path, args: &[&str], extra: &[&str]) -> Recording {
    record_unchanged_with_env(program, args, extra, &[])
}

/// [`record_unchanged`] with `variables` set in utrace's environment.
pub fn record_unchanged_with_env(
    program: &Path,
    args: &[&str],
    extra: &[&str],
    variables: &[(&str, &str)],
) -> Recording {
    let untraced = run_untraced(program, args);
    let recording = record_with_env(program, args, extra, variables);
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert_eq!(
        recording.output.status.code(),
        Some(shell_code(untraced.status)),
        "exit code differs under tracing; utrace said: {stderr}"
    );
    assert_eq!(
        String::from_utf8_lossy(&recording.output.stdout),
        String::from_utf8_lossy(&untraced.stdout),
        "stdout differs under tracing"
    );
    assert!(stderr.contains("0 lost"), "utrace lost events: {stderr}");
    recording
}

/// Runs `program args` without tracing.
pub fn run_untraced(program: &Path, args: &[&str]) -> Output {
    Command::new(program).args(args).output().unwrap()
}

/// Asserts that every count the program made of itself is what utrace recorded.
pub fn assert_counts_match(program_counts: &BTreeMap<String, u64>, traced: &BTreeMap<String, u64>) {
    assert!(!program_counts.is_empty(), "the program printed no counts");
    let mismatches: Vec<String> = program_counts
        .iter()
        .filter(|(name, count)| traced.get(*name) != Some(count))
        .map(|(name, count)| {
            format!(
                "{name}: program counted {count}, utrace {:?}",
                traced.get(name)
            )
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "counts differ:\n{}",
        mismatches.join("\n")
    );
}

/// How the warning of a calibration made on a busy machine starts (src/probe_cost.rs).
const CALIBRATION_NOISE: &str = "utrace: warning: the probe costs were measured on a busy machine";

/// Asserts that utrace failed the way a user can act on (see [`unclear_failure`]).
pub fn assert_clear_failure(output: &Output, expected: &[&str]) {
    if let Some(problem) = unclear_failure(output, expected) {
        panic!("{problem}");
    }
}

/// What is wrong with a failure, if anything: it must exit non-zero, not panic, and say on
/// exactly one line of stderr every one of `expected` (the file or flag, and what to do).
pub fn unclear_failure(output: &Output, expected: &[&str]) -> Option<String> {
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.success() {
        return Some(format!("expected a failure, got success: {stderr}"));
    }
    if stderr.contains("panicked") {
        return Some(format!("utrace panicked: {stderr}"));
    }
    // The calibration's warning on a busy machine (tests run side by side) says something of
    // the machine, not of the failure.
    let said = stderr
        .trim_end()
        .lines()
        .filter(|line| !line.starts_with(CALIBRATION_NOISE))
        .count();
    if said != 1 {
        return Some(format!("expected one line on stderr, got: {stderr}"));
    }
    expected
        .iter()
        .find(|text| !stderr.contains(**text))
        .map(|text| format!("expected {text:?} in: {stderr}"))
}

/// Runs `utrace report -i data` with extra arguments.
pub fn report_output(data: &Path, args: &[&str]) -> Output {
    utrace()
        .arg("report")
        .arg("-i")
        .arg(data)
        .args(args)
        .output()
        .unwrap()
}

/// Starts `utrace record -o data program args` in the background, its output piped.
pub fn spawn_record(data: &Path, program: &Path, args: &[&str]) -> Child {
    utrace()
        .arg("record")
        .arg("-o")
        .arg(data)
        .arg("--")
        .arg(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Sends `signal` to `pid`.
pub fn send_signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill has no memory effects.
    let result = unsafe { libc::kill(pid as libc::pid_t, signal) };
    assert_eq!(result, 0, "kill({pid}, {signal})");
}

/// Starts `command` (a test program told to wait, which prints `ready` and waits for SIGUSR1
/// so that a recorder can attach first), and returns it and the rest of its stdout.
pub fn start_waiting(
    command: &mut Command,
) -> (
    Child,
    std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
) {
    use std::io::BufRead;
    let mut program = command.stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = std::io::BufReader::new(program.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    (program, lines)
}

/// `utrace record -d -p PID` running, from the moment it said it had attached.
pub struct AttachedRecorder {
    process: Child,
    /// What it said before it had attached.
    pub said: Vec<String>,
    rest: std::io::Lines<std::io::BufReader<std::process::ChildStderr>>,
}

impl AttachedRecorder {
    /// Starts `utrace record -d -p pid` with `extra` flags, writing `data`, and waits until it
    /// has attached.
    pub fn start(pid: u32, data: &Path, extra: &[&str]) -> AttachedRecorder {
        use std::io::BufRead;
        let mut process = utrace()
            .arg("record")
            .args(extra)
            .args(["-d", "-p", &pid.to_string(), "-o"])
            .arg(data)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut rest = std::io::BufReader::new(process.stderr.take().unwrap()).lines();
        let mut said = Vec::new();
        for line in rest.by_ref() {
            let line = line.unwrap();
            if line.starts_with("utrace: attached") {
                return AttachedRecorder {
                    process,
                    said,
                    rest,
                };
            }
            said.push(line);
        }
        // Its stderr has closed: it has ended.
        let status = process.wait().unwrap();
        panic!("utrace never attached ({status}): {said:?}");
    }

    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    /// Waits for a recorder killed with SIGKILL to be gone.
    pub fn wait_killed(mut self) {
        let status = self.process.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        );
    }

    /// Waits for the recording to end by itself and checks that it ended well.
    pub fn finish(mut self) {
        let rest: Vec<String> = self.rest.map(|line| line.unwrap()).collect();
        assert!(self.process.wait().unwrap().success(), "{rest:?}");
    }
}

/// A program that runs until SIGTERM, its stdout read line by line.
pub struct Running {
    pub process: std::process::Child,
    pub lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl Running {
    /// Starts `program` and waits for its `ready` line. A freshly written copy may still be
    /// open in a child another test thread forked (exec then fails with ETXTBSY until that child
    /// has exec'ed too): such a start is tried again.
    pub fn start(program: &Path) -> Running {
        Running::start_with_args(program, &[])
    }

    /// [`Running::start`] with arguments.
    pub fn start_with_args(program: &Path, args: &[&str]) -> Running {
        use std::io::BufRead;
        let mut process = (0..100)
            .find_map(|_| {
                match Command::new(program)
                    .args(args)
                    .stdout(Stdio::piped())
                    .spawn()
                {
                    Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        None
                    }
                    spawned => Some(spawned.unwrap()),
                }
            })
            .expect("the program file stayed busy");
        let stdout = process.stdout.take().unwrap();
        let mut running = Running {
            process,
            lines: std::io::BufReader::new(stdout).lines(),
        };
        running.wait_for_line("ready");
        running
    }

    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    /// Reads lines until one starts with `prefix`, and returns it.
    pub fn wait_for_line(&mut self, prefix: &str) -> String {
        self.lines
            .by_ref()
            .map(|line| line.unwrap())
            .find(|line| line.starts_with(prefix))
            .unwrap_or_else(|| panic!("the program never printed {prefix:?}"))
    }

    /// Sends SIGTERM, checks the program ends well, and returns the lines it printed last.
    pub fn stop(mut self) -> Vec<String> {
        send_signal(self.pid(), libc::SIGTERM);
        let rest = self.lines.map(|line| line.unwrap()).collect();
        assert!(self.process.wait().unwrap().success());
        rest
    }
}

/// What a recording written by a test with utrace's own writer says of itself: `command` run as
/// pid 4242.
pub fn written_metadata(command: &[&str]) -> utrace::data::Metadata {
    utrace::data::Metadata {
        command: command.iter().map(|word| word.to_string()).collect(),
        pid: 4242,
        start_monotonic_ns: 1_000,
        start_realtime_ns: 1_700_000_000_000_000_000,
        hostname: "host".into(),
        kernel: "6.8.0".into(),
        utrace_version: "0.1.0".into(),
        probe_costs: None,
    }
}

/// The function table of such a recording: `names`, in that order (their ids), in `/bin/prog`.
pub fn written_table(names: &[&str]) -> utrace::table::FunctionTable {
    utrace::table::FunctionTable {
        modules: vec!["/bin/prog".into()],
        functions: names
            .iter()
            .enumerate()
            .map(|(i, name)| utrace::table::TracedFunction {
                name: name.to_string(),
                module: 0,
                offset: 0x1000 + 0x10 * i as u64,
                size: 16,
                kind: utrace::table::FunctionKind::Function,
                probes: Default::default(),
                values: Vec::new(),
                user_stack: false,
                argument_names: Vec::new(),
                source: None,
                detached: None,
            })
            .collect(),
        ..Default::default()
    }
}

/// The pid of the child of `parent` that runs `program`, once it does.
pub fn child_running(parent: u32, program: &Path) -> u32 {
    let started = std::time::Instant::now();
    loop {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1));
            let exe = std::fs::read_link(entry.path().join("exe")).ok();
            if ppid == Some(&parent.to_string()) && exe.as_deref() == Some(program) {
                return pid;
            }
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Polls process `pid` until it ends: it may be stopped while its stacks are given back, never
/// for as long as a second.
pub fn assert_never_left_stopped(pid: u32) {
    let started = std::time::Instant::now();
    let mut stopped_since = None;
    while let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
        let state = status
            .lines()
            .find(|l| l.starts_with("State:"))
            .unwrap_or("")
            .to_string();
        if state.contains("zombie") {
            return;
        }
        if state.contains("stopped") {
            let since = *stopped_since.get_or_insert_with(std::time::Instant::now);
            assert!(
                since.elapsed() < std::time::Duration::from_secs(1),
                "stopped for a second: {state}"
            );
        } else {
            stopped_since = None;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the program never ended: {state}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Makes this test process the reaper of its descendants' orphans: a program whose recorder
/// (its parent) was killed becomes our child, and its exit code ours to read.
pub fn become_subreaper() {
    // SAFETY: prctl with integer arguments has no memory effects.
    assert_eq!(
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) },
        0
    );
}

/// Waits for `pid`, an orphan this subreaper inherited, and returns its exit code; fails if a
/// signal ended it.
pub fn exit_code_of_orphan(pid: u32) -> i32 {
    let mut status = 0;
    // SAFETY: waits for a child of ours; writes only `status`.
    assert_eq!(
        unsafe { libc::waitpid(pid as i32, &mut status, 0) },
        pid as i32
    );
    assert!(libc::WIFEXITED(status), "ended by a signal: {status:#x}");
    libc::WEXITSTATUS(status)
}

/// `utrace record` of a command, to be killed with SIGKILL while the command runs: the
/// command's output is piped to the test, which becomes the reaper of the orphaned command.
pub struct RecordingToKill {
    recorder: Child,
    _dir: tempfile::TempDir,
}

impl RecordingToKill {
    /// Starts `utrace record EXTRA -- program ARGS`.
    pub fn start(program: &Path, args: &[&str], extra: &[&str]) -> RecordingToKill {
        become_subreaper();
        let dir = tempfile::tempdir().unwrap();
        let recorder = utrace()
            .arg("record")
            .args(extra)
            .arg("-o")
            .arg(dir.path().join("utrace.data"))
            .arg("--")
            .arg(program)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        RecordingToKill {
            recorder,
            _dir: dir,
        }
    }

    pub fn recorder_pid(&self) -> u32 {
        self.recorder.id()
    }

    /// kill -9 of the recorder, whose process must be gone within 2 s.
    pub fn kill(&mut self) {
        self.kill_within(recorder_exit_bound());
    }

    /// kill -9 of the recorder, whose process must be gone (reaped here) within `bound`.
    pub fn kill_within(&mut self, bound: std::time::Duration) {
        let recorder = &mut self.recorder;
        kill_recorder_within(recorder.id(), bound, || {
            recorder.wait().unwrap();
        });
    }

    /// The file it writes.
    pub fn data(&self) -> PathBuf {
        self._dir.path().join("utrace.data")
    }

    /// After [`kill`](Self::kill): the output of the command (process `pid`) to its end, and
    /// its exit code.
    pub fn command_end(mut self, pid: u32) -> (String, i32) {
        let mut stdout = String::new();
        std::io::Read::read_to_string(&mut self.recorder.stdout.take().unwrap(), &mut stdout)
            .unwrap();
        (stdout, exit_code_of_orphan(pid))
    }
}

/// kill -9 of the recorder `pid`; `wait` returns once its process is gone, which must be
/// within 2 s.
pub fn kill_recorder(pid: u32, wait: impl FnOnce()) {
    kill_recorder_within(pid, recorder_exit_bound(), wait);
}

/// kill -9 of the recorder `pid`; `wait` returns once its process is gone, which must be
/// within `bound`.
pub fn kill_recorder_within(pid: u32, bound: std::time::Duration, wait: impl FnOnce()) {
    let killed_at = std::time::Instant::now();
    send_signal(pid, libc::SIGKILL);
    wait();
    assert!(
        killed_at.elapsed() < bound,
        "the recorder took {:?} to go after kill -9",
        killed_at.elapsed()
    );
}

/// The kernel's features as `record -d` says them: `name yes|no` pairs.
pub fn kernel_features() -> &'static str {
    static FEATURES: OnceLock<String> = OnceLock::new();
    FEATURES.get_or_init(|| {
        let output = utrace()
            .args(["record", "-d", "-o", "/dev/null", "--", "true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        stderr
            .lines()
            .find_map(|line| line.strip_prefix("utrace: kernel features: "))
            .unwrap_or_else(|| panic!("no feature line in {stderr}"))
            .to_owned()
    })
}

/// Whether the kernel lacks `feature`, as `record -d` names it.
pub fn kernel_lacks(feature: &str) -> bool {
    kernel_features().contains(&format!("{feature} no"))
}

/// Whether the tests run in the project's emulated guest (`tools/vm/run.sh` boots its kernel
/// with `utrace.run=`): there the vCPUs share one host thread, and a program's speed varies by a
/// fifth from one second to the next.
pub fn in_emulated_guest() -> bool {
    std::fs::read_to_string("/proc/cmdline").is_ok_and(|line| line.contains("utrace.run="))
}

/// How long a recorder killed with SIGKILL may take to go: 2 s, where its probes go with its
/// `uprobe_multi` links; where the kernel has none (before 6.6), each probe is a perf event whose
/// release waits for two grace periods, one probe after another (the kernel's event_mutex), about
/// 60-80 ms each here and more under emulation: the tests' programs have up to a hundred.
pub fn recorder_exit_bound() -> std::time::Duration {
    match kernel_lacks("uprobe_multi") {
        false => std::time::Duration::from_secs(2),
        true => std::time::Duration::from_secs(30),
    }
}

/// The folded stacks of `--format=stacks --folded` that start with user frames and pass through
/// `frame`: each one's frames, root to leaf, and its count of calls.
pub fn folded_user_stacks_through<'a>(folded: &'a str, frame: &str) -> Vec<(Vec<&'a str>, u64)> {
    folded
        .lines()
        .filter_map(|line| line.strip_prefix("[user stack];"))
        .map(|line| {
            let (frames, calls) = line.rsplit_once(' ').expect("a weight after the frames");
            let frames: Vec<&str> = frames.split(';').collect();
            (frames, calls.parse().expect("a count"))
        })
        .filter(|(frames, _)| frames.contains(&frame))
        .collect()
}

/// How many events of `data` are of the time preempted (an entry and an exit an interval, which
/// the recorder writes by default): they are no calls, but the file's events count them.
pub fn preemption_events(data: &Path) -> u64 {
    let mut reader = utrace::data::DataReader::open(data).unwrap();
    let functions = &reader.functions().functions;
    let Some(id) = functions.iter().position(|f| f.is_preemption()) else {
        return 0;
    };
    let mut count = 0;
    while let Some(events) = reader.next_events().unwrap() {
        count += events
            .iter()
            .filter(|e| e.function_id() as usize == id)
            .count() as u64;
    }
    count
}

/// The edges of a dot graph by function name: (caller, callee) → calls.
pub fn dot_edges(dot: &str) -> BTreeMap<(String, String), u64> {
    let mut names = BTreeMap::new();
    let mut edges = BTreeMap::new();
    for line in dot.lines().map(str::trim) {
        if let Some((node, rest)) = line.split_once(" [label=\"") {
            if !node.contains(' ') {
                let name = rest.split("\\n").next().unwrap();
                names.insert(node.to_owned(), name.to_owned());
            }
        }
        if let Some((caller, rest)) = line.split_once(" -> ") {
            let (callee, rest) = rest.split_once(" [label=\"").unwrap();
            let calls: u64 = rest.split('"').next().unwrap().parse().unwrap();
            edges.insert((caller.to_owned(), callee.to_owned()), calls);
        }
    }
    edges
        .into_iter()
        .map(|((caller, callee), calls)| ((names[&caller].clone(), names[&callee].clone()), calls))
        .collect()
}
