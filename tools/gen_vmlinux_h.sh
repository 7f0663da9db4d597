#!/usr/bin/env bash
# Regenerates vmlinux/vmlinux.h from the running kernel's BTF. The header is committed, so a
# build needs clang but not bpftool; run this only to pick up new kernel types.
set -euo pipefail
cd "$(dirname "$0")/.."
btf=${1:-/sys/kernel/btf/vmlinux}
command -v bpftool >/dev/null || { echo "bpftool is missing: apt-get install bpftool" >&2; exit 1; }
bpftool btf dump file "$btf" format c > vmlinux/vmlinux.h.tmp
mv vmlinux/vmlinux.h.tmp vmlinux/vmlinux.h
echo "wrote vmlinux/vmlinux.h ($(wc -l < vmlinux/vmlinux.h) lines) from $btf"
