//! End to end: kernel functions (`-k`, `-K`) as calls in the tree, under the user call whose
//! system call reached them, counted exactly, on every kernel that has kprobes with BPF cookies
//! (Linux 5.15) or kprobe_multi links; refused in one line on the others (this machine's 6.18,
//! built without kprobes; Debian 11's 5.10, which has no BPF cookies). These tests run in the
//! guests of tools/vm-test.sh.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::*;

/// Whether this kernel can trace kernel functions, found apart from utrace: kprobes, and a
/// kernel recent enough for BPF cookies on them (5.15).
fn kernel_traces_functions() -> bool {
    let kprobes = Path::new("/sys/bus/event_source/devices/kprobe/type").exists();
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut numbers = release
        .split(['.', '-'])
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let version = (numbers.next().unwrap(), numbers.next().unwrap());
    kprobes && version >= (5, 15)
}

/// On a kernel that cannot trace kernel functions: `-k` fails before the program runs, in one
/// line that says what the kernel lacks.
fn assert_refused(program: &Path) {
    let output = utrace()
        .args(["record", "-o", "/dev/null", "-k", "vfs_write", "--"])
        .arg(program)
        .args(["3", "1"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    // The kernel's fallbacks may be said before, in lines of their own.
    let stderr = String::from_utf8_lossy(&output.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].starts_with("utrace: error: -k needs ")
            && errors[0].ends_with(", which this kernel lacks"),
        "{stderr}"
    );
    // Refused before the program ran: it prints its counts when it ends.
    assert!(output.stdout.is_empty(), "the program ran");
}

/// Per folded stack (`main;write_all;write@plt;vfs_write_[k]`), its calls.
fn folded_calls(data: &Path) -> BTreeMap<String, u64> {
    let output = report_output(data, &["--format=flame-graph", "--weight=calls"]);
    assert_success(&output);
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let (stack, calls) = line.rsplit_once(' ').expect("a folded stack line");
            (stack.to_owned(), calls.parse().expect("a count"))
        })
        .collect()
}

/// The calls of stacks that end in `path` (`write@plt;vfs_write_[k]`), whatever leads there.
fn ending_in(stacks: &BTreeMap<String, u64>, path: &str) -> u64 {
    let tail = format!(";{path}");
    stacks
        .iter()
        .filter(|(stack, _)| stack.ends_with(&tail) || *stack == path)
        .map(|(_, calls)| calls)
        .sum()
}

/// Another copy of the program writing and reading in a loop while the test records: none of
/// its calls may be counted. Killed when dropped.
struct Neighbour(Child);

impl Neighbour {
    fn start(program: &Path) -> Neighbour {
        let script = format!("while :; do '{}' 50 50 >/dev/null; done", program.display());
        let child = Command::new("sh")
            .args(["-c", &script])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Neighbour(child)
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const WRITES: u64 = 300;
const READS: u64 = 200;

#[test]
fn kernel_functions_are_calls_under_the_system_calls_that_reached_them() {
    if !bpf_available("kernel_functions_are_calls_under_the_system_calls_that_reached_them") {
        return;
    }
    let program = compile("file_io.c", "file_io", &[]);
    if !kernel_traces_functions() {
        return assert_refused(&program);
    }
    let _neighbour = Neighbour::start(&program);
    let recording = record_unchanged(
        &program,
        &[&WRITES.to_string(), &READS.to_string()],
        &[
            "-k",
            "vfs_write,vfs_read",
            "-E",
            "tracepoint:syscalls:sys_enter_write",
        ],
    );
    let stacks = folded_calls(&recording.data());
    // Each write() the program made: its system call, and in it vfs_write.
    let path = "main;write_all;write@plt;sys_write_[k];vfs_write_[k]";
    assert_eq!(stacks.get(path), Some(&WRITES), "{stacks:#?}");
    let path = "main;read_all;read@plt;vfs_read_[k]";
    assert_eq!(stacks.get(path), Some(&READS), "{stacks:#?}");
    // Besides, only the flush of its output at exit, in this process alone: none of the
    // neighbour's thousands.
    let json = recording.json();
    assert_eq!(calls_of(&json, "vfs_write"), WRITES + 1, "{stacks:#?}");
    assert_eq!(
        ending_in(&stacks, "sys_write_[k];vfs_write_[k]"),
        WRITES + 1
    );
    // One process: the report names none.
    let functions = json["functions"].as_array().unwrap();
    assert!(functions.iter().all(|f| f.get("pid").is_none()), "{json}");
    assert_eq!(module_of(&json, "vfs_write").as_deref(), Some("[kernel]"));
    let summary = recording.report(&[]);
    assert!(summary.contains(" vfs_write [k]\n"), "{summary}");
    let info = recording.info();
    assert!(
        info.contains(", 1 system calls, 2 kernel functions\n"),
        "{info}"
    );
    // Timed like user calls, and within their callers.
    let replay = recording.report(&["--format=replay"]);
    let lines: Vec<&str> = replay.lines().collect();
    let nested = lines.windows(4).filter(|four| {
        four[0].ends_with("|     write@plt() {")
            && four[1].ends_with("|       sys_write() {")
            && four[2].ends_with("|         vfs_write();")
            && four[3].ends_with("|       } = 1; /* sys_write */")
    });
    assert_eq!(nested.count() as u64, WRITES, "{replay}");
}

#[test]
fn kernel_functions_of_a_running_process_are_counted_exactly() {
    if !bpf_available("kernel_functions_of_a_running_process_are_counted_exactly") {
        return;
    }
    let program = compile("file_io.c", "file_io", &[]);
    if !kernel_traces_functions() {
        return assert_refused(&program);
    }
    let (mut process, lines) = start_waiting(
        Command::new(&program)
            .args([&WRITES.to_string(), &READS.to_string()])
            .env("FILE_IO_WAIT", "1"),
    );
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("utrace.data");
    let recorder = AttachedRecorder::start(process.id(), &data, &["-k", "vfs_write,vfs_read"]);
    send_signal(process.id(), libc::SIGUSR1);
    let stdout: Vec<String> = lines.map(|line| line.unwrap()).collect();
    assert!(process.wait().unwrap().success());
    recorder.finish();
    assert!(stdout.contains(&format!("writes {WRITES}")), "{stdout:?}");
    let stacks = folded_calls(&data);
    // main was running when utrace attached: the paths start below it.
    let path = "write_all;write@plt;vfs_write_[k]";
    assert_eq!(stacks.get(path), Some(&WRITES), "{stacks:#?}");
    let path = "read_all;read@plt;vfs_read_[k]";
    assert_eq!(stacks.get(path), Some(&READS), "{stacks:#?}");
}

#[test]
fn kernel_depth_limits_the_levels_below_a_system_call() {
    if !bpf_available("kernel_depth_limits_the_levels_below_a_system_call") {
        return;
    }
    let program = compile("file_io.c", "file_io", &[]);
    if !kernel_traces_functions() {
        return assert_refused(&program);
    }
    let (writes, reads) = (WRITES.to_string(), READS.to_string());
    let args = [writes.as_str(), reads.as_str()];
    // vfs_write calls rw_verify_area, and so does vfs_read, which is not traced here.
    let functions = "vfs_write,rw_verify_area";
    let all = record_unchanged(&program, &args, &["-k", functions]);
    let stacks = folded_calls(&all.data());
    let path = "main;write_all;write@plt;vfs_write_[k];rw_verify_area_[k]";
    assert_eq!(stacks.get(path), Some(&WRITES), "{stacks:#?}");
    let path = "main;read_all;read@plt;rw_verify_area_[k]";
    assert_eq!(stacks.get(path), Some(&READS), "{stacks:#?}");

    // One level: rw_verify_area only where it is the first traced one, under read().
    // vfs_caches_init (__init code, freed after boot) cannot be traced: one warning.
    let functions = "vfs_write,rw_verify_area,vfs_caches_init";
    let first = record_unchanged(&program, &args, &["-K", "1", "-k", functions]);
    let stderr = String::from_utf8_lossy(&first.output.stderr);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("cannot be traced"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("1 kernel function -k matched cannot be traced (vfs_caches_init:"),
        "{stderr}"
    );
    let stacks = folded_calls(&first.data());
    let path = "main;write_all;write@plt;vfs_write_[k]";
    assert_eq!(stacks.get(path), Some(&WRITES), "{stacks:#?}");
    let path = "main;read_all;read@plt;rw_verify_area_[k]";
    assert_eq!(stacks.get(path), Some(&READS), "{stacks:#?}");
    assert_eq!(ending_in(&stacks, "vfs_write_[k];rw_verify_area_[k]"), 0);
}

#[test]
fn a_glob_of_hundreds_of_kernel_functions_attaches_and_says_how_long_it_took() {
    if !bpf_available("a_glob_of_hundreds_of_kernel_functions_attaches_and_says_how_long_it_took") {
        return;
    }
    let program = compile("file_io.c", "file_io", &[]);
    if !kernel_traces_functions() {
        return assert_refused(&program);
    }
    let recording = record_unchanged(
        &program,
        &["20", "10"],
        &["-d", "-k", "tcp_*,udp_*,ip_*,vfs_*"],
    );
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    // "kernel functions: N attached with kprobe_multi in T ms", once: the probe-cost
    // measurement's probe on getppid's kernel function, no function the user asked for, is not
    // said.
    let said: Vec<&str> = (stderr.lines())
        .filter_map(|line| line.strip_prefix("utrace: kernel functions: "))
        .filter(|rest| rest.contains(" attached with "))
        .collect();
    assert_eq!(said.len(), 1, "{stderr}");
    let attached = said[0];
    let count: usize = attached.split(' ').next().unwrap().parse().unwrap();
    assert!(count >= 500, "{attached}");
    let millis: f64 = attached
        .rsplit_once(" in ")
        .and_then(|(_, time)| time.strip_suffix(" ms"))
        .and_then(|time| time.parse().ok())
        .unwrap_or_else(|| panic!("no attach time in {attached}"));
    assert!(millis > 0.0, "{attached}");
    // The program's own write()s are among the calls.
    let stacks = folded_calls(&recording.data());
    let path = "main;write_all;write@plt;vfs_write_[k]";
    assert_eq!(stacks.get(path), Some(&20), "{stacks:#?}");
}

#[test]
fn stack_on_a_kernel_function_gives_user_frames_then_kernel_frames() {
    if !bpf_available("stack_on_a_kernel_function_gives_user_frames_then_kernel_frames") {
        return;
    }
    let program = compile("file_io.c", "file_io-fp", &["-fno-omit-frame-pointer"]);
    if !kernel_traces_functions() {
        return assert_refused(&program);
    }
    let recording = record_unchanged(
        &program,
        &[&WRITES.to_string(), "0"],
        &["-k", "vfs_write", "--stack", "vfs_write"],
    );
    let text = recording.report(&["--format=stacks", "-f", "vfs_write", "--folded"]);
    let through_write_all = folded_user_stacks_through(&text, "write_all");
    let calls: u64 = through_write_all.iter().map(|(_, calls)| calls).sum();
    assert_eq!(calls, WRITES, "{text}");
    for (frames, _) in &through_write_all {
        // Root to leaf: main, write_all, the C library's write, then the kernel's frames to
        // vfs_write.
        let write_all = frames.iter().position(|&f| f == "write_all").unwrap();
        assert_eq!(frames[write_all - 1], "main", "{frames:?}");
        let first_kernel = frames
            .iter()
            .position(|frame| frame.ends_with("_[k]"))
            .unwrap_or_else(|| panic!("no kernel frame in {frames:?}"));
        assert!(first_kernel > write_all, "{frames:?}");
        assert!(frames[first_kernel..].iter().all(|f| f.ends_with("_[k]")));
        assert!(frames.contains(&"do_syscall_64_[k]"), "{frames:?}");
    }
}

/// The call graph draws who in user space reaches a kernel function and how often, as UTrace's
/// graph does; `--diff` compares kernel functions' counts between two runs as it does user ones.
#[test]
fn the_call_graph_and_diff_show_kernel_functions_like_user_ones() {
    let test = "the_call_graph_and_diff_show_kernel_functions_like_user_ones";
    let functions = ["-k", "vfs_write,vfs_read"];
    let Some(new) = record_file_io(test, &functions) else {
        return;
    };
    let dot = new.report(&["--format=dot"]);
    let edges = dot_edges(&dot);
    let edge = |caller: &str, callee: &str| edges.get(&(caller.to_owned(), callee.to_owned()));
    assert_eq!(edge("write@plt", "vfs_write"), Some(&WRITES), "{dot}");
    assert_eq!(edge("read@plt", "vfs_read"), Some(&READS), "{dot}");
    // Drawn as calls into the kernel: a hexagon reached by a dashed edge.
    let node = dot
        .lines()
        .find(|line| line.contains("[label=\"vfs_write\\ncalls "))
        .unwrap_or_else(|| panic!("no vfs_write node in {dot}"));
    assert!(node.ends_with(", shape=hexagon];"), "{node}");
    let id = node.trim().split(' ').next().unwrap();
    let into = dot
        .lines()
        .filter(|line| line.contains(&format!(" -> {id} ")))
        .collect::<Vec<_>>();
    assert!(
        !into.is_empty() && into.iter().all(|line| line.ends_with(", style=dashed];")),
        "{into:?}"
    );

    // Against a run of half the writes and reads: the kernel functions' calls double.
    let program = compile("file_io.c", "file_io", &[]);
    let half = [(WRITES / 2).to_string(), (READS / 2).to_string()];
    let base = record_unchanged(&program, &[&half[0], &half[1]], &functions);
    let base_data = base.data();
    let base_file = base_data.to_str().unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&new.report(&["--diff", base_file, "--format=json"])).unwrap();
    let rows = json["functions"].as_array().unwrap();
    // Besides the loop's calls, each run has the same few of its own: vfs_write writes the
    // program's output at its end, vfs_read is called by the dynamic loader (reading libc's
    // header) before main.
    let mut counted = Vec::new();
    for (name, base_loop, new_loop) in [
        ("vfs_write", WRITES / 2, WRITES),
        ("vfs_read", READS / 2, READS),
    ] {
        let row = rows
            .iter()
            .find(|row| row["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {json:#}"));
        assert_eq!(row["module"], "[kernel]", "{row}");
        let calls = |side: &str| row[side]["calls"].as_u64().unwrap();
        assert_eq!(calls("new") - new_loop, calls("base") - base_loop, "{row}");
        assert_eq!(row["change"]["calls"], new_loop - base_loop, "{row}");
        counted.push((name, calls("base"), calls("new")));
    }
    assert_eq!(counted[0], ("vfs_write", WRITES / 2 + 1, WRITES + 1));
    // The text marks them as the summary does: calls before, after, and the change.
    let text = new.report(&["--diff", base_file, "-f", "vfs_*"]);
    for (name, base_calls, new_calls) in counted {
        let line = text
            .lines()
            .find(|line| line.ends_with(&format!(" {name} [k]")))
            .unwrap_or_else(|| panic!("no {name} [k] in {text}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        let change = format!("+{}", new_calls - base_calls);
        assert_eq!(
            words[..3],
            [base_calls.to_string(), new_calls.to_string(), change],
            "{line}"
        );
    }
}

/// The calls of a replay, without their durations and indentation (`vfs_write(count=1) = 1;`).
fn replay_calls(replay: &str) -> Vec<&str> {
    let calls = replay.lines().filter_map(|line| line.split_once(" | "));
    calls.map(|(_, call)| call.trim()).collect()
}

/// The value `name=` has in a call's line (`file=0xff…,` gives `0xff…`).
fn named_value<'l>(call: &'l str, name: &str) -> Option<&'l str> {
    let start = call.find(&format!("{name}="))? + name.len() + 1;
    let rest = &call[start..];
    let end = rest.find([',', ')']).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// `file_io WRITES READS` recorded with `extra`, on a kernel that traces kernel functions; None
/// (after checking the refusal) on one that does not, or without BPF.
fn record_file_io(test: &str, extra: &[&str]) -> Option<Recording> {
    if !bpf_available(test) {
        return None;
    }
    let program = compile("file_io.c", "file_io", &[]);
    if !kernel_traces_functions() {
        assert_refused(&program);
        return None;
    }
    let args = [WRITES.to_string(), READS.to_string()];
    Some(record_unchanged(&program, &[&args[0], &args[1]], extra))
}

#[test]
fn auto_args_name_and_type_kernel_function_values_by_the_kernels_btf() {
    let functions = "vfs_write,vfs_read,shmem_file_setup";
    let extra = ["-k", functions, "-a", "-A", "vfs_write@arg9"];
    let test = "auto_args_name_and_type_kernel_function_values_by_the_kernels_btf";
    let Some(recording) = record_file_io(test, &extra) else {
        return;
    };
    // vfs_write has four parameters: arg9 is said once, and left out.
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("arg9")).collect();
    assert_eq!(
        warnings,
        [
            "utrace: warning: -A 'vfs_write@arg9': arg9 is not captured on kernel function \
          vfs_write: beyond the parameters the kernel's BTF gives"
        ],
        "{stderr}"
    );
    let replay = recording.report(&["--format=replay"]);
    let calls = replay_calls(&replay);
    // The memfd: its name is a kernel string, and its struct file what it returns.
    let setups: Vec<&&str> = (calls.iter())
        .filter(|call| call.starts_with("shmem_file_setup("))
        .collect();
    assert_eq!(setups.len(), 1, "{replay}");
    let (arguments, file) = setups[0].split_once(") = ").unwrap();
    assert_eq!(
        arguments, "shmem_file_setup(name=\"memfd:file_io\", size=0, flags=2097152",
        "{replay}"
    );
    let file = file.strip_suffix(';').unwrap();
    assert!(file.starts_with("0xff"), "{replay}");
    // Each write(fd, "x", 1): vfs_write gets that file, the same buffer (a buffer and its
    // length: in hex) and count, and returns 1.
    let writes = calls.windows(2).filter(|two| {
        let buffer = two[0]
            .strip_prefix("write@plt(3, ")
            .and_then(|rest| rest.strip_suffix(", 1) {"));
        let pos = named_value(two[1], "pos").unwrap_or("");
        let expected = format!(
            "vfs_write(file={file}, buf={}, count=1, pos={pos}) = 1;",
            buffer.unwrap_or("?")
        );
        buffer.is_some() && pos.starts_with("0xff") && two[1] == expected
    });
    assert_eq!(writes.count() as u64, WRITES, "{replay}");
    let reads = calls.iter().filter(|call| {
        let buffer = named_value(call, "buf").unwrap_or("");
        let pos = named_value(call, "pos").unwrap_or("");
        let expected = format!("vfs_read(file={file}, buf={buffer}, count=1, pos={pos}) = 1;");
        buffer.starts_with("0x7f") && **call == expected
    });
    assert_eq!(reads.count() as u64, READS, "{replay}");
}

#[test]
fn arguments_and_return_values_of_kernel_functions_are_captured_as_asked() {
    let extra = [
        "-k",
        "vfs_write,vfs_read",
        "-A",
        "vfs_write@arg3",
        "-R",
        "vfs_write@retval/x",
    ];
    let test = "arguments_and_return_values_of_kernel_functions_are_captured_as_asked";
    let Some(recording) = record_file_io(test, &extra) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert!(!stderr.contains("no traced function matches"), "{stderr}");
    let replay = recording.report(&["--format=replay"]);
    let calls = replay_calls(&replay);
    // arg3 without a format: size_t, unsigned, from BTF; named as BTF names it.
    let count = |line: &str| calls.iter().filter(|call| **call == line).count() as u64;
    assert_eq!(count("vfs_write(count=1) = 0x1;"), WRITES, "{replay}");
    // vfs_read captures nothing: the program's reads and the loader's.
    assert!(count("vfs_read();") >= READS, "{replay}");
    assert!(
        calls
            .iter()
            .all(|call| !call.starts_with("vfs_read(") || *call == "vfs_read();"),
        "{replay}"
    );
    // Chrome traces name the value as BTF does.
    let chrome = recording.report(&["--format=chrome"]);
    assert_eq!(
        chrome.matches("\"args\":{\"count\":\"1\"}").count() as u64,
        WRITES,
        "{chrome}"
    );
}

/// getppid system calls `getppids` makes, each reaching the kernel function behind getppid.
const GETPPIDS: u64 = 1000;

/// The kernel function behind getppid, as this kernel lists it (as utrace's calibration finds
/// it).
fn getppid_function() -> &'static str {
    let listed = std::fs::read_to_string("/sys/kernel/tracing/available_filter_functions").unwrap();
    let names: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    ["__do_sys_getppid", "__x64_sys_getppid"]
        .into_iter()
        .find(|name| names.contains(name))
        .expect("getppid's function is traceable")
}

/// The inside and whole cost, in ns, `utrace info` shows for the class named `class`.
fn stored_cost(info: &str, class: &str) -> (u64, u64) {
    let line = info
        .lines()
        .find_map(|line| line.trim().strip_prefix(&format!("{class}: ")))
        .unwrap_or_else(|| panic!("no {class} cost in {info}"));
    // "1234 ns inside the call, spread 56 ns, 7890 ns in all"
    let words: Vec<&str> = line.split_whitespace().collect();
    let whole = words[words.len() - 4];
    (words[0].parse().unwrap(), whole.parse().unwrap())
}

/// What the probe-cost correction took out of `name`'s total: its raw total less its corrected
/// one, less the time it was preempted, which is taken out too and is no probe cost.
fn taken_out_ns(corrected: &serde_json::Value, raw: &serde_json::Value, name: &str) -> u64 {
    let function = |json: &serde_json::Value| {
        let functions = json["functions"].as_array().unwrap();
        functions
            .iter()
            .find(|f| f["name"] == name)
            .unwrap()
            .clone()
    };
    let (corrected, raw) = (function(corrected), function(raw));
    let total = |f: &serde_json::Value| f["total_ns"].as_u64().unwrap();
    let preempted = corrected["preempted_ns"].as_u64().unwrap_or(0);
    total(&raw) - total(&corrected) - preempted
}

#[test]
fn kernel_functions_and_their_callers_lose_the_kernel_probes_cost() {
    if !bpf_available("kernel_functions_and_their_callers_lose_the_kernel_probes_cost") {
        return;
    }
    let program = compile("getppids.c", "getppids", &[]);
    if !kernel_traces_functions() {
        return assert_refused(&program);
    }
    let function = getppid_function();
    let recording = record_unchanged(&program, &[&GETPPIDS.to_string()], &["-k", function]);
    let stdout = String::from_utf8_lossy(&recording.output.stdout);
    assert!(
        stdout.contains(&format!("getppid {GETPPIDS}\n")),
        "{stdout}"
    );
    assert_counts_match(
        &own_counts(&recording.output.stdout),
        &recording.traced_counts(),
    );
    let corrected = recording.json();
    assert_eq!(calls_of(&corrected, function), GETPPIDS);

    // The figures of the class the recording attached with, measured at its start.
    let info = recording.info();
    let class = match info.contains("kernel function, kprobe_multi: ") {
        true => "kernel function, kprobe_multi",
        false => "kernel function, kprobe and kretprobe",
    };
    let (inside_ns, full_ns) = stored_cost(&info, class);
    let raw = recording.report(&["--format=json", "--raw-times"]);
    let raw: serde_json::Value = serde_json::from_str(&raw).unwrap();
    let calls = GETPPIDS as f64;
    // Each call loses the inside cost, or all it measured where that was less (a call faster
    // than the median): near N × inside, never more.
    let kernel = taken_out_ns(&corrected, &raw, function) as f64 / (calls * inside_ns as f64);
    // The caller loses each call's whole cost, less what the call could not lose, and its own
    // probes' inside cost.
    let functions = corrected["functions"].as_array().unwrap();
    let ask_parent = functions
        .iter()
        .find(|f| f["name"] == "ask_parent")
        .unwrap();
    let entry = ask_parent["entry_site"].as_str().unwrap();
    let (own_inside_ns, _) = stored_cost(&info, &format!("{entry} entry, uretprobe"));
    let caller_ns = taken_out_ns(&corrected, &raw, "ask_parent").saturating_sub(own_inside_ns);
    let caller = caller_ns as f64 / (calls * full_ns as f64);
    eprintln!(
        "{class}: {inside_ns} ns inside, {full_ns} ns in all; taken out of {function}: \
         {kernel:.3} × calls × inside; of ask_parent, less its own: {caller:.3} × calls × in all"
    );
    // Never more than measured; less where the calls ran faster than the calibration's median,
    // which a guest under load swings: 0.47 to 1.0 for the kernel function in the 6.12 and 6.1
    // guests (0.474 in a .ci/run), 0.52 to 1.0 for the caller. Without the correction both are 0.
    assert!((0.25..=1.0).contains(&kernel), "{kernel:.3}\n{info}");
    assert!((0.25..=1.01).contains(&caller), "{caller:.3}\n{info}");
}
