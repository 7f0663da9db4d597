#!/usr/bin/env bash
# Installs what building and testing utrace needs on Debian/Ubuntu, skipping what is there.
# Needs root for apt-get; Rust (cargo) must already be installed (https://rustup.rs).
set -euo pipefail
packages=(clang libelf-dev zlib1g-dev pkg-config gcc g++ make binutils)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "tools/setup.sh: installing ${missing[*]}" >&2
  if [ "$(id -u)" -ne 0 ]; then
    echo "tools/setup.sh: run as root to install packages" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "tools/setup.sh: cargo is missing: install Rust from https://rustup.rs" >&2; exit 1; }
