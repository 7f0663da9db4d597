#!/usr/bin/env bash
# Re-records the event streams of the golden report tests (tests/golden.rs) into
# tests/data/golden/: run it as root (BPF) when the data file format changes. Each stream
# NAME.data gets NAME.counts beside it: the `calls <count> <name>` lines the traced program
# printed during that very recording, which the tests hold the reports' counts to.
#
# The expected reports then no longer match (the times are new): look at what changed, then
# re-bless them with
#
#   UTRACE_BLESS=1 cargo test --release --test golden
#
# and look again at the replay trees (tests/data/golden/*.replay.txt) before committing.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
golden=$repo/tests/data/golden
cargo build --release --quiet
utrace=$repo/target/release/utrace

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# As tests/common/mod.rs compiles the programs of test/ (see test/README.md).
compile() { # compile SOURCE NAME
  local compiler=cc
  [[ $1 == *.cpp ]] && compiler=c++
  "$compiler" -O2 -g -fno-optimize-sibling-calls -pthread -o "$work/$2" "$repo/test/$1"
}
compile sort.c sort
compile calls.c calls
compile exceptions.cpp exceptions
compile forkexec.c forkexec
compile calls.c calls-exec

# The functions of test/calls.c left without probes: fib (23573 calls) and worker_step (10000)
# alone would make a stream of over 250 KB. The program still counts them: not in .counts.
hidden=fib,worker_step

# record NAME [RECORD FLAGS...] -- COMMAND...: records COMMAND, run from the work directory so
# that the file names it as `./prog` whoever records it, into NAME.data, and its counts into
# NAME.counts.
record() {
  local name=$1
  shift
  local stdout=$work/$name.stdout stderr=$work/$name.stderr
  (cd "$work" && "$utrace" record -o "$golden/$name.data" "$@" >"$stdout" 2>"$stderr") || {
    cat "$stderr" >&2
    exit 1
  }
  if ! grep -q ', 0 lost,' "$stderr"; then
    echo "tools/record-goldens.sh: $name lost events; record again on a quieter machine" >&2
    cat "$stderr" >&2
    exit 1
  fi
  {
    echo "# What the program counted of its own calls while $name.data was recorded"
    echo "# (tools/record-goldens.sh)."
    if [[ " $* " == *" --no-function "* ]]; then
      echo "# Without $hidden: this recording has no probes on them."
    fi
    grep -E '^((parent|child) )?calls [0-9]+ ' "$stdout" | grep -v -E " (${hidden//,/|})$"
  } >"$golden/$name.counts"
  echo "$name: $(tail -n 1 "$stderr")"
}

mkdir -p "$golden"
# Nesting (merge_sort's recursion), a callback from libc (compare_ints under qsort@plt).
record sort -- ./sort 50
# Five threads, deep mutual recursion (is_even/is_odd), calls through function pointers.
record calls --no-function "$hidden" -- ./calls
# Exceptions under the default exit probes (uretprobes): calls of unknown time, cleanups.
record exceptions -- ./exceptions 2
# Two processes: a fork, and the child's exec of calls; the exec cuts the calls open in it.
record follow --follow --no-function "$hidden" -- ./forkexec ./calls-exec
ls -l "$golden"/*.data
