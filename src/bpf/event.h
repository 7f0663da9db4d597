/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The 24-byte event that the BPF programs write into the ring buffer. src/event.rs mirrors this layout
 * and asserts its size; change both together. */
#ifndef UTRACE_EVENT_H
#define UTRACE_EVENT_H

/* Set in `function` on events written at a function's return. */
#define EVENT_EXIT (1u << 31)
#define EVENT_TID_BITS 22
/* `function` of the event that says a dlopen returned: never a function id. */
#define EVENT_LIBRARY_LOADED 0x7fffffffu
/* `function` of the event that says a followed process forked a new one (--follow): `pid` is
 * the child, stopped until the recorder has probed it; `stack` is the parent. */
#define EVENT_PROCESS_FORKED 0x7ffffffeu
/* `function` of the event that says a followed process exec'ed (--follow): it is stopped until
 * the recorder has probed the new program. */
#define EVENT_PROCESS_EXECED 0x7ffffffdu

struct event {
	/* bpf_ktime_get_ns(): CLOCK_MONOTONIC, in nanoseconds. */
	__u64 timestamp_ns;
	/* Kernel thread id (the pid of the thread) in the low EVENT_TID_BITS bits, the CPU the
	 * event happened on (modulo 1024) in the bits above: pid_max is at most 2^22. */
	__u32 tid;
	/* Function id (index into the plan's function table) | EVENT_EXIT on return. */
	__u32 function;
	/* Low 32 bits of the address of the call's return-address slot (the stack pointer at
	 * entry): an exit carries the same value as its entry, which pairs them even when other
	 * exits were never seen (longjmp, exceptions, the kernel's uretprobe depth limit). */
	__u32 stack;
	/* Process id (tgid) of the thread. */
	__u32 pid;
};

#endif
