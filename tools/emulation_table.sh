#!/usr/bin/env bash
# tools/emulation_table.sh: which first instructions this kernel emulates under a uprobe, found
# by measurement, beside what utrace assumes (src/elf/site.rs, `execution_at`).
#
#   sudo tools/emulation_table.sh [N [RUNS]]     (N calls a run, 20000; RUNS runs, 5)
#
# Builds tools/emulation (one tiny function per candidate first instruction, and a driver that
# calls one N times and prints ns per call) into target/emulation, and uprobe-floor. For each
# function: the median ns per call of RUNS runs untraced, and of RUNS runs under uprobe-floor
# (a uprobe_multi probe on its first instruction that only counts hits: the cheapest uprobe);
# the difference is the probe's overhead per call. Two references measured in the same run
# class the others: push_rbp (emulated) and mov_rdi_rax (single-stepped). An instruction is
# "emulated" when its overhead is below the midpoint of theirs, "single-stepped" otherwise;
# "refused" when the kernel would not attach the probe (or it never fired). The column "utrace assumes" is
# `uprobe-floor --classify`, utrace's own code on the same bytes. Prints a markdown table on
# standard output, progress on standard error.
set -euo pipefail

n=${1:-20000}
runs=${2:-5}
cd "$(dirname "$0")/.."
out=target/emulation
mkdir -p "$out"
driver=$out/driver
floor=target/release/uprobe-floor

gcc -O2 -Wall -o "$driver" tools/emulation/driver.c tools/emulation/insns.S
cargo build --release --quiet --bin uprobe-floor

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

declare -A untraced traced assumes bytes hits
mapfile -t names < <("$driver" --list)
for name in "${names[@]}"; do
    read -r assumes[$name] rest < <("$floor" --binary "$driver" --function "$name" --classify)
    bytes[$name]=$rest
    untraced[$name]=$(for _ in $(seq "$runs"); do "$driver" "$name" "$n"; done | median)
    traced[$name]=refused
    hits[$name]=0
    samples=()
    for _ in $(seq "$runs"); do
        if ! sample=$("$floor" --binary "$driver" --function "$name" -- "$driver" "$name" "$n" \
            2>"$out/floor.err"); then
            samples=()
            break
        fi
        samples+=("$sample")
        hits[$name]=$(sed -n 's/.*: \([0-9]*\) entry hits.*/\1/p' "$out/floor.err")
    done
    # uprobe_multi skips an offset the kernel refuses without a word when the process maps the
    # file after the link is made: no hits at all is a refusal too.
    if ((${#samples[@]})) && ((hits[$name] > 0)); then
        traced[$name]=$(printf '%s\n' "${samples[@]}" | median)
    fi
    printf '%-12s %-24s untraced %7s ns  traced %9s ns  hits %s\n' "$name" "${bytes[$name]}" \
        "${untraced[$name]}" "${traced[$name]}" "${hits[$name]}" >&2
done

overhead() { awk -v t="${traced[$1]}" -v u="${untraced[$1]}" 'BEGIN { printf "%.0f", t - u }'; }
emulated_ref=$(overhead push_rbp)
stepped_ref=$(overhead mov_rdi_rax)
midpoint=$(awk -v e="$emulated_ref" -v s="$stepped_ref" 'BEGIN { printf "%.0f", (e + s) / 2 }')
if ((emulated_ref * 2 > stepped_ref)); then
    echo "emulation_table: the references are too close (push_rbp $emulated_ref ns," \
        "mov_rdi_rax $stepped_ref ns): no class is safe" >&2
    exit 1
fi

gap_low=0
gap_high=999999999
for name in "${names[@]}"; do
    [[ ${traced[$name]} == refused ]] && continue
    cost=$(overhead "$name")
    if ((cost < midpoint)); then
        ((cost > gap_low)) && gap_low=$cost
    else
        ((cost < gap_high)) && gap_high=$cost
    fi
done

echo "Kernel $(uname -r), $(date -u +%Y-%m-%d), $n calls a run, median of $runs runs."
echo "References: \`push %rbp\` $emulated_ref ns (emulated), \`mov %rdi,%rax\` $stepped_ref ns"
echo "(single-stepped); below their midpoint, $midpoint ns, is emulated. Overhead: traced minus"
echo "untraced ns per call (\`uprobe-floor\`, a counting uprobe_multi probe); × push: overhead"
echo "over the emulated reference's. The gap: every emulated row costs at most $gap_low ns,"
echo "every single-stepped one at least $gap_high ns."
echo
echo "| function | instruction | bytes | probe overhead ns | × push | kernel (measured) | utrace assumes | agree? |"
echo "|---|---|---|---:|---:|---|---|---|"
for name in "${names[@]}"; do
    disassembly=$(objdump -d --no-show-raw-insn --disassemble="$name" "$driver" |
        awk -F'\t' '/^ *[0-9a-f]+:/ { print $2; exit }' |
        sed 's/ \+/ /g; s/ *$//; s/[0-9a-f]\+ <[a-z0-9_]*+\(0x[0-9a-f]*\)>/.+\1/')
    if [[ ${traced[$name]} == refused ]]; then
        cost=—
        ratio=—
        measured=refused
    else
        cost=$(overhead "$name")
        ratio=$(awk -v c="$cost" -v e="$emulated_ref" 'BEGIN { printf "%.2f", c / e }')
        if ((cost < midpoint)); then measured=emulated; else measured=single-stepped; fi
        if ((hits[$name] != n)); then measured="$measured ($((hits[$name])) hits of $n)"; fi
    fi
    if [[ $measured == "${assumes[$name]}" ]]; then agree=yes; else agree=**no**; fi
    echo "| $name | \`$disassembly\` | \`${bytes[$name]}\` | $cost | $ratio | $measured | ${assumes[$name]} | $agree |"
done
