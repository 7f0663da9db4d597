//! `svg`: a flame graph drawn by inferno from the folded stacks of [`super::flame_graph`]. The
//! title is the recorded command line (inferno's default title when it is empty); widths are what
//! the stacks were weighted by (self time in ns, or calls).

use std::io::Write;

use inferno::flamegraph::{self, Options};

use super::ReportError;

/// Draws `folded_lines` (as [`super::flame_graph::FoldedStacks::lines`] makes them) as an SVG.
/// An empty trace is [`ReportError::NothingToDraw`] rather than inferno's error picture.
pub fn write_svg(
    title: &str,
    unit: &str,
    folded_lines: &[String],
    out: &mut dyn Write,
) -> Result<(), ReportError> {
    if folded_lines.is_empty() {
        return Err(ReportError::NothingToDraw);
    }
    let mut options = Options::default();
    if !title.is_empty() {
        options.title = title.to_owned();
    }
    options.count_name = unit.to_owned();
    flamegraph::from_lines(&mut options, folded_lines.iter().map(String::as_str), out)?;
    Ok(())
}
