#!/usr/bin/env bash
# What `record --budget` costs a live service, the issue's figures: Debian's redis-server under
# `redis-benchmark -q -n 20000 -t set,get`, untraced, traced in full with `-p`, and with
# `--budget 2x` and `--budget 10%`. Each budgeted run gets one benchmark first (the budget
# detaches as the load comes), then the one measured.
#
# Usage: tools/bench/budget_redis.sh UTRACE WORKDIR
# Needs: redis-server and redis-benchmark (Debian's redis-server and redis-tools; tools/setup.sh
# installs them), root.
set -euo pipefail
utrace=$1
work=$2
mkdir -p "$work"
port=16399

# The SET and GET requests per second of one benchmark.
benchmark() {
	redis-benchmark -p "$port" -q -n 20000 -t set,get 2>&1 | tr '\r' '\n' |
		awk '/requests per second/ { printf "%s %s ", $1, $2 }'
}

redis-server --port "$port" --save '' --appendonly no >"$work/redis.log" 2>&1 &
redis=$!
trap 'kill $redis 2>/dev/null || true' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done

printf 'untraced:      %s\n' "$(benchmark)"
for budget in "" "--budget 2x" "--budget 10%"; do
	# shellcheck disable=SC2086 # $budget is empty or two words
	"$utrace" record -p "$redis" $budget -o "$work/redis.data" >"$work/record.log" 2>&1 &
	recorder=$!
	sleep 1.5
	# A full trace runs at one load as at another: no need to wait for it.
	[[ -n $budget ]] && benchmark >/dev/null
	measured=$(benchmark)
	kill -INT "$recorder"
	wait "$recorder" || true
	detached=$(awk '/--budget: detached/ { n += $4 } END { print n + 0 }' "$work/record.log")
	printf '%-14s %s(%s functions detached)\n' "${budget:-full trace}:" "$measured" "$detached"
done
