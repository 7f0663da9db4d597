// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Entry and exit probes for every traced function. Each probe carries its function id as the
 * BPF cookie and writes one 24-byte event into the ring buffer. An exit is seen either by a
 * uretprobe or, where that would break C++ exception unwinding, by a plain uprobe on each
 * instruction that leaves the function (src/elf/returns.rs). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "event.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by the loader before the programs are loaded. */
const volatile __u32 target_tgid = 0;
/* The consumer is woken only once this much data waits; otherwise it polls on a timer, so a hit
 * costs no wake-up. */
const volatile __u64 wakeup_bytes = 1 << 20;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	/* Resized by the loader (--buffer-size). */
	__uint(max_entries, 16 << 20);
} events SEC(".maps");

/* Set for a command utrace starts: its probes count only once it has exec'ed, since before
 * that the child is a copy of utrace running utrace's own libraries. */
const volatile bool wait_for_exec = false;

/* Set when the recorder can stop the process at a dlopen's return (a command it started): it
 * then probes the new library and lets the process go on before the library's functions run. */
const volatile bool stop_on_dlopen = false;

/* Events that found the ring buffer full. */
__u64 lost_events = 0;
/* Whether the target has exec'ed (see wait_for_exec). */
bool exec_seen = false;
/* Set by the recorder once every link is attached and cleared before the first is detached: links
 * come and go one at a time, and a call whose entry and return probes were not both in place
 * would give an exit without an entry. */
bool recording = false;

#include "shadow.bpf.h"

/* A raw tracepoint: attached by name, with no need for tracefs to be mounted. */
SEC("raw_tp/sched_process_exec")
int target_exec(void *ctx)
{
	if ((bpf_get_current_pid_tgid() >> 32) == target_tgid)
		exec_seen = true;
	return 0;
}

/* Set in an entry probe's cookie when the entry instruction is also an exit site (a function
 * that is only `ret`): one probe, two events, in the order they happen. */
#define COOKIE_ALSO_EXIT (1ull << 32)

static __always_inline int record(__u32 function, __u64 stack)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct event *e;

	/* The link's pid filter decides where breakpoints go, but another tracer's probe on the same
	 * file runs our program too: check the process ourselves. */
	if ((pid_tgid >> 32) != target_tgid)
		return 0;
	if (!recording || (wait_for_exec && !exec_seen))
		return 0;

	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&lost_events, 1);
		return 0;
	}
	e->timestamp_ns = now;
	e->tid = ((__u32)pid_tgid & ((1u << EVENT_TID_BITS) - 1)) |
		 (bpf_get_smp_processor_id() << EVENT_TID_BITS);
	e->function = function;
	e->stack = (__u32)stack;
	e->pid = pid_tgid >> 32;

	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes)
		bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	else
		bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

/* At the return of dlopen: tells the recorder a library may have been mapped. */
SEC("uretprobe.multi")
int library_loaded(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct event *e;

	if ((pid_tgid >> 32) != target_tgid || !recording)
		return 0;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		/* No stop without the event: nobody would know to let the process go on. */
		__sync_fetch_and_add(&lost_events, 1);
		return 0;
	}
	e->timestamp_ns = bpf_ktime_get_ns();
	e->tid = (__u32)pid_tgid & ((1u << EVENT_TID_BITS) - 1);
	e->function = EVENT_LIBRARY_LOADED;
	e->stack = 0;
	e->pid = pid_tgid >> 32;
	/* The stop before the recorder can see the event: its continue must come after. */
	if (stop_on_dlopen)
		bpf_send_signal(19 /* SIGSTOP */);
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	return 0;
}

SEC("uprobe.multi")
int function_entry(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	/* At the entry (or a site before any stack change) sp points at the return address. */
	__u64 slot = PT_REGS_SP(ctx);

	shadow_entered(slot);
	record((__u32)cookie, slot);
	if (cookie & COOKIE_ALSO_EXIT)
		record((__u32)cookie | EVENT_EXIT, slot);
	return 0;
}

/* On a `ret` or a tail jump of the function: nothing on the stack changes. */
SEC("uprobe.multi")
int function_exit_site(struct pt_regs *ctx)
{
	shadow_left(PT_REGS_SP(ctx));
	return record((__u32)bpf_get_attach_cookie(ctx) | EVENT_EXIT, PT_REGS_SP(ctx));
}

SEC("uretprobe.multi")
int function_exit(struct pt_regs *ctx)
{
	/* The `ret` has popped the return address: its slot is just below sp. */
	__u64 slot = PT_REGS_SP(ctx) - 8;

	shadow_left(slot);
	return record((__u32)bpf_get_attach_cookie(ctx) | EVENT_EXIT, slot);
}
