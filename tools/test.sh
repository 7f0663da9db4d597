#!/usr/bin/env bash
# Installs what is missing, then runs the whole test suite. The end-to-end tests trace real
# processes with BPF and need root; set UTRACE_REQUIRE_BPF=1 to make a skipped BPF test fail.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cargo test --release "$@"
