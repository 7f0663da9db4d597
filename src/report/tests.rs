//! Golden tests: a hand-written trace in, the exact expected reports out. The expected outputs
//! sit in `tests/data/report/`; they were worked out by hand from the events below (the
//! comments give the durations), not produced by the code under test.

use std::fmt;

use super::flame_graph::{frame_name, FoldedStacks};
use super::summary::{HumanDuration, Summary};
use super::*;
use crate::plan::{FunctionId, FunctionKind, TracedFunction};
use crate::replay::FinishedCall;

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
    }
}

fn sort_info() -> TraceInfo {
    TraceInfo {
        command: "./sort -n input.txt".to_owned(),
        pid: 4242,
        duration_ns: 2_600_000,
        events: 27,
        lost_events: 3,
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
    let events = sort_events();
    let mut source = IterBlocks::new(events.chunks(5));
    let mut out = Vec::new();
    let outcome = write_report(
        format,
        |_| sort_info(),
        &sort_table(),
        &mut source,
        &mut out,
    )
    .unwrap_or_else(|e| panic!("{format} report failed: {e}"));
    (String::from_utf8(out).unwrap(), outcome)
}

#[test]
fn report_summary_matches_golden() {
    let (text, outcome) = sort_report(Format::Summary);
    assert_eq!(text, golden("sort.summary.txt"));
    assert_eq!(outcome.events, 24);
    assert_eq!(
        outcome.replay,
        ReplayStats {
            unmatched_exits: 1,
            unfinished_calls: 2,
            unknown_function_events: 1,
            threads: 2,
            last_timestamp_ns: 2_500_000,
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
    svg::write_svg("./a <b> && c", &lines, &mut out).unwrap();
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
        let result = write_report(format, |_| info.clone(), &table, &mut source, &mut out);
        (result, String::from_utf8(out).unwrap())
    };

    let (result, text) = run(Format::Summary);
    assert_eq!(result.unwrap(), ReportOutcome::default());
    assert_eq!(text.lines().count(), 2, "only the header: {text}");

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
    replay_source(&mut IterBlocks::new([&events[..]]), 1, &mut summary).unwrap();
    let stats = summary.stats(0).unwrap();
    assert_eq!(stats.calls, 3);
    assert_eq!(stats.total_ns, 50);
    assert_eq!(stats.self_ns, 50);
    assert_eq!(stats.min_ns, 10);
    assert_eq!(stats.max_ns, 50);
    assert_eq!(stats.avg_ns(), 16);
    let rows = summary.rows(&table);
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
    };
    let mut summary = Summary::new(4);
    for (function, duration_ns) in [(0, 5), (1, 5), (2, 9), (3, 5)] {
        let call = FinishedCall {
            function,
            tid: 1,
            start_ns: 0,
            duration_ns,
            self_ns: duration_ns,
            depth: 0,
            complete: true,
            recursive: false,
        };
        summary.call_finished(&call, &[function]);
    }
    let order: Vec<FunctionId> = summary.rows(&table).iter().map(|row| row.id).collect();
    assert_eq!(order, vec![2, 1, 3, 0]);
}

#[test]
fn report_flame_graph_merges_paths_that_read_the_same() {
    // Two functions called `f` (in different modules) and a `;` that becomes `:`.
    let table = FunctionTable {
        modules: vec!["/bin/x".to_owned(), "/lib/y.so".to_owned()],
        functions: vec![function("f", 0), function("f", 1), function("g;h\nx", 0)],
    };
    let mut stacks = FoldedStacks::new();
    let mut add = |stack: &[FunctionId], self_ns: u64| {
        let call = FinishedCall {
            function: *stack.last().unwrap(),
            tid: 1,
            start_ns: 0,
            duration_ns: self_ns,
            self_ns,
            depth: stack.len() as u32 - 1,
            complete: true,
            recursive: false,
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
        .contains("summary, flame-graph, svg, json"));
}
