#!/usr/bin/env bash
# The benchmark's real programs (run by tools/bench.sh, or alone as root): the SQLite
# amalgamation under utrace and under `uftrace record -P .` (same binary; counts compared),
# CPython's libpython under `--nest-lib 'libpython*'`, and a Go HTTP server traced in full. Loops
# tell what a probe costs; these tell what a user pays on code made of many small calls, and how
# many hits single-step.
#
# Usage: tools/bench/real_programs.sh UTRACE WORKDIR
# Needs: cc, go (golang-go), python3 and Debian's python3-dev (tools/setup.sh installs them),
# cargo (fetches the amalgamation once, with the libsqlite3-sys crate), uftrace for the
# comparison (skipped, and said, without it).
set -euo pipefail
utrace=$1
work=$2
cd "$(dirname "$0")/../.."

say() { printf '%s\n' "$*"; }
# Wall-clock seconds of a command, its output discarded.
seconds() {
	local start end
	start=$(date +%s.%N)
	"$@" >/dev/null 2>&1
	end=$(date +%s.%N)
	awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }'
}
# From a json report: calls, and the share of calls whose entry site is single-stepped.
calls_and_single_stepped() {
	"$utrace" report -i "$1" --format=json | python3 -c '
import json, sys
functions = json.load(sys.stdin)["functions"]
calls = sum(f["calls"] for f in functions)
single = sum(f["calls"] for f in functions if f["entry_site"] == "single-stepped")
print(calls, f"{100 * single / max(calls, 1):.1f}%")'
}

# SQLite: the amalgamation libsqlite3-sys bundles, fetched by cargo once.
amalgamation=$(find ~/.cargo/registry/src -path '*libsqlite3-sys-0.30.1/sqlite3/sqlite3.c' 2>/dev/null | head -1)
if [[ -z $amalgamation ]]; then
	mkdir -p "$work/sqlite-fetch/src"
	printf '[package]\nname = "sqlite-fetch"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\nlibsqlite3-sys = { version = "=0.30.1", features = ["bundled"] }\n' \
		>"$work/sqlite-fetch/Cargo.toml"
	echo 'fn main() {}' >"$work/sqlite-fetch/src/main.rs"
	cargo fetch --quiet --manifest-path "$work/sqlite-fetch/Cargo.toml"
	amalgamation=$(find ~/.cargo/registry/src -path '*libsqlite3-sys-0.30.1/sqlite3/sqlite3.c' | head -1)
fi
sqlite=$work/sqlite_driver
if [[ ! -x $sqlite || tools/bench/sqlite_driver.c -nt $sqlite ]]; then
	say "  compiling the SQLite amalgamation (a minute or two)"
	cc -O2 -g -fpatchable-function-entry=5 -DSQLITE_THREADSAFE=0 -DSQLITE_OMIT_LOAD_EXTENSION \
		-I"$(dirname "$amalgamation")" -o "$sqlite" tools/bench/sqlite_driver.c "$amalgamation"
fi
rows=2000
sqlite_untraced=$(seconds "$sqlite" $rows)
sqlite_traced=$(seconds "$utrace" record -o "$work/sqlite.data" -- "$sqlite" $rows)
read -r sqlite_calls sqlite_single <<<"$(calls_and_single_stepped "$work/sqlite.data")"
sqlite_bytes=$(awk -v b="$(stat -c %s "$work/sqlite.data")" -v c="$sqlite_calls" 'BEGIN { printf "%.2f", b / c }')
if command -v uftrace >/dev/null; then
	sqlite_uftrace=$( (cd "$work" && seconds uftrace record -d "$work/sqlite.uftrace" -P . "$sqlite" $rows))
	# Counts per function in both; utrace's `name@plt` is uftrace's `name`.
	sqlite_counts=$(python3 - "$utrace" "$work" <<'PY'
import json, subprocess, sys
utrace, work = sys.argv[1:]
ours = {}
for f in json.loads(subprocess.check_output([utrace, "report", "-i", f"{work}/sqlite.data", "--format=json"]))["functions"]:
    name = f["name"].removesuffix("@plt")
    ours[name] = ours.get(name, 0) + f["calls"]
theirs = {}
report = subprocess.check_output(["uftrace", "report", "-d", f"{work}/sqlite.uftrace", "-s", "call", "--no-pager"], text=True)
for line in report.splitlines()[2:]:
    words = line.split()
    if len(words) >= 2 and words[-2].isdigit():
        theirs[words[-1]] = int(words[-2])
both = set(ours) & set(theirs)
equal = sum(ours[n] == theirs[n] for n in both)
print(f"{equal} of {len(both)} functions traced by both")
PY
)
else
	sqlite_uftrace=""
	sqlite_counts="uftrace not installed"
fi

# Python: Debian's libpython, embedded (python3-config of the system, not of a pyenv).
pyconfig=/usr/bin/python3-config
pyjson=$work/pyjson
if [[ ! -x $pyjson || tools/bench/pyjson.c -nt $pyjson ]]; then
	# shellcheck disable=SC2046 # the flags are words
	cc -O2 $($pyconfig --cflags --embed) -o "$pyjson" tools/bench/pyjson.c $($pyconfig --ldflags --embed)
fi
dicts=500
py_untraced=$(seconds "$pyjson" $dicts)
py_traced=$(seconds "$utrace" record -o "$work/pyjson.data" --nest-lib 'libpython*' -- "$pyjson" $dicts)
read -r py_calls py_single <<<"$(calls_and_single_stepped "$work/pyjson.data")"

# Go: test/goserver.go, an HTTP server and 8 clients in one program, traced in full (the runtime
# left out, as by default).
goserver=$work/goserver
if [[ ! -x $goserver || test/goserver.go -nt $goserver ]]; then
	GOCACHE=$work/go/cache GOPATH=$work/go/path GO111MODULE=off GOPROXY=off GOFLAGS= \
		go build -o "$goserver" test/goserver.go
fi
requests=50
go_untraced=$(seconds "$goserver" $requests)
go_traced=$(seconds "$utrace" record -o "$work/goserver.data" -- "$goserver" $requests)
read -r go_calls go_single <<<"$(calls_and_single_stepped "$work/goserver.data")"

per_call() { awk -v t="$1" -v u="$2" -v c="$3" 'BEGIN { printf "%.0f", (t - u) * 1e9 / c }'; }
say ""
say "Real programs (wall-clock seconds; ns per call = (traced - untraced) / calls, start-up included)"
printf '%-48s %s\n' "SQLite, $rows rows: untraced / utrace record" "$sqlite_untraced / $sqlite_traced s"
printf '%-48s %s\n' "  calls, ns per call, single-stepped entries" "$sqlite_calls, $(per_call "$sqlite_traced" "$sqlite_untraced" "$sqlite_calls") ns, $sqlite_single of calls"
printf '%-48s %s\n' "  bytes per call on disk" "$sqlite_bytes"
if [[ -n $sqlite_uftrace ]]; then
	printf '%-48s %s\n' "  uftrace record -P . (same binary)" "$sqlite_uftrace s: utrace $(awk -v a="$sqlite_traced" -v b="$sqlite_uftrace" 'BEGIN { printf "%.1f", a / b }')× (target <= 10×)"
fi
printf '%-48s %s\n' "  counts equal to uftrace's" "$sqlite_counts"
printf '%-48s %s\n' "Python json.dumps, $dicts dicts: untraced / traced" "$py_untraced / $py_traced s (--nest-lib 'libpython*')"
printf '%-48s %s\n' "  calls, ns per call, single-stepped entries" "$py_calls, $(per_call "$py_traced" "$py_untraced" "$py_calls") ns, $py_single of calls"
printf '%-48s %s\n' "Go HTTP server, 8 × $requests requests: untraced / traced" "$go_untraced / $go_traced s: $(awk -v a="$go_traced" -v b="$go_untraced" 'BEGIN { printf "%.0f", a / b }')× (target <= 100×)"
printf '%-48s %s\n' "  calls, ns per call, single-stepped entries" "$go_calls, $(per_call "$go_traced" "$go_untraced" "$go_calls") ns, $go_single of calls"
