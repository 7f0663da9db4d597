#!/usr/bin/env bash
# tools/probe_residue.sh: what the probe-cost correction leaves in a caller's time, per traced
# call below it, measured against the program's own untraced timing (README, "Precision").
#
#   sudo tools/probe_residue.sh [RUNS]     (RUNS recordings of each kind, 5)
#
# test/spin.c run as `spin 20 500 0 1000`: `work` makes 500 back-to-back calls of `tiny` (a few
# instructions), and the program times an untraced copy of `work` (its best of 20 rounds). Per
# recording: the calibration's figures for tiny's class, then (corrected work − untraced work)
# / 500 at work's median and at its mean; recorded again with `-E offcpu`, the mean once the time
# work spent off the CPU (the `linux:schedule` calls under it) is taken out too. One line per
# recording on standard output.
set -euo pipefail

runs=${1:-5}
cd "$(dirname "$0")/.."
utrace=target/release/utrace
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo build --release --quiet --bin utrace
# As tests/common/mod.rs compiles the programs of test/.
cc -O2 -g -fno-optimize-sibling-calls -pthread -o "$work/spin" test/spin.c

# residue FILE UNTRACED_NS: the line of one recording.
residue() {
	"$utrace" report -i "$1" --format=json | python3 -c '
import json, sys
untraced = int(sys.argv[1])
functions = {f["name"]: f for f in json.load(sys.stdin)["functions"]}
work = functions["work"]
off = functions.get("linux:schedule", {"total_ns": 0})["total_ns"]
per_call = lambda ns: (ns - untraced) / 500
line = "untraced work %d ns; per call of tiny: median %.0f ns, mean %.0f ns" % (
    untraced, per_call(work["p50_ns"]), per_call(work["avg_ns"]))
if "linux:schedule" in functions:
    on_cpu = (work["total_ns"] - off) / work["calls"]
    line += ", %.1f ms off the CPU, mean on the CPU %.0f ns" % (off / 1e6, per_call(on_cpu))
print(line)' "$2"
}

for _ in $(seq "$runs"); do
	for events in "" offcpu; do
		flags=(--no-function 'untraced_*' --no-function 'clock_gettime*')
		[[ -n $events ]] && flags+=(-E "$events")
		"$utrace" record -o "$work/spin.data" "${flags[@]}" -- "$work/spin" 20 500 0 1000 \
			>/dev/null 2>"$work/stderr"
		untraced=$(awk '/untraced work/ { print $4 }' "$work/stderr")
		class=$("$utrace" info -i "$work/spin.data" | grep 'emulated entry, uretprobe' | sed 's/^ *//')
		printf '%-7s %s | %s\n' "${events:-plain}" "$(residue "$work/spin.data" "$untraced")" "$class"
	done
done
