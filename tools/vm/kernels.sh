#!/usr/bin/env bash
# Fetches the Debian kernels the VM tests boot (tools/vm/run.sh), each with an initramfs that
# mounts this machine's root filesystem read-only over 9p: Debian 12's 6.12 (bookworm-security)
# and 6.1 (bookworm), and Debian 11's 5.10 (bullseye). The plain `amd64-unsigned` flavour: the
# cloud one has no 9p. Needs root (apt-get), dpkg-deb, depmod/modprobe (kmod), cpio and
# busybox-static; tools/setup.sh installs them. Skips a kernel already fetched.
#
# Usage: tools/vm/kernels.sh [SERIES...]   (default: 6.12 6.1 5.10)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${UTRACE_VM_DIR:-/var/cache/utrace-vm}"
series=("$@")
((${#series[@]})) || series=(6.12 6.1 5.10)

# The package name pattern of each series, newest first when sorted by version.
pattern() {
  case "$1" in
    6.12) echo '^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$' ;;
    6.1) echo '^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$' ;;
    5.10) echo '^linux-image-5\.10\.0-[0-9]+-amd64-unsigned$' ;;
    *) echo "tools/vm/kernels.sh: unknown series $1 (6.12, 6.1 or 5.10)" >&2; exit 2 ;;
  esac
}

# A private apt configuration: the host's own sources are left alone (they may be Ubuntu's, or
# lack bullseye).
apt_dir="$cache/apt"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
apt_options=(
  -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
  -o Debug::NoLocking=1 -o APT::Sandbox::User=root
)
apt_ready=
prepare_apt() {
  [ -n "$apt_ready" ] && return
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  local signed=
  [ -f "$keyring" ] && signed="[signed-by=$keyring] "
  cat >"$apt_dir/sources.list" <<SOURCES
deb ${signed}http://deb.debian.org/debian bookworm main
deb ${signed}http://deb.debian.org/debian-security bookworm-security main
deb ${signed}http://deb.debian.org/debian bullseye main
deb ${signed}http://deb.debian.org/debian-security bullseye-security main
SOURCES
  apt-get "${apt_options[@]}" update -qq
  apt_ready=1
}

# The modules the initramfs loads, with what they depend on, in load order: virtio's PCI
# transport, 9p over virtio, overlayfs.
initramfs_modules=(virtio_pci 9pnet_virtio 9p overlay)

build_initramfs() {
  local root="$1" version="$2" out="$3" staging
  staging="$(mktemp -d)"
  mkdir -p "$staging/bin" "$staging/modules"
  cp /bin/busybox "$staging/bin/busybox"
  cp "$here/init" "$staging/init"
  chmod +x "$staging/init"
  depmod -b "$root" "$version"
  local order=0 module path
  for module in "${initramfs_modules[@]}"; do
    # Built-in modules print "builtin ..." and need nothing.
    while read -r verb path _; do
      [ "$verb" = insmod ] || continue
      local name
      name="$(basename "$path")"
      name="${name%.xz}"
      [ -e "$staging/modules/"*"-$name" ] 2>/dev/null && continue
      order=$((order + 1))
      local target
      target="$staging/modules/$(printf '%02d' "$order")-$name"
      case "$path" in
        *.xz) xz -dc "$path" >"$target" ;;
        *) cp "$path" "$target" ;;
      esac
    done < <(modprobe -d "$root" -S "$version" --show-depends "$module")
  done
  (cd "$staging" && find . | cpio -o -H newc --quiet | gzip -1 >"$out")
  rm -rf "$staging"
}

for s in "${series[@]}"; do
  dir="$cache/$s"
  if [ -f "$dir/vmlinuz" ] && [ -f "$dir/initramfs.gz" ]; then
    continue
  fi
  prepare_apt
  package="$(apt-cache "${apt_options[@]}" pkgnames linux-image- | grep -E "$(pattern "$s")" | sort -V | tail -1)"
  if [ -z "$package" ]; then
    echo "tools/vm/kernels.sh: no package for Linux $s in Debian's archive" >&2
    exit 1
  fi
  echo "tools/vm/kernels.sh: fetching $package" >&2
  rm -rf "$dir"
  mkdir -p "$dir/deb"
  (cd "$dir/deb" && apt-get "${apt_options[@]}" download -qq "$package")
  dpkg-deb -x "$dir/deb/"*.deb "$dir/root"
  version="$(basename "$(ls -d "$dir/root/lib/modules/"*)")"
  build_initramfs "$dir/root" "$version" "$dir/initramfs.gz.new"
  cp "$dir/root/boot/vmlinuz-$version" "$dir/vmlinuz"
  cp "$dir/root/boot/config-$version" "$dir/config"
  echo "$version" >"$dir/version"
  rm -rf "$dir/deb" "$dir/root"
  mv "$dir/initramfs.gz.new" "$dir/initramfs.gz"
done
