//! Property tests of the reports over hostile recordings (built by `data/fuzz.rs`): arbitrary
//! bytes, mutations of a valid recording, and well-formed files full of arbitrary events. No
//! report may panic.

use std::io::Cursor;
use std::path::Path;

use proptest::prelude::*;

use super::{write_report, Format, ReportOptions, TraceInfo};
use crate::data::fuzz::{event, mutate, mutation, recording, valid_recording};
use crate::data::{format, DataReader};
use crate::fuzz_cases::config;

/// Makes every report but the SVG (inferno's own input checks are not ours to fuzz) from `bytes`,
/// into memory.
fn report_all(bytes: &[u8]) {
    let formats = [
        Format::Summary,
        Format::FlameGraph,
        Format::Json,
        Format::Replay,
        Format::Chrome,
    ];
    for format in formats {
        let Ok(mut reader) = DataReader::from_reader(Path::new("fuzz.data"), Cursor::new(bytes))
        else {
            return;
        };
        let table = reader.functions().clone();
        let mut out = Vec::new();
        let info = |reader: &DataReader<Cursor<&[u8]>>| TraceInfo {
            command: reader.metadata().command_line(),
            ..TraceInfo::default()
        };
        let options = ReportOptions::default();
        let _ = write_report(format, &options, info, &table, &mut reader, &mut out);
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        report_all(&bytes);
    }

    #[test]
    fn arbitrary_bytes_after_a_valid_header_never_panic(
        tail in prop::collection::vec(any::<u8>(), 0..2048),
    ) {
        let mut bytes = format::file_header().to_vec();
        bytes.extend(tail);
        report_all(&bytes);
    }

    #[test]
    fn mutated_recordings_never_panic(mutation in mutation()) {
        report_all(&mutate(&valid_recording().0, &mutation));
    }

    /// Exits without entries, unknown functions, time going backwards, a missing end.
    #[test]
    fn arbitrary_events_go_through_every_report(
        blocks in prop::collection::vec(prop::collection::vec(event(), 0..64), 0..4),
        functions in 0..5usize,
        statistics in any::<bool>(),
    ) {
        report_all(&recording(functions, &blocks, statistics));
    }
}
