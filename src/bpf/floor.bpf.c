// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The floor of the benchmark (tools/bench.sh): the least a uprobe_multi probe can do, count its
 * hits in a per-CPU counter. What a traced call costs above this is utrace's own doing. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Hits of the entry probe (key 0) and of the return probe (key 1), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} hits SEC(".maps");

static __always_inline int count(__u32 key)
{
	__u64 *counter = bpf_map_lookup_elem(&hits, &key);

	if (counter)
		*counter += 1;
	return 0;
}

SEC("uprobe.multi")
int floor_entry(void *ctx)
{
	return count(0);
}

SEC("uretprobe.multi")
int floor_return(void *ctx)
{
	return count(1);
}
