/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Kernel events and USDT probes (-E): each written as the events of a pseudo-function of the
 * plan's function table (src/plan/events.rs), on the thread it happened to, with stack slot 0,
 * so the replayer pairs its exit with its entry by function:
 * - off-CPU time: at a context switch, the entry of `linux:schedule` for the traced thread that
 *   leaves the CPU, its exit for the traced thread that gets it;
 * - time preempted (by default, without -E offcpu): the same, as `linux:preempted`, only for a
 *   thread that leaves the CPU still runnable;
 * - system calls: the entry of `sys_NAME` at sys_enter, its exit at sys_exit with the return
 *   value after the event, as a function's captured return value is (interface.h);
 * - USDT probes: the entry of the probe's function with its arguments after the event, and its
 *   exit right after.
 * The entries of off-CPU time and of system calls that --stack names carry the id of the user
 * and kernel stacks where they happened (stacks.bpf.h). Each program is loaded and attached only
 * when asked. Included by utrace.bpf.c after record_on(). */
#ifndef UTRACE_KERNEL_EVENTS_BPF_H
#define UTRACE_KERNEL_EVENTS_BPF_H

#include <bpf/usdt.bpf.h>

/* The task is dead after this switch: it never comes back (include/linux/sched.h). */
#define TASK_DEAD 0x80

/* System call number → the function id of its `sys_NAME`, 0 for a system call not traced (id 0
 * is always one of the program's functions), with KERNEL_EVENT_STACK set when its entries capture
 * the stacks. Filled by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SYSCALL_NUMBERS);
	__type(key, __u32);
	__type(value, __u32);
} syscall_functions SEC(".maps");

/* Writes an event of `function` for thread `task` (not necessarily the current one) at `now`,
 */
static __always_inline void record_for_task(struct task_struct *task, __u32 function, __u64 now)
{
	__u32 thread = task->pid;
	struct event *e;

	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_lost(thread);
		return;
	}
	e->timestamp_ns = now;
	e->tid = (thread & ((1u << EVENT_TID_BITS) - 1)) |
		 (bpf_get_smp_processor_id() << EVENT_TID_BITS);
	e->function = function;
	e->stack = 0;
	e->pid = task->tgid;
	bpf_ringbuf_submit(e, wakeup_flag());
}

/* A kernel event's entry and the id of the user and kernel stacks that made it, as values.bpf.h
 * writes a stack value. */
struct stacked_entry_record {
	struct event event;
	__s64 stack;
};

/* Writes the entry of kernel event `function` for the current thread at `now`, with the stacks
 * at the tracepoint whose context is `ctx`; the thread's user registers are `regs`. */
static __always_inline void record_with_stacks(void *ctx, struct pt_regs *regs, __u32 function,
					       __u64 now, const bool legacy)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct stacked_entry_record r = {};

	r.stack = kernel_event_stack_id(ctx, regs, legacy);
	fill_event(&r.event, now, function, 0, (__u32)pid_tgid);
	if (bpf_ringbuf_output(&events, &r, sizeof(r), wakeup_flag()))
		count_lost((__u32)pid_tgid);
}

/* The traced threads preempted, off the CPU but runnable, whose return to it ends an interval.
 * A thread left there when the recording stops stays until others push it out. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} preempted_threads SEC(".maps");

/* Whether `prev`, leaving the CPU, stays runnable: preempted in the kernel (`preempt`), or at
 * its return to user space, where schedule() runs with its state still TASK_RUNNING (0), as it
 * does for sched_yield(); a thread that goes to sleep has set another state first. */
static __always_inline bool leaves_runnable(bool preempt, struct task_struct *prev)
{
	return preempt || task_state(prev) == 0;
}

/* A context switch without -E offcpu: an interval of `linux:preempted` opens for `prev` if it
 * stays runnable, and closes for `next` if one was open. */
static __always_inline void preemption_switched(bool preempt, struct task_struct *prev,
						struct task_struct *next)
{
	__u32 function = settings.preempted_function;
	__u64 now = bpf_ktime_get_ns();
	__u32 thread;

	if (recording_in(prev->tgid) && leaves_runnable(preempt, prev)) {
		thread = prev->pid;
		if (!bpf_map_update_elem(&preempted_threads, &thread, &(__u8){1}, BPF_ANY))
			record_for_task(prev, function, now);
	}
	if (recording_in(next->tgid)) {
		thread = next->pid;
		if (!bpf_map_delete_elem(&preempted_threads, &thread))
			record_for_task(next, function | EVENT_EXIT, now);
	}
}

/* A context switch: `prev` leaves the CPU, `next` gets it. The tracepoint runs in prev's
 * context, so neither event can use the current task's ids; prev's stacks are the current
 * ones. Its state comes from the task: the tracepoint's own argument came with Linux 5.18.
 * Without -E offcpu, only the time preempted is recorded. */
static __always_inline int switched(void *ctx, bool preempt, struct task_struct *prev,
				    struct task_struct *next, const bool legacy)
{
	__u32 function = settings.off_cpu_function & ~KERNEL_EVENT_STACK;
	__u64 now;

	if (!settings.off_cpu_function) {
		preemption_switched(preempt, prev, next);
		return 0;
	}
	now = bpf_ktime_get_ns();

	/* A thread that is exiting leaves for good: no interval to open. */
	if (!(task_state(prev) & TASK_DEAD) && recording_in(prev->tgid)) {
		/* Legacy programs capture no stacks, nor have bpf_task_pt_regs (5.15). */
		if (!legacy && (settings.off_cpu_function & KERNEL_EVENT_STACK))
			record_with_stacks(ctx, bpf_task_pt_regs(prev), function, now, legacy);
		else
			record_for_task(prev, function, now);
	}
	if (recording_in(next->tgid))
		record_for_task(next, function | EVENT_EXIT, now);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(off_cpu_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return switched(ctx, preempt, prev, next, false);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(off_cpu_switch_legacy, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	return switched(ctx, preempt, prev, next, true);
}

/* The function id of system call `number`'s pseudo-function (KERNEL_EVENT_STACK set when its entries
 * capture the stacks), 0 when it is not traced. */
static __always_inline __u32 syscall_function(long number)
{
	__u32 key = (__u32)number;
	__u32 *function;

	if (number < 0 || number >= SYSCALL_NUMBERS)
		return 0;
	function = bpf_map_lookup_elem(&syscall_functions, &key);
	return function ? *function : 0;
}

static __always_inline int syscall_entry(void *ctx, struct pt_regs *regs, long number,
					 const bool legacy)
{
	__u32 function = syscall_function(number);
	__u64 now;

	if (!function)
		return 0;
	if (!(function & KERNEL_EVENT_STACK))
		return record(function, 0);
	now = bpf_ktime_get_ns();
	if (!recording_in(bpf_get_current_pid_tgid() >> 32))
		return 0;
	record_with_stacks(ctx, regs, function & ~KERNEL_EVENT_STACK, now, legacy);
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(syscall_entered, struct pt_regs *regs, long number)
{
	return syscall_entry(ctx, regs, number, false);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(syscall_entered_legacy, struct pt_regs *regs, long number)
{
	return syscall_entry(ctx, regs, number, true);
}

/* A system call's exit event and its return value, as values.bpf.h writes a return value. */
struct syscall_exit_record {
	struct event event;
	__s64 returned;
};

SEC("tp_btf/sys_exit")
int BPF_PROG(syscall_exited, struct pt_regs *regs, long returned)
{
	__u32 function = syscall_function(regs->orig_ax) & ~KERNEL_EVENT_STACK;
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct syscall_exit_record *r;

	if (!function || !recording_in(pid_tgid >> 32))
		return 0;
	r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r) {
		count_lost((__u32)pid_tgid);
		return 0;
	}
	fill_event(&r->event, now, function | EVENT_EXIT, 0, (__u32)pid_tgid);
	r->returned = returned;
	bpf_ringbuf_submit(r, wakeup_flag());
	return 0;
}

/* A USDT probe's entry event and its arguments, one 8-byte integer each. */
struct usdt_record {
	struct event event;
	__s64 arguments[USDT_ARGUMENTS_MAX];
};

/* What usdt_argument() reads from and writes into. */
struct usdt_capture {
	struct pt_regs *ctx;
	struct usdt_record *record;
};

/* Reads argument `index` of the USDT probe (a step of repeat(): libbpf's bpf_usdt_arg() verified
 * once, not once per argument, which 6.1's verifier cannot do within its limit). */
static long usdt_argument(__u64 index, void *data)
{
	struct usdt_capture *capture = data;
	__u32 i = index;
	long value = 0;

	asm volatile("" : "+r"(i));
	if (i >= USDT_ARGUMENTS_MAX)
		return 1;
	bpf_usdt_arg(capture->ctx, i, &value);
	capture->record->arguments[i] = value;
	return 0;
}

/* A USDT probe was hit: the cookie holds its function id (libbpf finds the arguments). Never in
 * legacy kernels: without cookies, libbpf finds a probe by its address in a process that runs
 * already. */
SEC("usdt")
int usdt_hit(struct pt_regs *ctx)
{
	__u32 function = (__u32)bpf_usdt_cookie(ctx);
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct usdt_record r = {};
	struct usdt_capture capture = {.ctx = ctx, .record = &r};
	struct event *e;
	long count;

	if (!recording_in(pid_tgid >> 32))
		return 0;
	count = bpf_usdt_arg_cnt(ctx);
	if (count < 0)
		count = 0;
	if (count > USDT_ARGUMENTS_MAX)
		count = USDT_ARGUMENTS_MAX;
	repeat(count, USDT_ARGUMENTS_MAX, usdt_argument, &capture, false);
	fill_event(&r.event, now, function, 0, (__u32)pid_tgid);
	if (bpf_ringbuf_output(&events, &r, sizeof(r.event) + count * sizeof(r.arguments[0]), 0)) {
		count_lost((__u32)pid_tgid);
		return 0;
	}
	/* The exit, at the same time: a point event is a call that takes none. */
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_lost((__u32)pid_tgid);
		return 0;
	}
	fill_event(e, now, function | EVENT_EXIT, 0, (__u32)pid_tgid);
	bpf_ringbuf_submit(e, wakeup_flag());
	return 0;
}

#endif
