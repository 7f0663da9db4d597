#!/usr/bin/env bash
# What each kernel's way of probing costs: on this machine and in a guest of each of Debian's
# kernels (tools/vm/), the push loop of tools/bench/sites.c untraced and under `utrace record`
# (ns per call), the attach and detach of 1,000 functions of tools/bench/many.c (`record -d`),
# and where the kernel has kprobes, a traced kernel function's cost a call (tools/bench/reads.c
# under `record -k vfs_read`) and the attach of 600-odd kernel functions. In the guests the CPU is emulated (qemu TCG), so compare a kernel's ratios, not
# its nanoseconds with the host's. As root; by hand, never in CI (about 3 minutes).
#
# Usage: tools/bench/kernels.sh [SERIES...]   (default: host 6.12 6.1 5.10)
set -euo pipefail
cd "$(dirname "$0")/../.."
series=("$@")
((${#series[@]})) || series=(host 6.12 6.1 5.10)

cargo build --release --quiet
work="$PWD/target/bench-kernels"
mkdir -p "$work"
cc -O2 -g -fcf-protection=none -fno-builtin -c tools/bench/sites.c -o "$work/sites.o"
cc -O2 -g -fcf-protection=branch -c tools/bench/endbr64.c -o "$work/endbr64.o"
cc -fcf-protection=none -pthread -o "$work/sites" "$work/sites.o" "$work/endbr64.o"
cc -O1 -fcf-protection=none -o "$work/many" tools/bench/many.c
cc -O2 -o "$work/reads" tools/bench/reads.c

# Runs where it is booted (the guest sees this machine's files at the same paths) and prints
# one line per figure.
cat >"$work/measure.sh" <<'EOF'
set -eu
work="$1"
utrace="$2"
calls=20000
ns() { sed -n 's/^sites: .*ns_per_call=\([0-9.]*\).*/\1/p'; }
untraced=$("$work/sites" push "$calls" | ns)
traced=$("$utrace" record -o /tmp/push.data -f push_first -- "$work/sites" push "$calls" 2>/dev/null | ns)
single=$(UTRACE_ATTACH_MODE=single "$utrace" record -o /tmp/push.data -f push_first -- "$work/sites" push "$calls" 2>/dev/null | ns)
out=$("$utrace" record -d -o /tmp/many.data -f 'f0*' -- "$work/many" 2>&1 >/dev/null)
attach=$(echo "$out" | sed -n 's/^utrace: attached \([0-9]*\) .* with \(.*\) in \([0-9.]*\) ms$/\1 functions, \2, \3 ms/p')
detach=$(echo "$out" | sed -n 's/^utrace: detached in \([0-9.]*\) ms$/\1 ms/p')
echo "push loop, ns a call: untraced $untraced, record $traced, record one uprobe each $single"
echo "attach: $attach; detach: $detach"
if [ -e /sys/bus/event_source/devices/kprobe/type ]; then
  rns() { sed -n 's/^reads: .*ns_per_call=\([0-9.]*\).*/\1/p'; }
  untraced=$("$work/reads" "$calls" | rns)
  traced=$("$utrace" record -o /tmp/reads.data -f main -k vfs_read -- "$work/reads" "$calls" 2>/dev/null | rns)
  echo "read() of a byte, ns a call: untraced $untraced, vfs_read traced (-k) $traced"
  out=$("$utrace" record -d -o /tmp/reads.data -f main -k 'tcp_*,udp_*,ip_*,vfs_*' -- "$work/reads" 10 2>&1 >/dev/null)
  echo "$out" | sed -n 's/^utrace: kernel functions: /kernel functions: /p'
else
  echo "kernel functions: no kprobes"
fi
EOF

for s in "${series[@]}"; do
  case "$s" in
    host) echo "== this machine, Linux $(uname -r)"
          sh "$work/measure.sh" "$work" "$PWD/target/release/utrace" ;;
    *) echo "== Linux $s ($(cat "${UTRACE_VM_DIR:-/var/cache/utrace-vm}/$s/version")), qemu TCG"
       tools/vm/run.sh --timeout 900 "$s" sh "$work/measure.sh" "$work" "$PWD/target/release/utrace" ;;
  esac
done
