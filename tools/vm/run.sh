#!/usr/bin/env bash
# Boots a Debian kernel fetched by tools/vm/kernels.sh under qemu (TCG: KVM does not work on
# every host this runs on) with this machine's root filesystem shared read-only over 9p under a
# tmpfs overlay, runs a command in it as root from the current directory, and exits with the
# command's exit status (124 when the guest did not finish in time). What the command writes
# shows on the guest's serial console, here.
#
# Usage: tools/vm/run.sh [--timeout SECONDS] [--share DIR]... SERIES COMMAND [ARG...]
#   SERIES: 6.12, 6.1 or 5.10 (see tools/vm/kernels.sh)
#   --share DIR: DIR is writable in the guest, at the same path, and what the guest writes there
#   stays (everything else it writes is gone with it). The guest's /tmp is its own, unless the
#   command runs from a directory there.
# Environment: UTRACE_VM_DIR (where the kernels are), UTRACE_VM_MEMORY (default 3G),
# UTRACE_VM_CPUS (default 2). The guest gets PATH, HOME, RUST_BACKTRACE, RUST_LOG, CI and every
# UTRACE_* variable of this environment.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${UTRACE_VM_DIR:-/var/cache/utrace-vm}"
timeout=1800
shares=()
while (($#)); do
  case "$1" in
    --timeout) timeout="$2"; shift 2 ;;
    --share) shares+=("$(cd "$2" && pwd)"); shift 2 ;;
    *) break ;;
  esac
done
if (($# < 2)); then
  echo "usage: tools/vm/run.sh [--timeout SECONDS] [--share DIR]... SERIES COMMAND [ARG...]" >&2
  exit 2
fi
series="$1"
shift
kernel="$cache/$series"
if [ ! -f "$kernel/vmlinuz" ] || [ ! -f "$kernel/initramfs.gz" ]; then
  echo "tools/vm/run.sh: no kernel $series in $cache: run tools/vm/kernels.sh $series" >&2
  exit 2
fi
# Not under /tmp, which the guest mounts afresh.
mkdir -p "$cache/runs"
run="$(mktemp -d "$cache/runs/XXXXXX")"
trap 'rm -rf "$run"' EXIT
cp "$here/guest.sh" "$run/guest.sh"
pwd >"$run/cwd"
printf '%q ' "$@" >"$run/command"
share_devices=()
for i in "${!shares[@]}"; do
  echo "${shares[$i]}" >>"$run/shares"
  share_devices+=(-virtfs "local,path=${shares[$i]},mount_tag=share$i,security_model=none")
done
{
  for name in PATH HOME RUST_BACKTRACE RUST_LOG CI $(compgen -e | grep '^UTRACE_' || true); do
    [ -n "${!name+set}" ] && printf 'export %s=%q\n' "$name" "${!name}"
  done
} >"$run/environment"
status=0
timeout -k 10 "$timeout" qemu-system-x86_64 \
  -accel "tcg,thread=${UTRACE_VM_TCG_THREAD:-single}" -cpu max -smp "${UTRACE_VM_CPUS:-2}" -m "${UTRACE_VM_MEMORY:-3G}" \
  -display none -serial stdio -monitor none -no-reboot -net none \
  -kernel "$kernel/vmlinuz" -initrd "$kernel/initramfs.gz" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 utrace.run=$run" \
  -virtfs local,path=/,mount_tag=root,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=$run,mount_tag=run,security_model=none" "${share_devices[@]}" \
  </dev/null || status=$?
if [ "$status" -eq 124 ]; then
  echo "tools/vm/run.sh: the guest ($series) did not finish within $timeout s" >&2
  exit 124
fi
if [ ! -f "$run/status" ]; then
  echo "tools/vm/run.sh: the guest ($series) stopped before the command ended (qemu: $status)" >&2
  exit 1
fi
exit "$(cat "$run/status")"
