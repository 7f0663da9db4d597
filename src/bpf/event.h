/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The event that the BPF programs write into the ring buffer. src/event.rs mirrors this layout
 * and asserts its size; change both together. */
#ifndef UTRACE_EVENT_H
#define UTRACE_EVENT_H

/* Set in `function` on events written at a function's return. */
#define EVENT_EXIT (1u << 31)
#define EVENT_TID_BITS 22
/* `function` of the event that says a dlopen returned: never a function id. */
#define EVENT_LIBRARY_LOADED 0x7fffffffu

struct event {
	/* bpf_ktime_get_ns(): CLOCK_MONOTONIC, in nanoseconds. */
	__u64 timestamp_ns;
	/* Kernel thread id (the pid of the thread) in the low EVENT_TID_BITS bits, the CPU the
	 * event happened on (modulo 1024) in the bits above: pid_max is at most 2^22. */
	__u32 tid;
	/* Function id (index into the plan's function table) | EVENT_EXIT on return. */
	__u32 function;
};

#endif
