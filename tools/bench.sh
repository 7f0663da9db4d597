#!/usr/bin/env bash
# utrace's benchmark, run by hand (as root), never in CI: what a traced call costs per kind of
# probe site beside the bare uprobe_multi floor measured on the same binary in the same run,
# events/s at the lossless limit, bytes per call, attach and detach time for 10,000 functions,
# how fast `report` reads, and -p against -c on a C++ program that throws. Each figure is set beside its target in DESIGN.md.
#
# Usage: tools/bench.sh            (about 5 minutes on a 2-vCPU VM; the SQLite amalgamation
#                                  is compiled once more, a minute or two)
#
# Environment: BENCH_REPS (runs per measurement, median taken; default 5), BENCH_RUN_SECONDS
# (aim for each traced run; default 0.5), BENCH_RATE_SECONDS (each max-rate recording;
# default 10, as in the target).
#
# The targets (tools/bench/) are compiled here from source; everything goes to target/bench/.
set -euo pipefail
cd "$(dirname "$0")/.."

reps=${BENCH_REPS:-5}
run_seconds=${BENCH_RUN_SECONDS:-0.5}
rate_seconds=${BENCH_RATE_SECONDS:-10}

if [[ $(id -u) -ne 0 ]]; then
	echo "bench: run as root (BPF programs and uprobes)" >&2
	exit 1
fi

work=target/bench
mkdir -p "$work"
work=$(realpath "$work")
log=$work/last-run.log
: >"$log"

# Lines meant for the reader; everything else goes to $log.
say() { printf '%s\n' "$*"; }
fail() {
	say "bench: $*" >&2
	exit 1
}

say "== building (cargo build --release) and compiling tools/bench/"
cargo build --release --quiet
utrace=$PWD/target/release/utrace
floor=$PWD/target/release/uprobe-floor
sites=$work/sites
many=$work/many
cc -O2 -g -fcf-protection=none -fno-builtin -c tools/bench/sites.c -o "$work/sites.o"
cc -O2 -g -fcf-protection=branch -c tools/bench/endbr64.c -o "$work/endbr64.o"
cc -fcf-protection=none -pthread -o "$sites" "$work/sites.o" "$work/endbr64.o"
cc -O1 -fcf-protection=none -o "$many" tools/bench/many.c
hello=$work/hello
c++ -O2 -o "$hello" tools/bench/hello.cpp

# kind | probed function | what its first instruction must be (an extended regex)
kinds=(
	"push|push_first|^push "
	"endbr64|endbr64_first|^endbr64"
	"single-step|single_step_first|^mov .*\\(%rip\\)"
	"plt|labs@plt|^(jmp|bnd jmp) +\\*.*\\(%rip\\)|^endbr64"
	"plt-emulated|pthread_getspecific@plt|^(jmp|bnd jmp) +\\*.*\\(%rip\\)|^endbr64"
	"plt-ifunc|memcmp@plt|^(jmp|bnd jmp) +\\*.*\\(%rip\\)|^endbr64"
)

disassembly=$(objdump -d --no-show-raw-insn "$sites")

# The first instruction of function $1, as objdump prints it.
first_instruction() {
	awk -v name="<$1>:" '
		$2 == name { found = 1; next }
		found && NF > 1 {
			sub(/^[ \t]*[0-9a-f]+:[ \t]*/, ""); sub(/[ \t]+#.*/, ""); gsub(/[ \t]+/, " ")
			print; exit
		}
	' <<<"$disassembly"
}

say "== probe sites (objdump -d $sites)"
declare -A first
for entry in "${kinds[@]}"; do
	IFS='|' read -r kind function pattern alternative <<<"$entry"
	instruction=$(first_instruction "$function")
	if ! grep -Eq "$pattern${alternative:+|$alternative}" <<<"$instruction"; then
		fail "$function starts with \`$instruction\`, not what the $kind kind needs"
	fi
	first[$kind]=$instruction
	printf '  %-12s %-18s %s\n' "$kind" "$function" "$instruction"
done
grep -Eq 'call +[0-9a-f]+ <labs@plt>' <<<"$disassembly" ||
	fail "the plt loop does not call labs through the PLT"
grep -Eq 'call +[0-9a-f]+ <pthread_getspecific@plt>' <<<"$disassembly" ||
	fail "the plt-emulated loop does not call pthread_getspecific through the PLT"
grep -Eq 'call +[0-9a-f]+ <memcmp@plt>' <<<"$disassembly" ||
	fail "the plt-ifunc loop does not call memcmp through the PLT"

# ns per call from a `sites:` line on standard input.
ns_per_call() { sed -n 's/^sites: .*ns_per_call=\([0-9.]*\).*/\1/p'; }

# The median of the arguments.
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# One timed run of `sites KIND CALLS` in mode $1 (with more utrace record flags after CALLS);
# prints its ns per call.
run_mode() {
	local mode=$1 kind=$2 function=$3 calls=$4 out
	shift 4
	case $mode in
	untraced) out=$("$sites" "$kind" "$calls" 2>>"$log") ;;
	floor) out=$("$floor" --binary "$sites" --function "$function" -- "$sites" "$kind" "$calls" 2>>"$log") ;;
	floor-ret) out=$("$floor" --binary "$sites" --function "$function" --retprobe -- "$sites" "$kind" "$calls" 2>>"$log") ;;
	record) out=$("$utrace" record -o "$work/site.data" -f "$function" "$@" -- "$sites" "$kind" "$calls" 2>>"$log") ;;
	live) out=$("$utrace" live -o /dev/null -f "$function" -- "$sites" "$kind" "$calls" 2>>"$log") ;;
	esac
	local ns
	ns=$(ns_per_call <<<"$out")
	[[ -n $ns ]] || fail "no timing from the $mode run of $kind (see $log)"
	# Every call must have been seen, or the figure is not what it says.
	case $mode in
	floor | floor-ret)
		tail -1 "$log" | grep -q ": $calls entry hits" ||
			fail "the $mode probe did not see all $calls calls of $function: $(tail -1 "$log")"
		;;
	record)
		# Its calls, not the file's events: the time preempted adds events of its own.
		"$utrace" report -i "$work/site.data" --format=json | grep -q "\"calls\": $calls," ||
			fail "utrace record did not see all $calls calls of $function (see utrace info -i $work/site.data)"
		;;
	esac
	echo "$ns"
}

modes=(floor floor-ret record live)
declare -A result samples
say "== per-call cost: median of $reps runs of about ${run_seconds} s each, ns per call"
for entry in "${kinds[@]}"; do
	IFS='|' read -r kind function _ <<<"$entry"
	# Calls for a traced run of about $run_seconds, from a short run under the floor.
	probe_ns=$(run_mode floor-ret "$kind" "$function" 2000)
	calls=$(awk -v s="$run_seconds" -v ns="$probe_ns" 'BEGIN {
		n = int(s * 1e9 / ns / 1000) * 1000; print (n < 2000 ? 2000 : n > 5000000 ? 5000000 : n) }')
	result[$kind,untraced]=$(median "$(run_mode untraced "$kind" "$function" 20000000)" \
		"$(run_mode untraced "$kind" "$function" 20000000)" "$(run_mode untraced "$kind" "$function" 20000000)")
	samples=()
	for ((rep = 0; rep < reps; rep++)); do
		for mode in "${modes[@]}"; do
			samples[$mode]+=" $(run_mode "$mode" "$kind" "$function" "$calls")"
		done
	done
	line=$(printf '  %-12s calls=%-8s untraced=%s' "$kind" "$calls" "${result[$kind,untraced]}")
	for mode in "${modes[@]}"; do
		# shellcheck disable=SC2086 # the samples are words on purpose
		result[$kind,$mode]=$(median ${samples[$mode]})
		line+=" $mode=${result[$kind,$mode]} (${samples[$mode]# })"
	done
	say "$line"
done

say "== captured values (-A, -R): record, median of $reps runs, ns per call"
# The push loop as measured above, then with two integer arguments and its return value; the
# string loop (push_first's shape, a 20-byte string argument) without and with the string.
values_calls=$(awk -v s="$run_seconds" -v ns="${result[push,record]}" 'BEGIN { print int(s * 1e9 / ns / 1000) * 1000 }')
declare -A values
values_case() {
	local name=$1 kind=$2 function=$3 runs=()
	shift 3
	for ((rep = 0; rep < reps; rep++)); do
		runs+=("$(run_mode record "$kind" "$function" "$values_calls" "$@")")
	done
	values[$name]=$(median "${runs[@]}")
	say "  $name: ${runs[*]}"
}
values_case none push push_first
values_case "two integers" push push_first -A 'push_first@arg1,arg2' -R 'push_first@retval'
values_case "string, none" string push_string
values_case "string" string push_string -A 'push_string@arg1/s'
values_untraced=$(median "$(run_mode untraced string push_string 20000000)" \
	"$(run_mode untraced string push_string 20000000)" "$(run_mode untraced string push_string 20000000)")

say "== events/s at the limit: the push loop at full speed under utrace record, about ${rate_seconds} s"
record_ns=${result[push,record]}
# Recorded file $1: events, lost events and duration in seconds, from `utrace info`.
info_of() {
	"$utrace" info -i "$1" | awk '
		/^events:/ { e = $2 }
		/^lost events:/ { l = $3 }
		/^duration:/ { d = $2; if ($3 == "ms") d /= 1e3; if ($3 == "us") d /= 1e6 }
		END { print e, l, d }'
}
declare -A rate
for threads in 1 2; do
	calls=$(awk -v s="$rate_seconds" -v ns="$record_ns" -v t="$threads" \
		'BEGIN { print int(s * 1e9 / ns / t) }')
	out=$("$utrace" record -o "$work/rate$threads.data" -f push_first -- "$sites" push "$calls" "$threads" 2>>"$log")
	read -r events lost seconds < <(info_of "$work/rate$threads.data")
	calls_per_s=$(sed -n 's/.*calls_per_s=\([0-9]*\).*/\1/p' <<<"$out")
	bytes=$(stat -c %s "$work/rate$threads.data")
	rate[$threads]=$(awk -v e="$events" -v l="$lost" -v s="$seconds" -v c="$calls_per_s" \
		-v b="$bytes" -v n="$((calls * threads))" \
		'BEGIN { printf "%d %d %.3f %.0f %.0f %.2f", e, l, s, e / s, c, b / n }')
	read -r events lost seconds events_per_s calls_per_s bytes_per_call <<<"${rate[$threads]}"
	say "  threads=$threads calls=$((calls * threads)) events=$events lost=$lost in $seconds s:" \
		"$events_per_s events/s, the program's loop $calls_per_s calls/s," \
		"$bytes_per_call bytes per call on disk"
done

say "== start-up: from launching the command to the first line of main, C++ hello-world, median of $reps"
# ms from now until the `hello: main at NS` that the command's output holds.
started_after() {
	local launched out
	launched=$(date +%s%N)
	out=$("$@" 2>>"$log" | grep '^hello: main at ')
	echo $(((${out##* } - launched) / 1000000))
}
startup_traced=()
startup_untraced=()
for ((rep = 0; rep < reps; rep++)); do
	startup_traced+=("$(started_after "$utrace" record -o "$work/hello.data" -- "$hello")")
	startup_untraced+=("$(started_after "$hello")")
done
say "  traced: ${startup_traced[*]} ms; untraced: ${startup_untraced[*]} ms"
startup=$(( $(median "${startup_traced[@]}") - $(median "${startup_untraced[@]}") ))

say "== a C++ program that throws: -p (held with ptrace) against -c, median of $reps, ns per round"
# Each round: 4 traced calls (round_trip, pass twice, thrower) and one exception through them,
# two pauses for the shadow stack. -p pauses the one thread in a ptrace stop; -c stops the process.
throws=$work/throws
c++ -O2 -g -o "$throws" tools/bench/throws.cpp
throw_rounds=5000
ns_per_round() { sed -n 's/^throws: .*ns_per_round=\([0-9.]*\).*/\1/p'; }
# One run under -p with more record flags in "$@": the program waits until utrace has attached.
attached_round() {
	local out=$work/throws.out err=$work/throws.err program recorder
	: >"$err"
	THROWS_WAIT=1 "$throws" "$throw_rounds" >"$out" &
	program=$!
	until grep -q '^ready' "$out"; do sleep 0.02; done
	"$utrace" record -d -o "$work/throws-p.data" "$@" -p "$program" 2>"$err" &
	recorder=$!
	until grep -q '^utrace: attached' "$err"; do sleep 0.02; done
	kill -USR1 "$program"
	wait "$program" "$recorder"
	cat "$err" >>"$log"
	ns_per_round <"$out"
}
throws_c=()
throws_p=()
throws_ret=()
for ((rep = 0; rep < reps; rep++)); do
	throws_c+=("$("$utrace" record -o "$work/throws-c.data" -- "$throws" "$throw_rounds" 2>>"$log" | ns_per_round)")
	throws_p+=("$(attached_round)")
	throws_ret+=("$(attached_round --exit-probes=ret)")
done
throws_untraced=$("$throws" "$throw_rounds" | ns_per_round)
say "  untraced=$throws_untraced -c=$(median "${throws_c[@]}") (${throws_c[*]})" \
	"-p=$(median "${throws_p[@]}") (${throws_p[*]})" \
	"-p --exit-probes=ret=$(median "${throws_ret[@]}") (${throws_ret[*]})"
say "  -p / -c: $(awk -v p="$(median "${throws_p[@]}")" -v c="$(median "${throws_c[@]}")" 'BEGIN { printf "%.2f", p / c }') (target: at most 1.5)"

say "== attach and detach: $many (10,000 functions, each called once), utrace record -d"
attach_ms=()
detach_ms=()
for ((rep = 0; rep < reps; rep++)); do
	out=$("$utrace" record -d -o "$work/many.data" -- "$many" 2>&1 >/dev/null | grep -v '^libbpf')
	attach_ms+=("$(sed -n 's/^utrace: attached \([0-9]*\) .* in \([0-9.]*\) ms$/\2/p' <<<"$out")")
	detach_ms+=("$(sed -n 's/^utrace: detached in \([0-9.]*\) ms$/\1/p' <<<"$out")")
	probes=$(sed -n 's/^utrace: attached \([0-9]*\) .*/\1/p' <<<"$out")
done
attach=$(median "${attach_ms[@]}")
detach=$(median "${detach_ms[@]}")
say "  $probes functions (entry and return): attach ${attach_ms[*]} ms, detach ${detach_ms[*]} ms"

say "== detach while hot: $many 8 (all 10,000 functions called again and again), utrace record -d --duration 2s"
hot_detach_ms=()
for ((rep = 0; rep < reps; rep++)); do
	out=$("$utrace" record -d --duration 2s -o "$work/many-hot.data" -- "$many" 8 2>&1 >/dev/null | grep -v '^libbpf')
	hot_detach_ms+=("$(sed -n 's/^utrace: detached in \([0-9.]*\) ms$/\1/p' <<<"$out")")
done
hot_detach=$(median "${hot_detach_ms[@]}")
say "  detach ${hot_detach_ms[*]} ms"

say "== report: utrace report --format=summary of the 2-thread recording, best of $reps"
read -r report_events _ <<<"${rate[2]}"
best=""
for ((rep = 0; rep < reps; rep++)); do
	timing=$(/usr/bin/time -f '%e %U %M' "$utrace" report --format=summary \
		-i "$work/rate2.data" -o /dev/null 2>&1 | tail -1)
	read -r wall user rss_kb <<<"$timing"
	say "  run $((rep + 1)): $wall s wall, $user s user, max RSS $((rss_kb / 1024)) MiB"
	if [[ -z $best ]] || awk -v a="$wall" -v b="${best%% *}" 'BEGIN { exit !(a < b) }'; then
		best="$wall $rss_kb"
	fi
done
read -r report_seconds report_rss_kb <<<"$best"
report_rate=$(awk -v e="$report_events" -v s="$report_seconds" \
	'BEGIN { if (s > 0) printf "%.0f", e / s; else print "inf" }')

# ---------------------------------------------------------------------------------------------
verdict() { awk -v v="$1" -v limit="$2" 'BEGIN { print (v <= limit ? "meets" : "MISSES") }'; }
at_least() { awk -v v="$1" -v limit="$2" 'BEGIN { print (v >= limit ? "meets" : "MISSES") }'; }

say ""
say "utrace benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'), Linux $(uname -r), $(nproc) CPUs" \
	"($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1))"
say ""
say "Per traced call, ns (median of $reps runs; overhead = traced - untraced;"
say "floor = uprobe_multi per-CPU counter at the entry, floor+ret = with a uretprobe too)"
printf '%-12s %-22s %8s %8s %9s %8s %8s %9s %8s %8s %10s %10s  %s\n' kind "first instruction" \
	untraced floor floor+ret record live "fl+r ovh" "rec ovh" "liv ovh" "rec/fl+r" "liv/fl+r" \
	"target: record, live"
for entry in "${kinds[@]}"; do
	IFS='|' read -r kind _ <<<"$entry"
	base=${result[$kind,untraced]}
	limit=1.15
	[[ $kind == endbr64 ]] && limit=0.25
	read -r floor_ovh rec_ovh live_ovh rec_ratio live_ratio < <(awk -v b="$base" \
		-v f="${result[$kind,floor-ret]}" -v r="${result[$kind,record]}" -v l="${result[$kind,live]}" \
		'BEGIN { printf "%.1f %.1f %.1f %.2f %.2f\n", f - b, r - b, l - b, (r - b) / (f - b), (l - b) / (f - b) }')
	printf '%-12s %-22.22s %8.1f %8.1f %9.1f %8.1f %8.1f %9.1f %8.1f %8.1f %10s %10s  %s\n' \
		"$kind" "${first[$kind]}" "$base" "${result[$kind,floor]}" "${result[$kind,floor-ret]}" \
		"${result[$kind,record]}" "${result[$kind,live]}" "$floor_ovh" "$rec_ovh" "$live_ovh" \
		"${rec_ratio}x" "${live_ratio}x" \
		"<= ${limit}x: $(verdict "$rec_ratio" "$limit"), $(verdict "$live_ratio" "$limit")"
done
say ""
read -r _ lost1 _ events_per_s1 calls_per_s1 bytes1 <<<"${rate[1]}"
read -r events2 lost2 _ events_per_s2 calls_per_s2 _ <<<"${rate[2]}"
printf '%-48s %-26s %s\n' measure measured "target (DESIGN.md)"
printf '%-48s %-26s %s\n' "events/s, record, 1 thread, ${rate_seconds} s at full speed" \
	"$events_per_s1 ($lost1 lost)" "1M calls/s (2M events/s), 10 s, 0 lost"
printf '%-48s %-26s %s\n' "  calls/s the traced loop reached" "$calls_per_s1" \
	"$(at_least "$calls_per_s1" 1000000) (lost: $(verdict "$lost1" 0))"
printf '%-48s %-26s %s\n' "events/s, record, 2 threads at full speed" \
	"$events_per_s2 ($lost2 lost)" "(beyond the target)"
printf '%-48s %-26s %s\n' "  calls/s the traced loops reached" "$calls_per_s2" \
	"$(at_least "$calls_per_s2" 1000000) (lost: $(verdict "$lost2" 0))"
printf '%-48s %-26s %s\n' "bytes per call on disk" "$bytes1" "<= 8: $(verdict "$bytes1" 8)"
printf '%-48s %-26s %s\n' "start-up of a C++ hello-world, beyond untraced" "$startup ms" \
	"<= 150 ms: $(verdict "$startup" 150)"
printf '%-48s %-26s %s\n' "attach, $probes functions (median)" "$attach ms" \
	"< 1000 ms: $(verdict "$attach" 1000)"
printf '%-48s %-26s %s\n' "detach, $probes functions (median)" "$detach ms" \
	"< 1000 ms: $(verdict "$detach" 1000)"
printf '%-48s %-26s %s\n' "detach, $probes functions called at full speed" "$hot_detach ms" \
	"< 1000 ms: $(verdict "$hot_detach" 1000)"
printf '%-48s %-26s %s\n' "captured values: push, none / two integers + retval" \
	"$(awk -v a="${values[none]}" -v b="${values[two integers]}" -v u="${result[push,untraced]}" \
		'BEGIN { printf "%.0f / %.0f ns (+%.0f)", a - u, b - u, b - a }')" "(per call, over untraced)"
printf '%-48s %-26s %s\n' "captured values: string loop, none / 20-byte string" \
	"$(awk -v a="${values[string, none]}" -v b="${values[string]}" -v u="$values_untraced" \
		'BEGIN { printf "%.0f / %.0f ns (+%.0f)", a - u, b - u, b - a }')" "(per call, over untraced)"
printf '%-48s %-26s %s\n' "report --format=summary, events/s" \
	"$report_rate" ">= 50M: $(at_least "$report_rate" 50000000) ($events2 events)"
printf '%-48s %-26s %s\n' "  its max RSS" "$((report_rss_kb / 1024)) MiB" \
	"bounded by functions and stack depth"

say "== real programs: SQLite (against uftrace) and CPython's libpython (tools/bench/real_programs.sh)" >&2
tools/bench/real_programs.sh "$utrace" "$work"
