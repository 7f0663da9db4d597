#!/usr/bin/env bash
# Installs what is missing, builds utrace, and traces the bundled sample program: a recording,
# then a summary report and a flame graph (stacks.folded and flame.svg in target/demo/).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cargo build --release --quiet
mkdir -p target/demo
cc -O2 -g -fno-optimize-sibling-calls -o target/demo/sort test/sort.c
utrace=target/release/utrace
$utrace record -o target/demo/utrace.data -c "target/demo/sort 5000"
$utrace report -i target/demo/utrace.data --format=summary
$utrace report -i target/demo/utrace.data --format=flame-graph -o target/demo/stacks.folded
$utrace report -i target/demo/utrace.data --format=svg -o target/demo/flame.svg
echo "flame graph: target/demo/flame.svg (folded stacks: target/demo/stacks.folded)"
