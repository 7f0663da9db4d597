//! Golden tests: a hand-written trace in, the exact expected reports out. The expected outputs
//! sit in `tests/data/report/`; they were worked out by hand from the events below (the
//! comments give the durations), not produced by the code under test.

use std::fmt;

use super::flame_graph::{frame_name, FoldedStacks, Weight};
use super::summary::{CorrectedDuration, FunctionStats, HumanDuration, SortKey, Summary};
use super::*;
use crate::event::{Event, EventSource, IterBlocks};
use crate::filter::FilterSpec;
use crate::replay::FinishedCall;
use crate::table::{FunctionId, FunctionKind, TracedFunction};

const MAIN: FunctionId = 0;
const SORT: FunctionId = 1;
const CMP: FunctionId = 2;
const FIB: FunctionId = 3;
const MEMCPY: FunctionId = 4;
const ODD: FunctionId = 5;

const MAIN_TID: u32 = 100;
const WORKER_TID: u32 = 101;

fn golden(name: &str) -> String {
    let path = format!("{}/tests/data/report/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

fn function(name: &str, module: u32) -> TracedFunction {
    TracedFunction {
        name: name.to_owned(),
        module,
        offset: 0x1000,
        size: 16,
        kind: if name.ends_with("@plt") {
            FunctionKind::Plt
        } else {
            FunctionKind::Function
        },
        probes: Default::default(),
        values: Vec::new(),
        user_stack: false,
        argument_names: Vec::new(),
        source: None,
        detached: None,
    }
}

fn sort_table() -> FunctionTable {
    FunctionTable {
        modules: vec![
            "/usr/bin/sort".to_owned(),
            "/lib/x86_64-linux-gnu/libc.so.6".to_owned(),
        ],
        functions: vec![
            function("main", 0),
            function("sort", 0),
            function("cmp", 0),
            function("fib", 0),
            function("memcpy@plt", 0),
            function("odd;name", 1),
            function("unused", 0),
        ],
        ..Default::default()
    }
}

fn sort_info() -> TraceInfo {
    TraceInfo {
        command: "./sort -n input.txt".to_owned(),
        pid: 4242,
        start_monotonic_ns: 0,
        duration_ns: 2_600_000,
        events: 27,
        lost_events: 3,
        lost_by_thread: vec![(101, 2), (102, 1)],
        damaged_chunks: 0,
    }
}

/// Two threads, interleaved in time order as the reader yields them.
fn sort_events() -> Vec<Event> {
    vec![
        Event::entry(0, MAIN_TID, MAIN),
        Event::entry(1_000, MAIN_TID, SORT),
        // Running at attach: unmatched.
        Event::exit(1_000, WORKER_TID, SORT),
        Event::entry(1_500, MAIN_TID, CMP),
        Event::exit(2_000, MAIN_TID, CMP), // 500
        Event::entry(2_200, WORKER_TID, ODD),
        Event::entry(2_300, WORKER_TID, MEMCPY),
        Event::exit(2_450, WORKER_TID, MEMCPY), // 150
        Event::entry(2_500, MAIN_TID, CMP),
        Event::exit(3_200, WORKER_TID, ODD), // 1000, self 850
        // Corrupt: unknown function id.
        Event::entry(3_250, WORKER_TID, 99),
        // Never exits: closed at the last timestamp, 2_500_000 (2_496_700).
        Event::entry(3_300, WORKER_TID, CMP),
        Event::exit(3_700, MAIN_TID, CMP),  // 1200
        Event::exit(4_000, MAIN_TID, SORT), // 3000, self 1300
        Event::entry(5_000, MAIN_TID, FIB),
        Event::entry(5_100, MAIN_TID, FIB),
        Event::entry(5_200, MAIN_TID, FIB),
        Event::exit(5_250, MAIN_TID, FIB), // 50, recursive
        Event::exit(5_400, MAIN_TID, FIB), // 300, self 250, recursive
        Event::entry(5_500, MAIN_TID, FIB),
        Event::exit(5_600, MAIN_TID, FIB), // 100, recursive
        Event::exit(6_000, MAIN_TID, FIB), // 1000, self 600
        // Its return is lost: unwound by main's exit (2_493_000).
        Event::entry(7_000, MAIN_TID, MEMCPY),
        Event::exit(2_500_000, MAIN_TID, MAIN), // 2_500_000, self 3000
    ]
}

/// Runs one report over the sort trace, streamed in blocks of 5 events.
fn sort_report(format: Format) -> (String, ReportOutcome) {
    sort_report_with(format, &ReportOptions::default())
}

fn sort_report_with(format: Format, options: &ReportOptions) -> (String, ReportOutcome) {
    let events = sort_events();
    let mut source = IterBlocks::new(events.chunks(5));
    let mut out = Vec::new();
    let outcome = write_report(
        format,
        options,
        |_| sort_info(),
        &sort_table(),
        &mut source,
        &mut out,
    )
    .unwrap_or_else(|e| panic!("{format} report failed: {e}"));
    (String::from_utf8(out).unwrap(), outcome)
}

/// One report over `events` (in one block) of a trace with the sort program's functions.
fn report_of(events: &[Event], format: Format, options: &ReportOptions) -> String {
    let mut out = Vec::new();
    write_report(
        format,
        options,
        |_| sort_info(),
        &sort_table(),
        &mut IterBlocks::new([events]),
        &mut out,
    )
    .unwrap_or_else(|e| panic!("{format} report failed: {e}"));
    String::from_utf8(out).unwrap()
}

#[test]
fn report_summary_matches_golden() {
    let (text, outcome) = sort_report(Format::Summary);
    assert_eq!(text, golden("sort.summary.txt"));
    assert_eq!(outcome.events, 24);
    assert_eq!(
        outcome.replay,
        ReplayStats {
            preemption_events: 0,
            unmatched_exits: 1,
            unfinished_calls: 2,
            unknown_time_calls: 0,
            unknown_function_events: 1,
            value_pieces: 0,
            threads: 2,
            first_timestamp_ns: 0,
            last_timestamp_ns: 2_500_000,
            clamped_times: 0,
            // main's 2.5 ms on one thread; odd;name's 1 µs and cmp's 2.4967 ms on the other.
            outermost_ns: 2_500_000 + 1_000 + 2_496_700,
        }
    );
}

#[test]
fn report_flame_graph_matches_golden() {
    let (text, _) = sort_report(Format::FlameGraph);
    assert_eq!(text, golden("sort.folded"));
    // The weights are self times: together they are all the time spent in traced calls.
    let total: u64 = text
        .lines()
        .map(|line| line.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, 2_500_000 + (3_200 - 2_200) + (2_500_000 - 3_300));
}

#[test]
fn report_json_matches_golden() {
    let (text, _) = sort_report(Format::Json);
    assert_eq!(text, golden("sort.json"));
    // And it is the schema scripts read.
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["functions"][1]["name"], "cmp");
    assert_eq!(value["functions"].as_array().unwrap().len(), 6);
}

/// A data file that had damaged chunks says so in the JSON and Chrome reports (and only then:
/// the golden files have no such field).
#[test]
fn reports_of_a_damaged_file_count_its_damaged_chunks() {
    let info = TraceInfo {
        damaged_chunks: 2,
        ..sort_info()
    };
    let events = sort_events();
    let run = |format| {
        let mut out = Vec::new();
        let mut source = IterBlocks::new(events.chunks(5));
        write_report(
            format,
            &ReportOptions::default(),
            |_| info.clone(),
            &sort_table(),
            &mut source,
            &mut out,
        )
        .unwrap();
        String::from_utf8(out).unwrap()
    };
    let json: serde_json::Value = serde_json::from_str(&run(Format::Json)).unwrap();
    assert_eq!(json["damaged_chunks"], 2);
    let chrome: serde_json::Value = serde_json::from_str(&run(Format::Chrome)).unwrap();
    assert_eq!(chrome["metadata"]["damaged_chunks"], 2);
    assert!(!golden("sort.json").contains("damaged"));
}

#[test]
fn report_svg_is_a_flame_graph_of_the_trace() {
    let (svg, _) = sort_report(Format::Svg);
    assert!(svg.starts_with("<?xml"), "{}", &svg[..100.min(svg.len())]);
    assert!(svg.contains("<svg"));
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("./sort -n input.txt"));
    for name in ["main", "sort", "cmp", "fib", "memcpy@plt", "odd:name"] {
        assert!(svg.contains(name), "no {name} in the SVG");
    }
    assert!(svg.contains(" ns"), "the count name is ns");
    assert!(!svg.contains("unused"));
}

#[test]
fn report_svg_escapes_the_title() {
    let lines = vec!["main 10".to_owned()];
    let mut out = Vec::new();
    svg::write_svg("./a <b> && c", "ns", &lines, &mut out).unwrap();
    let svg = String::from_utf8(out).unwrap();
    assert!(svg.contains("./a &lt;b&gt; &amp;&amp; c"));
    assert!(!svg.contains("<b>"));
}

#[test]
fn report_of_an_empty_trace() {
    let table = sort_table();
    let info = sort_info();
    let run = |format| {
        let mut source = IterBlocks::new(std::iter::empty());
        let mut out = Vec::new();
        let result = write_report(
            format,
            &ReportOptions::default(),
            |_| info.clone(),
            &table,
            &mut source,
            &mut out,
        );
        (result, String::from_utf8(out).unwrap())
    };

    // No bare header: the command says why there is no call instead.
    let (result, text) = run(Format::Summary);
    assert_eq!(result.unwrap(), ReportOutcome::default());
    assert_eq!(text, "");

    let (result, text) = run(Format::Replay);
    assert_eq!(result.unwrap().calls, 0);
    assert_eq!(text, "");

    let (result, text) = run(Format::FlameGraph);
    result.unwrap();
    assert_eq!(text, "");

    let (result, text) = run(Format::Svg);
    assert!(matches!(result, Err(ReportError::NothingToDraw)));
    assert_eq!(text, "");

    let (result, text) = run(Format::Json);
    result.unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["functions"], serde_json::json!([]));
    assert_eq!(value["pid"], 4242);
}

/// The calls counted are those the filters let through to the report.
#[test]
fn report_outcome_counts_the_calls_shown() {
    let (_, outcome) = sort_report(Format::Summary);
    assert!(outcome.calls > 0);
    let hidden = ReportOptions {
        filter: FilterSpec::parse(&["nothing".into()], &[], None, None, &[]).unwrap(),
        ..ReportOptions::default()
    };
    let (text, outcome) = sort_report_with(Format::Replay, &hidden);
    assert_eq!((outcome.calls, text.as_str()), (0, ""));
}

/// A source that fails part way, like a reader meeting a damaged chunk.
struct FailingSource {
    events: Vec<Event>,
    blocks_left: usize,
}

#[derive(Debug)]
struct DamagedChunk;

impl fmt::Display for DamagedChunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("damaged chunk")
    }
}

impl std::error::Error for DamagedChunk {}

impl EventSource for FailingSource {
    type Error = DamagedChunk;

    fn next_block(&mut self) -> Result<Option<&[Event]>, DamagedChunk> {
        if self.blocks_left == 0 {
            return Err(DamagedChunk);
        }
        self.blocks_left -= 1;
        Ok(Some(&self.events))
    }
}

#[test]
fn report_passes_on_read_errors() {
    let mut source = FailingSource {
        events: vec![Event::entry(0, 1, MAIN), Event::exit(10, 1, MAIN)],
        blocks_left: 2,
    };
    let mut out = Vec::new();
    let error = write_report(
        Format::Summary,
        &ReportOptions::default(),
        |_| sort_info(),
        &sort_table(),
        &mut source,
        &mut out,
    )
    .unwrap_err();
    assert!(matches!(error, ReportError::Read(_)));
    let source = std::error::Error::source(&error).unwrap();
    assert_eq!(source.to_string(), "damaged chunk");
    assert!(
        out.is_empty(),
        "nothing is written before the trace is read"
    );
}

#[test]
fn report_summary_counts_recursion_once_in_total() {
    // fib → fib → fib, each 10 ns of its own.
    let table = FunctionTable {
        modules: vec!["/bin/fib".to_owned()],
        functions: vec![function("fib", 0)],
        ..Default::default()
    };
    let events = [
        Event::entry(0, 1, 0),
        Event::entry(10, 1, 0),
        Event::entry(20, 1, 0),
        Event::exit(30, 1, 0),
        Event::exit(40, 1, 0),
        Event::exit(50, 1, 0),
    ];
    let mut summary = Summary::new(1);
    replay_source(
        &mut IterBlocks::new([&events[..]]),
        Replayer::new(1),
        &mut summary,
    )
    .unwrap();
    let stats = summary.stats(0).unwrap();
    assert_eq!(stats.calls, 3);
    assert_eq!(stats.total_ns, 50);
    assert_eq!(stats.self_ns, 50);
    assert_eq!(stats.min_ns, 10);
    assert_eq!(stats.max_ns, 50);
    assert_eq!(stats.avg_ns(), 16);
    let rows = summary.rows(&table, SortKey::Total);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].function.name, "fib");
}

#[test]
fn report_summary_sorts_by_total_then_name() {
    let table = FunctionTable {
        modules: vec!["/bin/x".to_owned()],
        functions: vec![
            function("b", 0),
            function("a", 0),
            function("c", 0),
            function("a", 0),
        ],
        ..Default::default()
    };
    let mut summary = Summary::new(4);
    for (function, duration_ns) in [(0, 5), (1, 5), (2, 9), (3, 5)] {
        let call = timed_call(function, duration_ns);
        summary.call_finished(&call, &[function]);
    }
    let order: Vec<FunctionId> = summary
        .rows(&table, SortKey::Total)
        .iter()
        .map(|row| row.id)
        .collect();
    assert_eq!(order, vec![2, 1, 3, 0]);
}

#[test]
fn report_flame_graph_merges_paths_that_read_the_same() {
    // Two functions called `f` (in different modules) and a `;` that becomes `:`.
    let table = FunctionTable {
        modules: vec!["/bin/x".to_owned(), "/lib/y.so".to_owned()],
        functions: vec![function("f", 0), function("f", 1), function("g;h\nx", 0)],
        ..Default::default()
    };
    let mut stacks = FoldedStacks::new(Weight::Time);
    let mut add = |stack: &[FunctionId], self_ns: u64| {
        let call = FinishedCall {
            function: *stack.last().unwrap(),
            tid: 1,
            pid: 1,
            cpu: 0,
            start_ns: 0,
            end_ns: self_ns,
            duration_ns: self_ns,
            self_ns,
            off_cpu_ns: 0,
            stopped_ns: 0,
            depth: stack.len() as u32 - 1,
            complete: true,
            time_known: true,
            recursive: false,
            slot: 0,
            recursion_ns: 0,
            values: Default::default(),
        };
        stacks.call_finished(&call, stack);
    };
    add(&[2, 0], 3);
    add(&[2, 1], 4);
    add(&[2], 0);
    add(&[2, 0], 1);
    assert_eq!(stacks.weight(&[2, 0]), 4);
    assert_eq!(stacks.lines(&table), vec!["g:h x;f 8".to_owned()]);
}

#[test]
fn report_frame_names_stay_parseable() {
    assert_eq!(frame_name("main"), "main");
    assert!(matches!(frame_name("main"), std::borrow::Cow::Borrowed(_)));
    assert_eq!(frame_name("a;b;c"), "a:b:c");
    assert_eq!(frame_name("a\r\nb"), "a  b");
    assert_eq!(
        frame_name("std::vector<int, std::allocator<int> >::push_back(int const&)"),
        "std::vector<int, std::allocator<int> >::push_back(int const&)"
    );
}

#[test]
fn report_human_durations() {
    let cases = [
        (0, "0 ns"),
        (1, "1 ns"),
        (512, "512 ns"),
        (999, "999 ns"),
        (1_000, "1.000 us"),
        (1_001, "1.001 us"),
        (12_345, "12.345 us"),
        (999_999, "999.999 us"),
        (1_000_000, "1.000 ms"),
        (1_234_567, "1.234 ms"),
        (1_234_999, "1.234 ms"),
        (999_999_999, "999.999 ms"),
        (1_000_000_000, "1.000 s"),
        (2_500_000_000, "2.500 s"),
        (3_600_000_000_000, "3600.000 s"),
        (u64::MAX, "18446744073.709 s"),
    ];
    for (ns, text) in cases {
        assert_eq!(HumanDuration(ns).to_string(), text, "{ns} ns");
    }
    assert_eq!(format!("[{:>10}]", HumanDuration(512)), "[    512 ns]");
    assert_eq!(format!("[{:<9}]", HumanDuration(1_500)), "[1.500 us ]");
}

#[test]
fn report_formats_parse_from_their_cli_names() {
    for format in Format::ALL {
        assert_eq!(format.name().parse::<Format>(), Ok(format));
        assert_eq!(format.to_string(), format.name());
    }
    assert_eq!("flame-graph".parse(), Ok(Format::FlameGraph));
    assert_eq!(
        "flamegraph".parse::<Format>(),
        Err(UnknownFormat("flamegraph".to_owned()))
    );
    assert!(UnknownFormat("x".to_owned())
        .to_string()
        .contains("summary, flame-graph, svg, json, replay, chrome"));
}

#[test]
fn report_replay_tree_matches_golden() {
    let options = ReportOptions {
        show_thread_ids: true,
        ..ReportOptions::default()
    };
    let (text, _) = sort_report_with(Format::Replay, &options);
    assert_eq!(text, golden("sort.replay.txt"));
}

#[test]
fn report_replay_tree_of_one_thread_has_no_thread_column() {
    let events = [
        Event::entry(0, 7, MAIN),
        Event::entry(10, 7, FIB),
        Event::exit(30, 7, FIB),
        Event::exit(1_500, 7, MAIN),
    ];
    assert_eq!(
        report_of(&events, Format::Replay, &ReportOptions::default()),
        "# DURATION   FUNCTION\n           | main() {\n     20 ns |   fib();\n  1.500 us | } /* main */\n"
    );
}

#[test]
fn report_chrome_matches_golden_and_balances_per_thread() {
    let (text, _) = sort_report(Format::Chrome);
    assert_eq!(text, golden("sort.chrome.json"));
    let value: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(value["displayTimeUnit"], "ns");
    assert_eq!(value["metadata"]["command"], "./sort -n input.txt");
    let mut open: std::collections::BTreeMap<u64, i64> = Default::default();
    let mut begins = 0;
    for event in value["traceEvents"].as_array().unwrap() {
        let tid = event["tid"].as_u64().unwrap();
        assert_eq!(event["pid"], 4242);
        match event["ph"].as_str().unwrap() {
            "B" => {
                begins += 1;
                *open.entry(tid).or_default() += 1;
            }
            "E" => {
                let depth = open.entry(tid).or_default();
                *depth -= 1;
                assert!(*depth >= 0, "an E without its B on thread {tid}");
            }
            "M" => continue,
            other => panic!("unexpected phase {other}"),
        }
        assert_eq!(event["cat"], "function");
        assert!(event["ts"].is_f64());
    }
    assert!(open.values().all(|&depth| depth == 0), "{open:?}");
    // One B per call the summary counts.
    assert_eq!(begins, 12);
}

#[test]
fn report_chrome_timestamps_are_microseconds_since_the_start() {
    let events = [
        Event::entry(1_012_345, 7, MAIN),
        Event::exit(2_000_001, 7, MAIN),
    ];
    let info = TraceInfo {
        start_monotonic_ns: 1_000_000,
        ..sort_info()
    };
    let mut out = Vec::new();
    write_report(
        Format::Chrome,
        &ReportOptions::default(),
        |_| info.clone(),
        &sort_table(),
        &mut IterBlocks::new([&events[..]]),
        &mut out,
    )
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains(r#""ph":"B","pid":4242,"tid":7,"ts":12.345,"#),
        "{text}"
    );
    assert!(
        text.contains(r#""ph":"E","pid":4242,"tid":7,"ts":1000.001,"#),
        "{text}"
    );
}

/// The function names of a summary's rows, in order.
fn summary_order(text: &str) -> Vec<&str> {
    text.lines()
        .skip_while(|line| !line.starts_with("  =========="))
        .skip(1)
        .take_while(|line| !line.is_empty())
        .map(|line| line.rsplit("  ").next().unwrap())
        .collect()
}

#[test]
fn report_summary_sort_orders() {
    // Worked out from the figures of sort.summary.txt; ties go by name.
    let cases = [
        (
            SortKey::Total,
            ["main", "cmp", "memcpy@plt", "sort", "fib", "odd;name"],
        ),
        (
            SortKey::SelfTime,
            ["cmp", "memcpy@plt", "main", "sort", "fib", "odd;name"],
        ),
        (
            SortKey::Calls,
            ["fib", "cmp", "memcpy@plt", "main", "odd;name", "sort"],
        ),
        (
            SortKey::Average,
            ["main", "memcpy@plt", "cmp", "sort", "odd;name", "fib"],
        ),
        (
            SortKey::Maximum,
            ["main", "cmp", "memcpy@plt", "sort", "fib", "odd;name"],
        ),
    ];
    for (sort, expected) in cases {
        let options = ReportOptions {
            sort,
            ..ReportOptions::default()
        };
        let (text, _) = sort_report_with(Format::Summary, &options);
        assert_eq!(summary_order(&text), expected, "--sort {}", sort.name());
        assert_eq!(sort.name().parse::<SortKey>(), Ok(sort));
    }
    assert!("median".parse::<SortKey>().is_err());
}

#[test]
fn report_summary_per_thread() {
    let options = ReportOptions {
        per_thread: true,
        ..ReportOptions::default()
    };
    let (text, _) = sort_report_with(Format::Summary, &options);
    // A thread's line says how many events it lost (thread 102 made no call: info shows it).
    let (first, second) = text
        .split_once("\n\nThread 101 (2 events lost)\n")
        .expect("two tables");
    // What Total % is of, once, above the tables.
    let first = first
        .strip_prefix(
            "  Total % is of 4.997 ms: every thread's outermost calls, added up (2 threads)\n\n\
             Thread 100\n",
        )
        .expect("thread 100 first");
    assert_eq!(
        summary_order(first),
        ["main", "memcpy@plt", "sort", "cmp", "fib"]
    );
    assert_eq!(summary_order(second), ["cmp", "odd;name", "memcpy@plt"]);
    // cmp on thread 100: 500 + 1200 ns; Total % is of the whole trace (both threads' 4.997 ms).
    let cmp = first.lines().find(|l| l.ends_with("  cmp")).unwrap();
    assert!(cmp.starts_with("    1.700 us     0.03%"), "{cmp}");
    assert_eq!(text.matches("note:").count(), 1);
}

#[test]
fn report_flame_graph_weighted_by_calls() {
    let options = ReportOptions {
        weight: Weight::Calls,
        ..ReportOptions::default()
    };
    let (text, _) = sort_report_with(Format::FlameGraph, &options);
    assert_eq!(
        text,
        "cmp 1\nmain 1\nmain;fib 1\nmain;fib;fib 2\nmain;fib;fib;fib 1\nmain;memcpy@plt 1\n\
         main;sort 1\nmain;sort;cmp 2\nodd:name 1\nodd:name;memcpy@plt 1\n"
    );
    let (svg, _) = sort_report_with(Format::Svg, &options);
    assert!(svg.contains(" calls"), "the count name is calls");
}

/// One thread: main 0..1000 { sort 100..600 { cmp 200..250, memcpy 300..500 { cmp 350..360 } },
/// fib 700..900 { fib 710..720 } }.
fn filter_events() -> Vec<Event> {
    vec![
        Event::entry(0, 1, MAIN),
        Event::entry(100, 1, SORT),
        Event::entry(200, 1, CMP),
        Event::exit(250, 1, CMP),
        Event::entry(300, 1, MEMCPY),
        Event::entry(350, 1, CMP),
        Event::exit(360, 1, CMP),
        Event::exit(500, 1, MEMCPY),
        Event::exit(600, 1, SORT),
        Event::entry(700, 1, FIB),
        Event::entry(710, 1, FIB),
        Event::exit(720, 1, FIB),
        Event::exit(900, 1, FIB),
        Event::exit(1_000, 1, MAIN),
    ]
}

/// (name, calls, total, self, max depth seen) per shown function, by id, under `filter`.
fn filtered(filter: FilterSpec) -> Vec<(&'static str, u64, u64, u64, u32)> {
    struct Collect(Summary, Vec<u32>);
    impl CallSink for Collect {
        fn call_finished(&mut self, call: &FinishedCall, stack: &[FunctionId]) {
            assert_eq!(stack.len(), call.depth as usize + 1);
            assert_eq!(stack.last(), Some(&call.function));
            let depth = &mut self.1[call.function as usize];
            *depth = (*depth).max(call.depth);
            self.0.call_finished(call, stack);
        }
    }
    let table = sort_table();
    let mut collect = Collect(Summary::new(7), vec![0; 7]);
    let events = filter_events();
    replay_filtered(
        &mut IterBlocks::new([&events[..]]),
        &table,
        &filter,
        None,
        &mut collect,
    )
    .unwrap();
    let names = [
        "main",
        "sort",
        "cmp",
        "fib",
        "memcpy@plt",
        "odd;name",
        "unused",
    ];
    (0..7)
        .filter_map(|id| {
            let s = collect.0.stats(id).unwrap();
            (s.calls > 0).then(|| {
                (
                    names[id as usize],
                    s.calls,
                    s.total_ns,
                    s.self_ns,
                    collect.1[id as usize],
                )
            })
        })
        .collect()
}

fn spec(
    functions: &[&str],
    no_functions: &[&str],
    depth: Option<u32>,
    time: Option<&str>,
) -> FilterSpec {
    let strings = |globs: &[&str]| globs.iter().map(|g| g.to_string()).collect::<Vec<_>>();
    FilterSpec::parse(
        &strings(functions),
        &strings(no_functions),
        depth,
        time,
        &[],
    )
    .unwrap()
}

#[test]
fn filter_hidden_time_goes_to_the_nearest_shown_caller() {
    // Unfiltered: main's own time is 1000 - 500 - 200.
    assert_eq!(
        filtered(FilterSpec::default()),
        [
            ("main", 1, 1000, 300, 0),
            ("sort", 1, 500, 250, 1),
            ("cmp", 2, 60, 60, 3),
            ("fib", 2, 200, 200, 2),
            ("memcpy@plt", 1, 200, 190, 2)
        ]
    );
    // sort hidden: its 250 ns of its own go to main, and its callees move up a level.
    assert_eq!(
        filtered(spec(&[], &["sort"], None, None)),
        [
            ("main", 1, 1000, 550, 0),
            ("cmp", 2, 60, 60, 2),
            ("fib", 2, 200, 200, 2),
            ("memcpy@plt", 1, 200, 190, 1)
        ]
    );
    // Only main and cmp: everything else is main's own time; both cmp calls sit right under it.
    assert_eq!(
        filtered(spec(&["main,c?p"], &[], None, None)),
        [("main", 1, 1000, 940, 0), ("cmp", 2, 60, 60, 1)]
    );
    // Two levels: main and its direct callees, which keep everything below as their own time.
    assert_eq!(
        filtered(spec(&[], &[], Some(2), None)),
        [
            ("main", 1, 1000, 300, 0),
            ("sort", 1, 500, 500, 1),
            ("fib", 1, 200, 200, 1)
        ]
    );
    // Calls under 100 ns hidden: the two cmp and the inner fib.
    assert_eq!(
        filtered(spec(&[], &[], None, Some("100ns"))),
        [
            ("main", 1, 1000, 300, 0),
            ("sort", 1, 500, 300, 1),
            ("fib", 1, 200, 200, 1),
            ("memcpy@plt", 1, 200, 200, 2)
        ]
    );
}

#[test]
fn filter_by_thread() {
    let filter = FilterSpec {
        tids: vec![WORKER_TID],
        ..FilterSpec::default()
    };
    let (text, _) = sort_report_with(
        Format::Summary,
        &ReportOptions {
            filter,
            ..ReportOptions::default()
        },
    );
    assert_eq!(summary_order(&text), ["cmp", "odd;name", "memcpy@plt"]);
}

#[test]
fn filter_time_defers_entries_until_they_are_long_enough() {
    let options = ReportOptions {
        filter: spec(&[], &[], None, Some("100ns")),
        ..ReportOptions::default()
    };
    assert_eq!(
        report_of(&filter_events(), Format::Replay, &options),
        "# DURATION   FUNCTION
           | main() {
           |   sort() {
    200 ns |     memcpy@plt();
    500 ns |   } /* sort */
    200 ns |   fib();
  1.000 us | } /* main */
"
    );
}

#[test]
fn report_summary_avg_self_spreads_self_times() {
    // fib twice: self 20 ns, then 40 ns (50 ns with a 10 ns child).
    let events = [
        Event::entry(0, 7, MAIN),
        Event::entry(10, 7, FIB),
        Event::exit(30, 7, FIB),
        Event::entry(40, 7, FIB),
        Event::entry(50, 7, SORT),
        Event::exit(60, 7, SORT),
        Event::exit(90, 7, FIB),
        Event::exit(100, 7, MAIN),
    ];
    let options = ReportOptions {
        avg_self: true,
        ..ReportOptions::default()
    };
    let text = report_of(&events, Format::Summary, &options);
    assert!(
        text.lines()
            .nth(1)
            .unwrap()
            .contains("Avg self    Min self    Max self"),
        "{text}"
    );
    let fib = text.lines().find(|l| l.ends_with("  fib")).unwrap();
    let columns: Vec<&str> = fib
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    // Total, Total %, Self, Calls, then the spread of self times: 30, 20, 40 ns.
    assert_eq!(&columns[3..7], ["2", "30 ns", "20 ns", "40 ns"], "{fib}");
}

/// main → sort → cmp, and cmp longjmps back into main, which calls sort again at the same slot:
/// the first sort and cmp are closed there, with unknown time.
fn longjmp_events() -> Vec<Event> {
    let at = |event: Event, slot: u32| event.at_stack(slot);
    vec![
        at(Event::entry(0, 7, MAIN), 0x1000),
        at(Event::entry(100, 7, SORT), 0x0f00),
        at(Event::entry(200, 7, CMP), 0x0e00),
        at(Event::entry(300, 7, FIB), 0x0d00),
        at(Event::exit(400, 7, FIB), 0x0d00),
        at(Event::entry(1_000, 7, SORT), 0x0f00),
        at(Event::exit(1_500, 7, SORT), 0x0f00),
        at(Event::exit(2_000, 7, MAIN), 0x1000),
    ]
}

#[test]
fn report_calls_of_unknown_time_count_but_add_no_time() {
    let mut summary = Summary::new(7);
    let replay = replay_source(
        &mut IterBlocks::new([&longjmp_events()[..]]),
        Replayer::new(7),
        &mut summary,
    )
    .unwrap();
    assert_eq!(replay.replay.unknown_time_calls, 2);
    let sort = summary.stats(SORT).unwrap();
    assert_eq!(
        (sort.calls, sort.unknown_time, sort.timed_calls()),
        (2, 1, 1)
    );
    assert_eq!(
        (sort.total_ns, sort.self_ns, sort.avg_ns()),
        (500, 500, 500)
    );
    assert_eq!((sort.min_ns, sort.max_ns), (500, 500));
    let cmp = summary.stats(CMP).unwrap();
    assert_eq!(
        (cmp.calls, cmp.unknown_time, cmp.total_ns, cmp.avg_ns()),
        (1, 1, 0, 0)
    );
    // main's own time holds what the lost calls took but fib's 100: 2000 - 500 - 100.
    assert_eq!(summary.stats(MAIN).unwrap().self_ns, 1_400);
    let text = report_of(
        &longjmp_events(),
        Format::Summary,
        &ReportOptions::default(),
    );
    assert!(
        text.contains("note: 2 calls with unknown time (returns skipped by longjmp"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&report_of(
        &longjmp_events(),
        Format::Json,
        &ReportOptions::default(),
    ))
    .unwrap();
    let sort = json["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "sort")
        .unwrap();
    assert_eq!(
        (&sort["calls"], &sort["unknown_time_calls"]),
        (&2.into(), &1.into())
    );
}

/// A function none of whose calls was timed has no times at all: `-` in the summary, not `0 ns`
/// or a bound, with how many calls are of unknown time; `null` in json. A function with some
/// calls timed says how many were not.
#[test]
fn report_rows_without_a_timed_call_show_no_times() {
    let options = corrected_within(false);
    let text = report_of(&longjmp_events(), Format::Summary, &options);
    let cmp = text.lines().find(|l| l.contains("  cmp")).unwrap();
    assert_eq!(
        cmp.split_whitespace().collect::<Vec<_>>(),
        ["-", "-", "-", "1", "-", "-", "-", "cmp", "(1", "of", "unknown", "time)"],
        "{text}"
    );
    let sort = text.lines().find(|l| l.contains("  sort")).unwrap();
    assert!(sort.ends_with("  sort (1 of unknown time)"), "{text}");
    assert!(!sort.contains(" - "), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&report_of(&longjmp_events(), Format::Json, &options)).unwrap();
    let functions = json["functions"].as_array().unwrap();
    let cmp = functions.iter().find(|f| f["name"] == "cmp").unwrap();
    for figure in [
        "total_ns", "self_ns", "avg_ns", "min_ns", "max_ns", "p50_ns",
    ] {
        assert!(cmp[figure].is_null(), "{figure}: {cmp}");
    }
    assert!(cmp.get("below_resolution").is_none(), "{cmp}");
}

/// Total % is of every thread's outermost calls added up, whatever the report shows: the same
/// share with and without `-f`, and none above 100%, also for a function run on a thread
/// shorter than another (the worker's cmp, 2.4967 ms, beside main's 2.5 ms).
#[test]
fn report_total_share_is_of_every_thread_with_or_without_a_filter() {
    let share = |options: &ReportOptions, name: &str| {
        let (text, _) = sort_report_with(Format::Summary, options);
        let row = text.lines().find(|l| l.ends_with(&format!("  {name}")));
        row.unwrap_or_else(|| panic!("{name}: {text}"))
            .split_whitespace()
            .nth(2)
            .unwrap()
            .to_owned()
    };
    let all = ReportOptions::default();
    let filtered = ReportOptions {
        filter: spec(&["cmp", "odd*"], &[], None, None),
        ..ReportOptions::default()
    };
    for name in ["cmp", "odd;name"] {
        assert_eq!(share(&all, name), share(&filtered, name), "{name}");
    }
    assert_eq!(share(&all, "main"), "50.02%");
    assert_eq!(share(&filtered, "cmp"), "49.99%");
}

#[test]
fn report_replay_marks_calls_of_unknown_time() {
    let text = report_of(&longjmp_events(), Format::Replay, &ReportOptions::default());
    assert_eq!(
        text,
        "# DURATION   FUNCTION
           | main() {
           |   sort() {
           |     cmp() {
    100 ns |       fib();
           |     } /* cmp: time unknown */
           |   } /* sort: time unknown */
    500 ns |   sort();
  2.000 us | } /* main */

# note: 2 calls with unknown time (returns skipped by longjmp, exceptions, the kernel's 64 nested return probes or lost events): counted, not timed
"
    );
    // A time filter shows a call of unknown time only when it was shown entering: sort is shown
    // as having lasted 500 ns by the time cmp is closed.
    let options = ReportOptions {
        filter: spec(&[], &[], None, Some("300ns")),
        ..ReportOptions::default()
    };
    let text = report_of(&longjmp_events(), Format::Replay, &options);
    assert!(text.contains("|   sort(); /* time unknown */\n"), "{text}");
    assert!(!text.contains("cmp"), "{text}");
}

#[test]
fn report_chrome_ends_calls_of_unknown_time_at_their_threads_latest_event() {
    let text = report_of(&longjmp_events(), Format::Chrome, &ReportOptions::default());
    let value: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let ends: Vec<(String, f64, bool)> = value["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "E")
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_owned();
            (
                name,
                e["ts"].as_f64().unwrap(),
                e["args"]["time"] == "unknown",
            )
        })
        .collect();
    assert_eq!(
        ends,
        [
            ("fib".to_owned(), 0.4, false),
            ("cmp".to_owned(), 0.4, true),
            ("sort".to_owned(), 0.4, true),
            ("sort".to_owned(), 1.5, false),
            ("main".to_owned(), 2.0, false),
        ]
    );
    assert_eq!(value["metadata"]["unknown_time_calls"], 2);
}

/// main calls cmp 100 times, one after the other, lasting 1, 2, …, 100 ns.
fn spread_events() -> Vec<Event> {
    let mut events = vec![Event::entry(0, 7, MAIN)];
    let mut now = 10;
    for ns in 1..=100 {
        events.push(Event::entry(now, 7, CMP));
        events.push(Event::exit(now + ns, 7, CMP));
        now += ns + 10;
    }
    events.push(Event::exit(now, 7, MAIN));
    events
}

/// The summary row of `function` in `text`.
fn summary_row<'a>(text: &'a str, function: &str) -> &'a str {
    text.lines()
        .find(|line| line.ends_with(&format!(" {function}")))
        .unwrap()
}

/// The columns of a summary row (split where two spaces part them).
fn row_columns(row: &str) -> Vec<&str> {
    row.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

#[test]
fn report_percentiles_of_known_durations_are_exact() {
    let options = ReportOptions {
        percentiles: true,
        ..ReportOptions::default()
    };
    let text = report_of(&spread_events(), Format::Summary, &options);
    let cmp = summary_row(&text, "cmp");
    let columns = row_columns(cmp);
    // Calls, average, minimum, maximum, then p50, p90, p99.
    assert_eq!(
        &columns[3..10],
        ["100", "50 ns", "1 ns", "100 ns", "50 ns", "90 ns", "99 ns"],
        "{text}"
    );
    assert!(text
        .lines()
        .nth(1)
        .unwrap()
        .contains("P50         P90         P99  Function"));
    let json: serde_json::Value = serde_json::from_str(&report_of(
        &spread_events(),
        Format::Json,
        &ReportOptions::default(),
    ))
    .unwrap();
    let cmp = &json["functions"][1];
    assert_eq!(cmp["name"], "cmp");
    assert_eq!(
        (&cmp["p50_ns"], &cmp["p90_ns"], &cmp["p99_ns"]),
        (&50.into(), &90.into(), &99.into())
    );
}

/// [`spread_events`]'s options with every function's probes costing 20 ns inside the call and
/// 40 in all, known to within 35 ns: cmp's durations, 1 to 100 ns raw, come out as 0 (20 calls
/// kept at that floor), then 1 to 80 ns.
fn corrected_within(percentiles: bool) -> ReportOptions {
    use crate::probe_cost::{ProbeCost, ProbeCosts};
    let cost = ProbeCost {
        inside_ns: 20,
        full_ns: 40,
        inside_spread_ns: Some(35),
    };
    ReportOptions {
        percentiles,
        probe_costs: Some(ProbeCosts {
            classes: vec![(Default::default(), cost)],
        }),
        ..ReportOptions::default()
    }
}

#[test]
fn report_shows_per_call_figures_below_the_resolution_as_a_bound() {
    let text = report_of(&spread_events(), Format::Summary, &corrected_within(true));
    let cmp = summary_row(&text, "cmp");
    let columns = row_columns(cmp);
    // Total and self time, below the 100 calls' 3.500 us, shown within the run they lie in
    // (main's 3.240 us), and so their share; calls, average (3240 / 100), minimum, maximum, then
    // p50 (the 50th of 20 zeros and 1 to 80), p90, p99.
    assert_eq!(
        &columns[..10],
        [
            "<3.240 us",
            "<100.00%",
            "<3.240 us",
            "100",
            "<35 ns",
            "<35 ns",
            "80 ns",
            "<35 ns",
            "70 ns",
            "79 ns"
        ],
        "{text}"
    );
    // Columns stay aligned: the row is as long as the header.
    assert_eq!(
        cmp.len(),
        text.lines().nth(1).unwrap().len() - "Function".len() + 3
    );
    assert!(
        text.contains("\n  note: <N is a time below N, what the probe-cost correction"),
        "{text}"
    );
    // As the columns split on spaces, the bound is one word with its unit after it.
    let words: Vec<&str> = cmp.split_whitespace().collect();
    assert_eq!(&words[6..10], ["<35", "ns", "<35", "ns"], "{cmp}");

    let json: serde_json::Value = serde_json::from_str(&report_of(
        &spread_events(),
        Format::Json,
        &corrected_within(false),
    ))
    .unwrap();
    // main is kept at its children's time, cmp's: the same total, so by name.
    let [cmp, main] = [&json["functions"][0], &json["functions"][1]];
    assert_eq!(
        (&cmp["name"], &main["name"]),
        (&"cmp".into(), &"main".into())
    );
    // The numbers stay as computed; the names of those below the resolution are listed.
    assert_eq!(
        (&cmp["min_ns"], &cmp["avg_ns"], &cmp["p50_ns"]),
        (&0.into(), &32.into(), &30.into())
    );
    assert_eq!(cmp["resolution_ns"], 35);
    assert_eq!(
        cmp["below_resolution"],
        serde_json::json!(["total_ns", "self_ns", "avg_ns", "min_ns", "p50_ns"])
    );
    // main's self time is kept at 0, below its one call's resolution; its total is not.
    assert_eq!(main["resolution_ns"], 35);
    assert_eq!(main["below_resolution"], serde_json::json!(["self_ns"]));
}

/// main calls cmp once after the other for each of `raw_ns`, its durations as measured.
fn cmp_calls(raw_ns: &[u64]) -> Vec<Event> {
    let mut events = vec![Event::entry(0, 7, MAIN)];
    let mut now = 1_000;
    for ns in raw_ns {
        events.push(Event::entry(now, 7, CMP));
        events.push(Event::exit(now + ns, 7, CMP));
        now += 1_000;
    }
    events.push(Event::exit(now, 7, MAIN));
    events
}

#[test]
fn report_shows_sums_below_their_calls_resolution_as_a_bound() {
    // [`corrected_within`] takes 20 ns out of each cmp call and resolves 35 for one.
    let options = corrected_within(false);
    // cmp's summary row, and the figures json names as below their resolution.
    let cmp_row = |raw_ns: &[u64]| {
        let text = report_of(&cmp_calls(raw_ns), Format::Summary, &options);
        let columns = row_columns(summary_row(&text, "cmp")).join(" | ");
        let json: serde_json::Value =
            serde_json::from_str(&report_of(&cmp_calls(raw_ns), Format::Json, &options)).unwrap();
        (columns, json["functions"][1]["below_resolution"].clone())
    };
    // 30 + 40 + 35 ns: as much as three calls resolve, a figure, as its average of 35 is (the
    // minimum of 30 is a bound).
    let (row, below) = cmp_row(&[50, 60, 55]);
    assert_eq!(
        row,
        "105 ns | 2.72% | 105 ns | 3 | 35 ns | <35 ns | 40 ns | cmp"
    );
    assert_eq!(below, serde_json::json!(["min_ns"]));
    // 1 ns less: below what they resolve, a bound, as the average (34) is (and the median),
    // and so is its share.
    let (row, below) = cmp_row(&[50, 60, 54]);
    assert_eq!(
        row,
        "<105 ns | <2.72% | <105 ns | 3 | <35 ns | <35 ns | 40 ns | cmp"
    );
    assert_eq!(
        below,
        serde_json::json!(["total_ns", "self_ns", "avg_ns", "min_ns", "p50_ns"])
    );
}

#[test]
fn report_replay_shows_durations_below_the_resolution_as_a_bound() {
    let events = cmp_calls(&[50, 60, 54]);
    let text = report_of(&events, Format::Replay, &corrected_within(false));
    // cmp's calls come out at 30, 40 and 34 ns; 35 are resolved; main's 3.860 us are.
    let durations: Vec<&str> = text.lines().map(|line| line[..10].trim()).collect();
    assert_eq!(
        durations,
        ["# DURATION", "", "<35 ns", "40 ns", "<35 ns", "3.860 us"],
        "{text}"
    );
    let raw = report_of(&events, Format::Replay, &ReportOptions::default());
    assert!(!raw.contains('<'), "{raw}");
}

#[test]
fn report_diff_shows_sums_below_their_calls_resolution_as_a_bound() {
    use crate::probe_cost::{ProbeCost, ProbeCosts, Resolutions};
    let table = sort_table();
    // Each call resolved to 35 ns: cmp's two calls of 30 ns are below their 70, fib's are not;
    // cmp's bound is what its calls measured, 60 ns, which is less.
    let costs = ProbeCosts {
        classes: vec![(
            Default::default(),
            ProbeCost {
                inside_ns: 20,
                full_ns: 40,
                inside_spread_ns: Some(35),
            },
        )],
    };
    let resolutions = Resolutions::new(&table, Some(&costs));
    let mut summary = Summary::new(table.functions.len());
    for call in [
        timed_call(CMP, 30),
        timed_call(CMP, 30),
        timed_call(FIB, 40),
    ] {
        summary.call_finished(&call, &[]);
    }
    let side = |resolutions| diff::DiffSide {
        file: "utrace.data",
        command: "./sort",
        table: &table,
        summary: &summary,
        resolutions,
    };
    let words = |resolutions| {
        let mut out = Vec::new();
        diff::write_text(&side(resolutions), &side(resolutions), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let row = |name: &str| {
            let line = text.lines().find(|l| l.ends_with(&format!("  {name}")));
            line.unwrap()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        [row("cmp"), row("fib")]
    };
    // Calls (base, new, change), totals and their change (and %), self times and theirs.
    assert_eq!(
        words(&resolutions),
        [
            "2 2 0 <60 ns <60 ns 0 ns 0.0% <60 ns <60 ns 0 ns 0.0% cmp",
            "1 1 0 40 ns 40 ns 0 ns 0.0% 40 ns 40 ns 0 ns 0.0% fib",
        ]
    );
    let raw = words(&Resolutions::default());
    assert_eq!(
        raw[0],
        "2 2 0 60 ns 60 ns 0 ns 0.0% 60 ns 60 ns 0 ns 0.0% cmp"
    );
}

#[test]
fn report_histogram_shows_an_average_below_the_resolution_as_a_bound() {
    let options = corrected_within(false);
    let averages = |raw_ns: &[u64]| {
        let text = report_of(&cmp_calls(raw_ns), Format::Histogram, &options);
        let cmp = text.split("Function = cmp").nth(1).unwrap().to_owned();
        cmp.lines()
            .find(|l| l.starts_with("avg = "))
            .unwrap()
            .to_owned()
    };
    // cmp's calls, corrected, last 30, 40 and 35 ns, each resolved to 35: as much as they
    // resolve; 1 ns less, below.
    assert_eq!(
        averages(&[50, 60, 55]),
        "avg = 35 nsecs, total: 105 nsecs, count: 3"
    );
    assert_eq!(
        averages(&[50, 60, 54]),
        "avg = <35 nsecs, total: <105 nsecs, count: 3"
    );
    let raw = report_of(
        &cmp_calls(&[50]),
        Format::Histogram,
        &ReportOptions::default(),
    );
    assert!(
        raw.contains("avg = 50 nsecs, total: 50 nsecs, count: 1"),
        "{raw}"
    );
}

#[test]
fn sums_resolve_what_their_timed_calls_do() {
    let stats = FunctionStats {
        calls: 3,
        unknown_time: 1,
        ..FunctionStats::default()
    };
    // A call of unknown time adds nothing to the sums, nor to what they resolve.
    assert_eq!(stats.sum_resolution_ns(35), 70);
    assert_eq!(FunctionStats::default().sum_resolution_ns(35), 0);
    let huge = FunctionStats {
        calls: u64::MAX,
        ..FunctionStats::default()
    };
    assert_eq!(huge.sum_resolution_ns(35), u64::MAX);
}

#[test]
fn report_under_raw_times_shows_no_bounds() {
    let options = ReportOptions {
        percentiles: true,
        ..ReportOptions::default()
    };
    let text = report_of(&spread_events(), Format::Summary, &options);
    assert!(!text.contains('<') && !text.contains("note:"), "{text}");
    let json = report_of(&spread_events(), Format::Json, &ReportOptions::default());
    assert!(!json.contains("resolution"), "{json}");
}

#[test]
fn corrected_durations_show_a_bound_below_their_resolution() {
    let shown = |ns, resolution_ns| CorrectedDuration::new(ns, resolution_ns).to_string();
    assert_eq!(shown(0, 90), "<90 ns");
    assert_eq!(shown(89, 90), "<90 ns");
    assert_eq!(shown(90, 90), "90 ns");
    assert_eq!(shown(700, 1_234), "<1.234 us");
    // From 100 of a unit, a bound is in whole ones, rounded up: no wider than a figure.
    assert_eq!(shown(11_041, 99_999), "<99.999 us");
    assert_eq!(shown(11_041, 349_100), "<350 us");
    assert_eq!(shown(0, 999_999_999), "<1000 ms");
    assert_eq!(shown(0, 3_600_000_000_001), "<3601 s");
    // Raw times, kernel events: nothing was taken out, every figure is a measurement.
    assert_eq!(shown(0, 0), "0 ns");
    let padded = format!("[{:>10}]", CorrectedDuration::new(3, 90));
    assert_eq!(padded, "[    <90 ns]");
    // What was measured around it holds the bound too: never above it.
    assert_eq!(
        CorrectedDuration::new(3, 90).within(40).to_string(),
        "<40 ns"
    );
    assert_eq!(
        CorrectedDuration::new(300, 90).within(400).to_string(),
        "300 ns"
    );
}

#[test]
fn report_percentiles_stay_within_one_percent_and_below_the_maximum() {
    let mut spread = distribution::Distributions::new(None);
    let call = |duration_ns| timed_call(CMP, duration_ns);
    for i in 1..=1000u64 {
        spread.call_finished(&call(i * 1_000_003), &[CMP]);
    }
    let p = spread.percentiles(0, CMP);
    for (value, exact) in [(p.p50_ns, 500), (p.p90_ns, 900), (p.p99_ns, 990)] {
        let exact = exact * 1_000_003u64;
        assert!(value.abs_diff(exact) * 100 <= exact, "{value} for {exact}");
    }
    spread.call_finished(&call(7), &[CMP]);
    assert!(spread.percentiles(0, CMP).p99_ns <= 1_000 * 1_000_003);
    assert_eq!(spread.percentiles(0, MAIN), Default::default());
}

#[test]
fn report_histogram_buckets_are_log2_as_funclatency_prints_them() {
    let options = ReportOptions {
        filter: spec(&["cmp"], &[], None, None),
        ..ReportOptions::default()
    };
    let text = report_of(&spread_events(), Format::Histogram, &options);
    // 1..=100 ns: 1 in 0-1, 2 in 2-3, 4 in 4-7, … 32 in 32-63, and 37 in 64-127.
    let expected = "\
Function = cmp
     nsecs               : count     distribution
         0 -> 1          : 1        |*                                       |
         2 -> 3          : 2        |**                                      |
         4 -> 7          : 4        |****                                    |
         8 -> 15         : 8        |********                                |
        16 -> 31         : 16       |*****************                       |
        32 -> 63         : 32       |**********************************      |
        64 -> 127        : 37       |****************************************|

avg = 50 nsecs, total: 5050 nsecs, count: 100
";
    assert_eq!(text, expected);
}

#[test]
fn report_histogram_counts_calls_of_unknown_time_apart() {
    let options = ReportOptions {
        filter: spec(&["sort"], &[], None, None),
        ..ReportOptions::default()
    };
    let text = report_of(&longjmp_events(), Format::Histogram, &options);
    assert!(text.contains("   256 -> 511        : 1 "), "{text}");
    assert!(
        text.ends_with("avg = 500 nsecs, total: 500 nsecs, count: 1 (and 1 of unknown time)\n"),
        "{text}"
    );
}

/// A complete outermost call of `function` on thread 1 that lasted `duration_ns`, all of it its
/// own.
fn timed_call(function: FunctionId, duration_ns: u64) -> FinishedCall {
    FinishedCall {
        function,
        tid: 1,
        pid: 1,
        cpu: 0,
        start_ns: 0,
        end_ns: duration_ns,
        duration_ns,
        self_ns: duration_ns,
        off_cpu_ns: 0,
        stopped_ns: 0,
        depth: 0,
        complete: true,
        time_known: true,
        recursive: false,
        slot: 0,
        recursion_ns: 0,
        values: Default::default(),
    }
}

/// Two processes: in 10, main → sort → cmp twice and main → cmp once; in 20, main → cmp once.
fn two_process_events() -> Vec<Event> {
    let p = |event: Event, pid: u32| event.in_process(pid);
    vec![
        p(Event::entry(0, 10, MAIN), 10),
        p(Event::entry(10, 10, SORT), 10),
        p(Event::entry(20, 10, CMP), 10),
        p(Event::exit(30, 10, CMP), 10), // 10
        p(Event::entry(40, 10, CMP), 10),
        p(Event::exit(60, 10, CMP), 10), // 20
        p(Event::exit(70, 10, SORT), 10),
        p(Event::entry(80, 10, CMP), 10),
        p(Event::exit(85, 10, CMP), 10), // 5
        p(Event::exit(100, 10, MAIN), 10),
        p(Event::entry(200, 20, MAIN), 20),
        p(Event::entry(210, 20, CMP), 20),
        p(Event::exit(250, 20, CMP), 20), // 40
        p(Event::exit(300, 20, MAIN), 20),
    ]
}

fn only(globs: &[&str]) -> ReportOptions {
    ReportOptions {
        filter: spec(globs, &[], None, None),
        ..ReportOptions::default()
    }
}

#[test]
fn report_stacks_count_paths_per_process_most_frequent_first() {
    let text = report_of(&two_process_events(), Format::Stacks, &only(&["cmp"]));
    let expected = "\
cmp [pid 10]: 3 calls, 2 paths
       Calls  Total time  Path
           2       30 ns  main → sort → cmp
           1        5 ns  main → cmp

cmp [pid 20]: 1 call, 1 path
       Calls  Total time  Path
           1       40 ns  main → cmp
";
    assert_eq!(text, expected);
    let folded = report_of(
        &two_process_events(),
        Format::Stacks,
        &ReportOptions {
            folded: true,
            ..only(&["cmp"])
        },
    );
    assert_eq!(
        folded,
        "sort [pid 10];main;cmp 1\nsort [pid 10];main;sort;cmp 2\nsort [pid 20];main;cmp 1\n"
    );
}

#[test]
fn report_stacks_count_calls_of_unknown_time_without_time() {
    let text = report_of(&longjmp_events(), Format::Stacks, &only(&["sort"]));
    // The sort the longjmp skipped and the one timed after it share a path.
    assert!(
        text.ends_with("           2      500 ns  main → sort  (1 of unknown time)\n"),
        "{text}"
    );
}

#[test]
fn report_stacks_without_a_glob_on_a_large_table_ask_for_one() {
    let mut table = sort_table();
    for i in table.functions.len()..=stacks::MAX_FUNCTIONS_WITHOUT_GLOB {
        table.functions.push(function(&format!("f{i}"), 0));
    }
    for format in [Format::Stacks, Format::Graph] {
        let error = write_report(
            format,
            &ReportOptions::default(),
            |_| sort_info(),
            &table,
            &mut IterBlocks::new([&sort_events()[..]]),
            &mut Vec::new(),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "--format={format} shows one table per function, and this trace has 65 \
                 functions: choose some with -f GLOB"
            )
        );
    }
}

#[test]
fn report_graph_merges_each_functions_callees() {
    let text = report_of(&two_process_events(), Format::Graph, &only(&["main"]));
    let expected = "\
# Function call graph for 'main' (pid 10)
# TOTAL TIME   FUNCTION
      100 ns : (1) main
       60 ns :  +-(1) sort
       30 ns :  |  +-(2) cmp
        5 ns :  +-(1) cmp

# Function call graph for 'main' (pid 20)
# TOTAL TIME   FUNCTION
      100 ns : (1) main
       40 ns :  +-(1) cmp
";
    assert_eq!(text, expected);
}

#[test]
fn report_dot_has_a_cluster_per_process_and_counts_each_edge() {
    let text = report_of(
        &two_process_events(),
        Format::Dot,
        &ReportOptions::default(),
    );
    assert!(
        text.starts_with("digraph \"utrace: ./sort -n input.txt\" {\n"),
        "{text}"
    );
    assert!(
        text.contains("  subgraph cluster_10 {\n") && text.contains("  subgraph cluster_20 {\n")
    );
    for edge in [
        "  p10_f0 -> p10_f1 [label=\"1\"",
        "  p10_f1 -> p10_f2 [label=\"2\"",
        "  p10_f0 -> p10_f2 [label=\"1\"",
        "  p20_f0 -> p20_f2 [label=\"1\"",
    ] {
        assert!(text.contains(edge), "{edge} in {text}");
    }
    assert_eq!(text.matches(" -> ").count(), 4, "{text}");
    // main of pid 20 and of pid 10 both last 100 ns, the most: the hottest red.
    assert!(
        text.contains("    p20_f0 [label=\"main\\ncalls 1\\ntotal 100 ns\\nself 60 ns\", fillcolor=\"0.000 0.550 1.000\"];"),
        "{text}"
    );
}

#[test]
fn report_stacks_and_graph_count_only_the_calls_they_show() {
    for format in [Format::Stacks, Format::Graph] {
        let (text, outcome) = sort_report_with(format, &only(&["no_such_function"]));
        assert_eq!((text.as_str(), outcome.calls), ("", 0), "{format}");
        let (_, outcome) = sort_report_with(format, &only(&["fib"]));
        // fib: 4 calls, 3 of them inside the outermost one (the graph merges them there).
        let expected = if format == Format::Stacks { 4 } else { 1 };
        assert_eq!(outcome.calls, expected, "{format}");
    }
}

/// A trace of `main` calling `tiny` twenty times on thread 7, one of them preempted for 1 ms
/// (`linux:schedule` under it, as `-E offcpu` records it), and the table it is of.
fn preempted_events() -> (FunctionTable, Vec<Event>) {
    let mut table = FunctionTable::of_names(&["main", "tiny", "linux:schedule"]);
    table.functions[2].kind = FunctionKind::Kernel;
    let mut events = vec![Event::entry(0, 7, 0)];
    for i in 0..20u64 {
        let start = 10_000 + i * 10_000;
        events.push(Event::entry(start, 7, 1));
        if i == 4 {
            events.push(Event::entry(start + 200, 7, 2));
            events.push(Event::exit(start + 1_000_200, 7, 2));
            events.push(Event::exit(start + 1_000_500, 7, 1));
        } else {
            events.push(Event::exit(start + 500, 7, 1));
        }
    }
    events.push(Event::exit(3_000_000, 7, 0));
    (table, events)
}

/// The report of `events` of `table` in `format`.
fn report_of_table(
    table: &FunctionTable,
    events: &[Event],
    format: Format,
    options: &ReportOptions,
) -> String {
    let mut out = Vec::new();
    write_report(
        format,
        options,
        |_| sort_info(),
        table,
        &mut IterBlocks::new([events]),
        &mut out,
    )
    .unwrap_or_else(|e| panic!("{format} report failed: {e}"));
    String::from_utf8(out).unwrap()
}

/// Probe costs of nothing, known exactly: the times as measured, corrected.
fn costs_of_nothing() -> ReportOptions {
    use crate::probe_cost::{ProbeCost, ProbeCosts};
    let cost = ProbeCost {
        inside_ns: 0,
        full_ns: 0,
        inside_spread_ns: Some(1),
    };
    ReportOptions {
        probe_costs: Some(ProbeCosts {
            classes: vec![(Default::default(), cost)],
        }),
        ..ReportOptions::default()
    }
}

/// Time off the CPU (`-E offcpu`) is taken out of the calls it fell in, and shown in its own
/// column: tiny's preempted call counts its 500 ns, not 1 ms; `linux:schedule` keeps its row, with
/// no share of the program. `--raw-times` shows the times as measured, with no column.
#[test]
fn report_takes_time_off_the_cpu_out_of_the_calls_it_fell_in() {
    let (table, events) = preempted_events();
    let text = report_of_table(&table, &events, Format::Summary, &costs_of_nothing());
    let words = |name: &str| {
        let row = text.lines().find(|l| l.ends_with(&format!("  {name}")));
        let row = row.unwrap_or_else(|| panic!("{name}: {text}"));
        row.split_whitespace().collect::<Vec<_>>()
    };
    assert!(text.contains("Maximum     Off-CPU  Function"), "{text}");
    // Total, Total %, Self, Calls, Average, Minimum, Maximum, Off-CPU.
    assert_eq!(
        words("tiny"),
        [
            "10.000", "us", "0.50%", "10.000", "us", "20", "500", "ns", "500", "ns", "500", "ns",
            "1.000", "ms", "tiny"
        ],
        "{text}"
    );
    // main's 3 ms less the 1 ms off the CPU.
    assert_eq!(words("main")[..3], ["2.000", "ms", "100.00%"], "{text}");
    assert_eq!(words("linux:schedule [k]")[2], "-", "{text}");
    assert_eq!(words("linux:schedule [k]")[12], "-", "{text}");
    let json: serde_json::Value = serde_json::from_str(&report_of_table(
        &table,
        &events,
        Format::Json,
        &costs_of_nothing(),
    ))
    .unwrap();
    let tiny = &json["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "tiny")
        .unwrap();
    assert_eq!(
        (&tiny["total_ns"], &tiny["off_cpu_ns"]),
        (&10_000.into(), &1_000_000.into())
    );

    let raw = report_of_table(&table, &events, Format::Summary, &ReportOptions::default());
    assert!(!raw.contains("Off-CPU"), "{raw}");
    // As measured, the preempted call is tiny's; the time off the CPU is known: no mark.
    let tiny = raw.lines().find(|l| l.ends_with("  tiny")).unwrap();
    assert!(tiny.trim_start().starts_with("1.010 ms"), "{raw}");
}

/// Where the time off the CPU is not known, a function whose average a few long calls carry
/// is marked: tiny's twenty calls of 500 ns, one of them 1 ms, average 50 µs.
#[test]
fn report_marks_functions_a_few_long_calls_carry() {
    let (mut table, events) = preempted_events();
    // Recorded without -E offcpu: the interval is unknown, tiny's call lasted 1 ms.
    let events: Vec<Event> = events
        .into_iter()
        .filter(|e| e.function_id() != 2)
        .collect();
    table.functions.pop();
    let text = report_of_table(&table, &events, Format::Summary, &costs_of_nothing());
    assert!(text.contains("  ~ tiny\n"), "{text}");
    assert!(text.lines().any(|l| l.ends_with("  main")), "{text}");
    assert!(
        text.contains(
            "note: ~ marks 1 function whose longest call is at least 10 times its average"
        ),
        "{text}"
    );
    // With the time off the CPU taken out, nothing is marked.
    let (table, events) = preempted_events();
    let text = report_of_table(&table, &events, Format::Summary, &costs_of_nothing());
    assert!(!text.contains('~'), "{text}");
}

/// By default the time preempted (`linux:preempted`) is no call: taken out of the calls it fell
/// in, in a `Preempted` column (json `preempted_ns`), with no row of its own and no line in the
/// replay; `--raw-times` leaves it in, with no column and no mark.
#[test]
fn report_takes_the_time_preempted_out_without_showing_it_as_a_call() {
    let (mut table, events) = preempted_events();
    table.functions[2].name = crate::table::PREEMPTION_FUNCTION.to_owned();
    table.functions[2].kind = FunctionKind::Preemption;
    let text = report_of_table(&table, &events, Format::Summary, &costs_of_nothing());
    assert!(text.contains("Maximum   Preempted  Function"), "{text}");
    let tiny = text.lines().find(|l| l.ends_with("  tiny")).unwrap();
    let words: Vec<&str> = tiny.split_whitespace().collect();
    // Total, Total %, Self, Calls, Average, Minimum, Maximum, Preempted.
    assert_eq!(
        words,
        [
            "10.000", "us", "0.50%", "10.000", "us", "20", "500", "ns", "500", "ns", "500", "ns",
            "1.000", "ms", "tiny"
        ],
        "{text}"
    );
    assert!(!text.contains("linux:"), "{text}");
    let json = report_of_table(&table, &events, Format::Json, &costs_of_nothing());
    assert!(json.contains(r#""preempted_ns": 1000000,"#), "{json}");
    assert!(
        !json.contains("off_cpu_ns") && !json.contains("linux:"),
        "{json}"
    );
    let replay = report_of_table(&table, &events, Format::Replay, &costs_of_nothing());
    assert!(!replay.contains("linux:"), "{replay}");

    let raw = report_of_table(&table, &events, Format::Summary, &ReportOptions::default());
    assert!(!raw.contains("Preempted") && !raw.contains('~'), "{raw}");
    let tiny = raw.lines().find(|l| l.ends_with("  tiny")).unwrap();
    assert!(tiny.trim_start().starts_with("1.010 ms"), "{raw}");
    assert!(!raw.contains("linux:"), "{raw}");
}
