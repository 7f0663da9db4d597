//! End to end: events beside the user functions (`-E`): off-CPU time as calls of
//! `linux:schedule`, system calls as calls of `sys_NAME` with their return values, USDT probes
//! as comment lines with their arguments; each nested under the user call where it happened.

mod common;

use std::collections::BTreeMap;

use common::*;

/// Per folded stack (`main;sleep_all;nanosleep@plt;linux:schedule_[k]`), its weight: self time in ns,
/// or calls.
fn folded(recording: &Recording, weight: &str) -> BTreeMap<String, u64> {
    let report = recording.report(&["--format=flame-graph", &format!("--weight={weight}")]);
    report
        .lines()
        .map(|line| {
            let (stack, weight) = line.rsplit_once(' ').expect("a folded stack line");
            (stack.to_owned(), weight.parse().expect("a weight"))
        })
        .collect()
}

/// The summed weight of the stacks that pass through `caller` and end in `function`.
fn under(stacks: &BTreeMap<String, u64>, caller: &str, function: &str) -> u64 {
    stacks
        .iter()
        .filter(|(stack, _)| {
            let frames: Vec<&str> = stack.split(';').collect();
            frames.last() == Some(&function) && frames.contains(&caller)
        })
        .map(|(_, weight)| weight)
        .sum()
}

#[test]
fn off_cpu_time_is_a_call_of_linux_schedule_where_the_thread_slept() {
    if !bpf_available("off_cpu_time_is_a_call_of_linux_schedule_where_the_thread_slept") {
        return;
    }
    let sleeper = compile("sleeper.c", "sleeper", &[]);
    const SLEEPS: u64 = 50;
    let recording = record_unchanged(&sleeper, &[&SLEEPS.to_string(), "3"], &["-E", "offcpu"]);
    let calls = folded(&recording, "calls");
    let times = folded(&recording, "time");
    let naps = under(&calls, "sleep_all", "linux:schedule_[k]");
    assert!(
        naps >= SLEEPS,
        "{naps} off-CPU intervals in sleep_all: {calls:?}"
    );
    let slept = under(&times, "sleep_all", "linux:schedule_[k]") as f64;
    let asked = (SLEEPS * 2_000_000) as f64;
    assert!(
        (slept - asked).abs() <= 0.2 * asked,
        "{slept} ns off the CPU in sleep_all, for {asked} ns of sleeps"
    );
    // The pseudo-function is the kernel's, and the summary counts it.
    let json = recording.json();
    assert_eq!(
        module_of(&json, "linux:schedule").as_deref(),
        Some("[kernel]")
    );
    // The time off the CPU is taken out of the calls it fell in, and said apart: sleep_all's
    // time is what it ran, a few µs a sleep, and its naps are its off_cpu_ns.
    let functions = json["functions"].as_array().unwrap();
    let sleep_all = functions.iter().find(|f| f["name"] == "sleep_all").unwrap();
    let off_cpu = sleep_all["off_cpu_ns"].as_u64().unwrap() as f64;
    assert!((off_cpu - slept).abs() <= 0.01 * slept, "{sleep_all}");
    let ran = sleep_all["total_ns"].as_u64().unwrap() as f64;
    assert!(ran < 0.1 * slept, "{sleep_all}");
    let summary = recording.report(&[]);
    assert!(
        summary.contains("Maximum     Off-CPU  Function"),
        "{summary}"
    );
    // --raw-times shows them as measured: the naps in sleep_all's time.
    let raw: serde_json::Value =
        serde_json::from_str(&recording.report(&["--format=json", "--raw-times"])).unwrap();
    let raw_functions = raw["functions"].as_array().unwrap();
    let raw_sleep_all = raw_functions
        .iter()
        .find(|f| f["name"] == "sleep_all")
        .unwrap();
    assert!(raw_sleep_all["total_ns"].as_u64().unwrap() as f64 > slept);
    assert!(raw_sleep_all.get("off_cpu_ns").is_none(), "{raw_sleep_all}");
    // The tracepoint's short and long names are one thing.
    let long = record(
        &sleeper,
        &["2", "1"],
        &["-E", "tracepoint:sched:sched_switch"],
    );
    assert!(calls_of(&long.json(), "linux:schedule") >= 2);
}

/// The return values of the calls of `function` in the replay, in order.
fn returns_of(replay: &str, function: &str) -> Vec<i64> {
    let shown = format!("{function}() = ");
    replay
        .lines()
        .filter_map(|line| {
            let value = line.split(&shown).nth(1)?;
            value.trim_end_matches(';').parse().ok()
        })
        .collect()
}

#[test]
fn system_calls_are_calls_under_the_function_that_made_them_with_their_return_values() {
    if !bpf_available(
        "system_calls_are_calls_under_the_function_that_made_them_with_their_return_values",
    ) {
        return;
    }
    let sleeper = compile("sleeper.c", "sleeper", &[]);
    const WRITES: u64 = 40;
    for event in ["tracepoint:syscalls:sys_enter_write", "syscalls"] {
        let recording = record_unchanged(&sleeper, &["1", &WRITES.to_string()], &["-E", event]);
        let calls = folded(&recording, "calls");
        // Exactly the program's own: not utrace's writes, not other processes'.
        assert_eq!(
            under(&calls, "write_all", "sys_write_[k]"),
            WRITES,
            "{event}: {calls:?}"
        );
        assert_eq!(
            under(&calls, "write@plt", "sys_write_[k]"),
            WRITES,
            "{event}: nested under the PLT call that made it: {calls:?}"
        );
        // The return values the program saw: write i wrote 1 + i % 32 bytes.
        let replay = recording.report(&["--format=replay"]);
        let returned = returns_of(&replay, "sys_write");
        let expected: Vec<i64> = (0..WRITES as i64).map(|i| 1 + i % 32).collect();
        assert_eq!(
            returned[..WRITES as usize],
            expected[..],
            "{event}: {replay}"
        );
        let json = recording.json();
        assert_eq!(module_of(&json, "sys_write").as_deref(), Some("[kernel]"));
    }
    // Only the system calls asked for.
    let writes = record_unchanged(
        &sleeper,
        &["1", "3"],
        &["-E", "tracepoint:syscalls:sys_exit_write"],
    );
    let counts = writes.traced_counts();
    assert!(
        counts
            .keys()
            .all(|name| !name.starts_with("sys_") || name == "sys_write"),
        "{counts:?}"
    );
}

#[test]
fn stack_on_a_system_call_gives_user_frames_then_kernel_frames() {
    if !bpf_available("stack_on_a_system_call_gives_user_frames_then_kernel_frames") {
        return;
    }
    // Frame pointers in the program; the C library's write() makes no frame, and the probe
    // reads its caller, emit, from the top of the user stack.
    let writer = compile("writer.c", "writer-fp", &["-fno-omit-frame-pointer"]);
    let recording = record_unchanged(
        &writer,
        &["25"],
        &["-E", "syscalls", "--stack", "sys_write"],
    );
    let stdout = String::from_utf8_lossy(&recording.output.stdout);
    let writes: u64 = stdout
        .lines()
        .find_map(|line| line.strip_prefix("writes "))
        .expect("the program's count of writes")
        .parse()
        .unwrap();
    assert_eq!(writes, 25);
    let text = recording.report(&["--format=stacks", "-f", "sys_write", "--folded"]);
    let through_emit = folded_user_stacks_through(&text, "emit");
    assert_eq!(
        through_emit.iter().map(|(_, calls)| calls).sum::<u64>(),
        writes,
        "{text}"
    );
    for (frames, _) in &through_emit {
        // Root to leaf: main, emit, the C library's wrapper, then the kernel's frames only.
        let emit = frames.iter().position(|&frame| frame == "emit").unwrap();
        assert_eq!(frames[emit - 1], "main", "{frames:?}");
        let first_kernel = frames
            .iter()
            .position(|frame| frame.ends_with("_[k]"))
            .unwrap_or_else(|| panic!("no kernel frame in {frames:?}"));
        assert!(first_kernel > emit + 1, "{frames:?}");
        assert!(
            frames[first_kernel..]
                .iter()
                .all(|frame| frame.ends_with("_[k]")),
            "{frames:?}"
        );
        assert!(
            frames.contains(&"do_syscall_64_[k]"),
            "the system call's entry in {frames:?}"
        );
        // utrace's own program and the tracepoint's way into it are left out.
        assert!(
            frames.iter().all(|frame| !frame.starts_with("bpf_")),
            "{frames:?}"
        );
    }
}

#[test]
fn stack_on_off_cpu_time_gives_where_the_thread_slept_user_then_kernel() {
    if !bpf_available("stack_on_off_cpu_time_gives_where_the_thread_slept_user_then_kernel") {
        return;
    }
    let sleeper = compile("sleeper.c", "sleeper-fp", &["-fno-omit-frame-pointer"]);
    const SLEEPS: u64 = 20;
    let recording = record_unchanged(
        &sleeper,
        &[&SLEEPS.to_string(), "1"],
        &["-E", "offcpu", "--stack", "linux:schedule"],
    );
    let text = recording.report(&["--format=stacks", "-f", "linux:schedule", "--folded"]);
    let in_sleep_all = folded_user_stacks_through(&text, "sleep_all");
    // Each nap leaves the CPU at least once from sleep_all, through the scheduler.
    assert!(
        in_sleep_all.iter().map(|(_, calls)| calls).sum::<u64>() >= SLEEPS,
        "{text}"
    );
    for (frames, _) in &in_sleep_all {
        let sleep_all = frames.iter().position(|&f| f == "sleep_all").unwrap();
        let first_kernel = frames.iter().position(|f| f.ends_with("_[k]")).unwrap();
        assert!(first_kernel > sleep_all, "{frames:?}");
        assert!(
            frames[first_kernel..].iter().all(|f| f.ends_with("_[k]")),
            "{frames:?}"
        );
        assert!(frames.last().unwrap().contains("schedule"), "{frames:?}");
    }
}

#[test]
fn follow_puts_a_childs_system_calls_and_off_cpu_time_under_its_pid() {
    if !bpf_available("follow_puts_a_childs_system_calls_and_off_cpu_time_under_its_pid") {
        return;
    }
    let sleeper = compile("sleeper.c", "sleeper", &[]);
    let recording = record_unchanged(
        &sleeper,
        &["5", "7", "1"],
        &[
            "--follow",
            "-E",
            "offcpu,tracepoint:syscalls:sys_enter_write",
        ],
    );
    let json = recording.json();
    let processes = counts_by_pid(&json);
    let target = json["pid"].as_u64().unwrap();
    assert_eq!(processes.len(), 2, "{processes:?}");
    let child = *processes.keys().find(|&&pid| pid != target).unwrap();
    // The child writes only in write_all; the parent prints too.
    assert_eq!(
        processes[&child].get("sys_write"),
        Some(&7),
        "{processes:?}"
    );
    assert!(processes[&target]["sys_write"] >= 7, "{processes:?}");
    for pid in [target, child] {
        assert!(
            processes[&pid]["linux:schedule"] >= 5,
            "{pid}: {processes:?}"
        );
    }
}

#[test]
fn usdt_probes_are_comment_lines_with_their_arguments_and_exact_counts() {
    if !bpf_available("usdt_probes_are_comment_lines_with_their_arguments_and_exact_counts") {
        return;
    }
    let usdt = compile("usdt.c", "usdt", &[]);
    // Untraced, nobody listens: the semaphore stays 0 and tick never fires.
    let untraced = run_untraced(&usdt, &["4"]);
    assert!(String::from_utf8_lossy(&untraced.stdout).contains("ticks 0"));
    let recording = record(&usdt, &["4"], &["-E", "usdt:myapp:*"]);
    assert_success(&recording.output);
    // Traced, the kernel set the semaphore: every tick fired, and each was recorded.
    assert!(String::from_utf8_lossy(&recording.output.stdout).contains("ticks 4"));
    let counts = recording.traced_counts();
    assert_eq!(counts.get("usdt:myapp:tick"), Some(&4), "{counts:?}");
    assert_eq!(counts.get("usdt:myapp:done"), Some(&1), "{counts:?}");
    let replay = recording.report(&["--format=replay"]);
    let comments: Vec<&str> = replay
        .lines()
        .filter_map(|line| line.split("| ").nth(1))
        .map(str::trim)
        .filter(|text| text.starts_with("/* usdt:"))
        .collect();
    assert_eq!(
        comments,
        [
            "/* usdt:myapp:tick(1, 2) */",
            "/* usdt:myapp:tick(2, 4) */",
            "/* usdt:myapp:tick(3, 6) */",
            "/* usdt:myapp:tick(4, 8) */",
            "/* usdt:myapp:done(4, -7) */",
        ],
        "{replay}"
    );
    // Under the function that hit them, and in the executable's module.
    let calls = folded(&recording, "calls");
    assert_eq!(under(&calls, "run", "usdt:myapp:tick"), 4, "{calls:?}");
    assert_eq!(
        module_of(&recording.json(), "usdt:myapp:tick").as_deref(),
        Some("usdt")
    );
    // One probe by name: only it is attached.
    let one = record(&usdt, &["2"], &["-E", "usdt:myapp:done"]);
    assert!(String::from_utf8_lossy(&one.output.stdout).contains("ticks 0"));
    assert_eq!(one.traced_counts().get("usdt:myapp:tick"), None);
    assert!(recording
        .info()
        .contains("USDT probes usdt:myapp:done, usdt:myapp:tick"));
}

#[test]
fn info_lists_the_usdt_probes_of_a_file() {
    let usdt = compile("usdt.c", "usdt", &[]);
    let output = utrace()
        .args(["info", "--list-usdt"])
        .arg(&usdt)
        .output()
        .unwrap();
    assert_success(&output);
    let text = String::from_utf8(output.stdout).unwrap();
    let tick = text
        .lines()
        .find(|l| l.starts_with("myapp:tick"))
        .expect(&text);
    let fields: Vec<&str> = tick.split_whitespace().collect();
    assert!(
        fields[1].starts_with("0x") && fields[2].starts_with("0x"),
        "{tick}"
    );
    assert_eq!(fields[3..].len(), 2, "two arguments: {tick}");
    let done = text
        .lines()
        .find(|l| l.starts_with("myapp:done"))
        .expect(&text);
    assert!(done.contains("$-7"), "{done}");
}

/// In the call graph, kernel pseudo-functions are hexagons and the calls into them dashed; the
/// graph renders with graphviz.
#[test]
fn the_call_graph_shows_kernel_calls_apart() {
    if !bpf_available("the_call_graph_shows_kernel_calls_apart") {
        return;
    }
    let sleeper = compile("sleeper.c", "sleeper", &[]);
    let recording = record_unchanged(&sleeper, &["1", "5"], &["-E", "syscalls"]);
    let dot = recording.report(&["--format=dot"]);
    let json = recording.json();
    let functions = json["functions"].as_array().unwrap();
    let id_of = |name: &str| {
        dot.lines()
            .find(|line| line.contains(&format!("[label=\"{name}\\ncalls")))
            .and_then(|line| line.trim().split(' ').next())
            .unwrap_or_else(|| panic!("no node for {name}: {dot}"))
            .to_owned()
    };
    let sys_write = id_of("sys_write");
    let node = dot
        .lines()
        .find(|line| line.trim().starts_with(&format!("{sys_write} [")))
        .unwrap();
    assert!(node.ends_with(", shape=hexagon];"), "{node}");
    let edge = dot
        .lines()
        .find(|line| line.contains(&format!("{} -> {sys_write} ", id_of("write@plt"))))
        .unwrap_or_else(|| panic!("no write@plt -> sys_write edge: {dot}"));
    assert!(
        edge.contains("label=\"5\"") && edge.ends_with(", style=dashed];"),
        "{edge}"
    );
    // User calls stay plain boxes with solid edges.
    assert!(dot
        .lines()
        .filter(|line| line.contains(&format!("{} ", id_of("write_all"))))
        .all(|line| !line.contains("hexagon") && !line.contains("dashed")));
    assert!(functions.len() > 2);
    let mut render = std::process::Command::new("dot")
        .arg("-Tsvg")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("graphviz's dot (tools/setup.sh installs it)");
    use std::io::Write;
    render
        .stdin
        .take()
        .unwrap()
        .write_all(dot.as_bytes())
        .unwrap();
    let svg = render.wait_with_output().unwrap();
    assert!(svg.status.success() && String::from_utf8_lossy(&svg.stdout).contains("<svg"));
}

/// Held by the tests of `test/preempted.c`: each pins its two threads to one CPU, and the other's
/// spinner there would preempt its main thread too.
static PREEMPTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `preempted ARGS` recorded with `extra`, run to its end. The kernel's fair server (6.12 on)
/// may lend the preempted main thread some time before the spin ends, most often where other
/// tests' threads were starved on that CPU just before: then the call was not preempted for the
/// whole spin, and the program says so (`mid-spin 1`). Recorded again then, up to three times.
fn record_preempted(args: &[&str], extra: &[&str]) -> Recording {
    let _alone = PREEMPTING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let program = compile("preempted.c", "preempted", &["-pthread"]);
    for _ in 1..3 {
        let recording = record(&program, args, extra);
        if !String::from_utf8_lossy(&recording.output.stdout).contains("mid-spin 1") {
            return checked_preempted(recording);
        }
        eprintln!("the main thread ran before the spin ended: recording again");
    }
    checked_preempted(record(&program, args, extra))
}

/// `recording` of `preempted`, once it ended well with its main thread preempted for the whole
/// spin.
fn checked_preempted(recording: Recording) -> Recording {
    let stderr = String::from_utf8_lossy(&recording.output.stderr);
    assert!(recording.output.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&recording.output.stdout);
    assert!(
        stdout.contains("mid-spin 0"),
        "the main thread ran before the spin ended, three times: {stdout}"
    );
    recording
}

/// By default (no `-E offcpu`), the time a thread spends preempted is taken out of the calls it
/// fell in and shown in a `Preempted` column; it is no call of its own. `test/preempted.c` holds
/// one call of `tiny` preempted by a SCHED_FIFO thread that spins 100 ms on the same CPU.
#[test]
fn the_time_preempted_is_taken_out_of_a_tiny_function_by_default() {
    if !bpf_available("the_time_preempted_is_taken_out_of_a_tiny_function_by_default") {
        return;
    }
    const CALLS: u64 = 2000;
    let recording = record_preempted(&[&CALLS.to_string(), "100"], &[]);
    let stdout = String::from_utf8_lossy(&recording.output.stdout);
    let own = own_counts(&recording.output.stdout);
    assert_eq!(own["tiny"], CALLS, "{stdout}");
    let spun: u64 = (stdout.lines())
        .find_map(|line| line.strip_prefix("spun "))
        .and_then(|ns| ns.parse().ok())
        .expect("the spinner says how long it spun");
    assert!(spun >= 100_000_000, "{stdout}");
    let json = recording.json();
    let functions = json["functions"].as_array().unwrap();
    let tiny = functions.iter().find(|f| f["name"] == "tiny").unwrap();
    assert_eq!(tiny["calls"], CALLS, "{tiny}");
    // The preemption is in its own figure, at least what the spinner held the CPU (other
    // threads of the machine may have run before tiny's thread got it back).
    let preempted = tiny["preempted_ns"].as_u64().unwrap();
    assert!(
        preempted >= spun && preempted < spun + 200_000_000,
        "{preempted} ns preempted for {spun} ns spun: {tiny}"
    );
    assert!(tiny.get("off_cpu_ns").is_none(), "{tiny}");
    // And not in its times: no call carries the spin (a loaded host may still stretch one by
    // milliseconds, which a guest's scheduler never sees).
    let max = tiny["max_ns"].as_u64().unwrap();
    let total = tiny["total_ns"].as_u64().unwrap();
    assert!(max < spun / 2, "{tiny}");
    // No pseudo-function shows: no row, no call in the trees.
    assert!(functions
        .iter()
        .all(|f| !f["name"].as_str().unwrap().starts_with("linux:")));
    let summary = recording.report(&[]);
    assert!(
        summary.contains("Maximum   Preempted  Function"),
        "{summary}"
    );
    for format in ["replay", "flame-graph", "chrome", "stacks", "dot", "graph"] {
        let report = recording.report(&[&format!("--format={format}")]);
        assert!(!report.contains("linux:"), "--format={format}: {report}");
    }
    assert!(
        recording
            .info()
            .contains("time preempted (taken out of the calls it fell in)"),
        "{}",
        recording.info()
    );
    // --raw-times leaves it in: the preempted call is the longest.
    let raw: serde_json::Value =
        serde_json::from_str(&recording.report(&["--format=json", "--raw-times"])).unwrap();
    let raw_functions = raw["functions"].as_array().unwrap();
    let raw_tiny = raw_functions.iter().find(|f| f["name"] == "tiny").unwrap();
    assert_eq!(raw_tiny["calls"], CALLS, "{raw_tiny}");
    assert!(raw_tiny["max_ns"].as_u64().unwrap() >= spun, "{raw_tiny}");
    // Each call lost at least its time preempted (and at most its probes' costs more).
    let raw_total = raw_tiny["total_ns"].as_u64().unwrap();
    assert!(raw_total - total >= preempted, "{raw_tiny} against {tiny}");
    assert!(raw_tiny.get("preempted_ns").is_none(), "{raw_tiny}");
}

/// With `-E offcpu`, every interval off the CPU is a call of `linux:schedule`, the time preempted
/// among them, as before: no `Preempted` column.
#[test]
fn offcpu_records_the_time_preempted_as_linux_schedule_calls() {
    if !bpf_available("offcpu_records_the_time_preempted_as_linux_schedule_calls") {
        return;
    }
    let recording = record_preempted(&["200", "20"], &["-E", "offcpu"]);
    let json = recording.json();
    let functions = json["functions"].as_array().unwrap();
    let tiny = functions.iter().find(|f| f["name"] == "tiny").unwrap();
    assert!(tiny["off_cpu_ns"].as_u64().unwrap() >= 20_000_000, "{tiny}");
    assert!(tiny.get("preempted_ns").is_none(), "{tiny}");
    assert!(calls_of(&json, "linux:schedule") >= 1);
}
