/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Kernel functions (-k): each is a pseudo-function of the plan's function table
 * (src/plan/kernel_functions.rs), whose id is the probe's cookie. Its entry and return are
 * written as a system call's are (kernel_events.bpf.h): stack slot 0, paired by function, on the
 * traced thread that ran it, so a call nests under the user function whose system call reached
 * it. Attached with one kprobe_multi link for all (Linux 5.18), or one kprobe and one kretprobe
 * per function: the same code under two section names. Included by utrace.bpf.c after
 * record_on(). */
#ifndef UTRACE_KERNEL_FUNCTIONS_BPF_H
#define UTRACE_KERNEL_FUNCTIONS_BPF_H

/* -K: how deep each thread is in the traced kernel functions, while settings.kernel_depth
 * limits it. A thread that dies inside one leaves its entry behind: least recently used goes. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} kernel_depths SEC(".maps");

/* Whether the current thread's call at this entry (or return) is within -K's depth, counting
 * it in or out. */
static __always_inline bool within_kernel_depth(__u32 thread, bool returning)
{
	__u32 *depth = bpf_map_lookup_elem(&kernel_depths, &thread);
	__u32 outer = depth ? *depth : 0;

	if (returning) {
		/* A return whose entry came before the recording: nothing to count out. */
		if (!outer)
			return true;
		*depth = outer - 1;
		return outer <= settings.kernel_depth;
	}
	if (depth)
		*depth = outer + 1;
	else
		bpf_map_update_elem(&kernel_depths, &thread, &(__u32){1}, BPF_ANY);
	return outer < settings.kernel_depth;
}

/* The cookie is the function's id, with KERNEL_EVENT_STACK set when its entries capture the
 * user and kernel stacks (--stack). */
static __always_inline int kernel_function_hit(struct pt_regs *ctx, bool returning)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 cookie = (__u32)bpf_get_attach_cookie(ctx);
	__u32 function = cookie & ~KERNEL_EVENT_STACK;
	struct task_struct *task;

	if (!recording_in(pid_tgid >> 32))
		return 0;
	if (settings.kernel_depth && !within_kernel_depth((__u32)pid_tgid, returning))
		return 0;
	/* The values (-A, -R, -a): the kprobe's registers are the function's at its entry, and
	 * rax at its return. An entry that captures the stacks has no arguments (planned so). */
	if (returning)
		return record_values_of(ctx, function | EVENT_EXIT, 0, true, false, true);
	if (!(cookie & KERNEL_EVENT_STACK))
		return record_values_of(ctx, function, 0, false, false, true);
	task = bpf_get_current_task_btf();
	record_with_stacks(ctx, bpf_task_pt_regs(task), function, bpf_ktime_get_ns(), false);
	return 0;
}

SEC("kprobe.multi")
int kernel_function_entered_multi(struct pt_regs *ctx)
{
	return kernel_function_hit(ctx, false);
}

SEC("kretprobe.multi")
int kernel_function_returned_multi(struct pt_regs *ctx)
{
	return kernel_function_hit(ctx, true);
}

SEC("kprobe")
int kernel_function_entered(struct pt_regs *ctx)
{
	return kernel_function_hit(ctx, false);
}

SEC("kretprobe")
int kernel_function_returned(struct pt_regs *ctx)
{
	return kernel_function_hit(ctx, true);
}

#endif
