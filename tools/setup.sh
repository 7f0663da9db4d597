#!/usr/bin/env bash
# Installs what building and testing utrace needs on Debian/Ubuntu, skipping what is there.
# Needs root for apt-get; Rust (cargo) must already be installed (https://rustup.rs).
set -euo pipefail
# libc6-dbg: libc's .symtab for --nest-lib 'libc.so*' (tests/stripped_programs.rs); debuginfod: the
# server tests/debug_files.rs fetches a debug file from; xz-utils: MiniDebugInfo made as Fedora does;
# systemtap-sdt-dev: <sys/sdt.h> for test/usdt.c (tests/kernel_events.rs); bpftrace: the reference
# count tests/stripped_programs.rs holds _int_malloc's to; python3-dev and uftrace: the benchmark's
# real programs (tools/bench/real_programs.sh); libiberty-dev: the C++ demangler utrace links
# (src/elf/demangle.rs); qemu-system-x86, busybox-static, cpio, kmod and debian-archive-keyring:
# the guests of Debian's kernels that tools/vm-test.sh boots (tools/vm/); redis-server and
# redis-tools: the live service tools/bench/budget_redis.sh measures --budget on.
packages=(clang libelf-dev zlib1g-dev pkg-config libiberty-dev gcc g++ make binutils graphviz golang-go libc6-dbg debuginfod xz-utils systemtap-sdt-dev bpftrace python3-dev uftrace qemu-system-x86 busybox-static cpio kmod debian-archive-keyring redis-server redis-tools)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Headless Chromium renders the SVG flame graph in tests/svg_render.rs. Debian's package is
# `chromium`; where apt has none (Ubuntu ships Chromium as a snap), warn and go on: that test is
# then skipped outside CI.
browser=(chromium)
for b in chromium chromium-browser google-chrome; do
  command -v "$b" >/dev/null && browser=()
done
if ((${#browser[@]})) && ((${#missing[@]} == 0)) && [ "$(id -u)" -ne 0 ]; then
  echo "tools/setup.sh: warning: Chromium is missing (run as root to install it); tests/svg_render.rs is skipped" >&2
  browser=()
fi
if ((${#missing[@]} + ${#browser[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "tools/setup.sh: run as root to install packages" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  if ((${#browser[@]})) && ! apt-cache show chromium >/dev/null 2>&1; then
    echo "tools/setup.sh: warning: apt has no chromium package here; install Chromium another way (Ubuntu: snap install chromium) or tests/svg_render.rs is skipped" >&2
    browser=()
  fi
  install=("${missing[@]}" "${browser[@]}")
  if ((${#install[@]})); then
    echo "tools/setup.sh: installing ${install[*]}" >&2
    apt-get install -y -qq "${install[@]}" >/dev/null
  fi
fi
command -v cargo >/dev/null || { echo "tools/setup.sh: cargo is missing: install Rust from https://rustup.rs" >&2; exit 1; }
# The kernels tools/vm-test.sh boots, fetched once (apt-get download, as root).
if [ "$(id -u)" -eq 0 ]; then
  "$(dirname "$0")/vm/kernels.sh"
else
  echo "tools/setup.sh: warning: run as root to fetch the kernels tools/vm-test.sh boots" >&2
fi
