#!/bin/sh
# Runs in the guest as its first process, from the run directory tools/vm/run.sh made: mounts
# what a Linux system has and tests need, runs the command in the directory it was started
# from, writes its exit status, and powers the guest off. A shell waiting for its foreground
# command reaps every orphan too (waitpid(-1)), as an init must.
run="$(dirname "$0")"
mount -t tmpfs tmpfs /run 2>/dev/null
# A fresh /tmp, unless the command runs from there (a clone CI made under /tmp): then the host's,
# through the root's overlay, where the guest's writes stay in the guest.
case "$(cat "$run/cwd")/" in
  /tmp/*) ;;
  *) mount -t tmpfs tmpfs /tmp ;;
esac
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
ip link set lo up 2>/dev/null || /bin/busybox ip link set lo up
hostname utrace-vm
# The directories shared writable (run.sh --share), in order: tags share0, share1... Cached as
# the root is (the host leaves them alone meanwhile; the sync below writes the guest's changes
# back): programs and test binaries run from there at the root's speed.
if [ -f "$run/shares" ]; then
  i=0
  while read -r dir; do
    mkdir -p "$dir"
    mount -t 9p -o trans=virtio,version=9p2000.L,cache=loose,msize=512000 "share$i" "$dir"
    i=$((i + 1))
  done <"$run/shares"
fi
# In a shell of its own: whatever happens there, the guest powers off (the first process must
# never exit).
(
  . "$run/environment"
  cd "$(cat "$run/cwd")" || exit 1
  echo "vm: Linux $(uname -r), $(nproc) CPUs: $(cat "$run/command")"
  /bin/sh "$run/command"
  echo $? >"$run/status"
)
sync
/bin/busybox poweroff -f
