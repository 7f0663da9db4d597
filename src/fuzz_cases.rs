//! How many cases each property test of the parsers runs (`src/data/fuzz.rs`,
//! `src/elf/fuzz.rs`): one figure for CI, which `PROPTEST_CASES` overrides for a longer hunt.

use proptest::test_runner::Config;

/// Cases per property unless `PROPTEST_CASES` says otherwise.
const CASES: u32 = 20_000;

pub fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(CASES);
    Config::with_cases(cases)
}
