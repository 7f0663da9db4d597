/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* What the BPF programs and the recorder share, defined here and nowhere else: the event the
 * programs write into the ring buffer, the special function ids of its notes, the bits of a
 * probe's cookie, and the configuration the loader sets. The recorder takes each from the
 * skeleton's Rust types, which libbpf-cargo generates from this object's BTF
 * (src/probe/interface.rs checks its own `Event` against `struct event` field by field). */
#ifndef UTRACE_INTERFACE_H
#define UTRACE_INTERFACE_H

/* The layout of `struct event`'s fields. Bit positions, not masks: the BTF of an enum holds 32-bit
 * values only (clang before 15). */
enum event_bits {
	/* Bits of `tid` that hold the thread id: pid_max is at most 2^22, which leaves 10 bits
	 * for the CPU. */
	EVENT_TID_BITS = 22,
	/* The bit of `function` set on events written at a function's return. */
	EVENT_EXIT_BIT = 31,
};

#define EVENT_EXIT (1u << EVENT_EXIT_BIT)

/* `function` values of the ring buffer's notes, which are never function ids. */
enum special_function {
	/* A dlopen returned. */
	EVENT_LIBRARY_LOADED = 0x7fffffff,
	/* A followed process forked a new one (--follow): `pid` is the child, stopped until the
	 * recorder has probed it; `stack` is the parent. */
	EVENT_PROCESS_FORKED = 0x7ffffffe,
	/* A followed process exec'ed (--follow): it is stopped until the recorder has probed the new
	 * program. */
	EVENT_PROCESS_EXECED = 0x7ffffffd,
	/* The unwinder handed control back to the thread (a catch, a cleanup: shadow.bpf.h): the
	 * frames whose return-address slot lies below `stack` (low 32 bits of the landing's stack
	 * pointer) were skipped and will never return. Comes before the event that found it. */
	EVENT_UNWOUND = 0x7ffffffc,
};

/* The 24-byte event. */
struct event {
	/* bpf_ktime_get_ns(): CLOCK_MONOTONIC, in nanoseconds. */
	__u64 timestamp_ns;
	/* Kernel thread id (the pid of the thread) in the low EVENT_TID_BITS bits, the CPU the
	 * event happened on (modulo 1024) in the bits above. */
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

/* A probe's cookie: the function id in the low 32 bits, and above them, per program: */
enum cookie_bits {
	/* function_entry: the entry instruction is also an exit site (a function that is only
	 * `ret`): one probe, two events, in the order they happen. Two probes on one instruction
	 * would run in an order the kernel does not promise. */
	COOKIE_ALSO_EXIT_BIT = 32,
	/* function_exit_site: the site is the instruction after a call of a PLT stub: the return
	 * address has been popped, its slot is just below sp. */
	COOKIE_AFTER_RETURN_BIT = 33,
	/* plt_call: the stub's virtual address in the executable fills the high 32 bits. */
	COOKIE_STUB_SHIFT = 32,
};

#define COOKIE_ALSO_EXIT (1ull << COOKIE_ALSO_EXIT_BIT)
#define COOKIE_AFTER_RETURN (1ull << COOKIE_AFTER_RETURN_BIT)

/* Set by the loader before the programs are loaded (`const volatile struct settings settings`),
 * constant for the verifier, which prunes what a setting turns off. No padding, so the Rust
 * type generated from it has every field public and is written in one expression. */
struct settings {
	/* The process whose threads are traced. */
	__u32 tgid;
	/* Count nothing until the target has exec'ed: a command utrace started is, before that, a
	 * copy of utrace running utrace's own libraries. */
	bool wait_for_exec;
	/* Stop the process at a dlopen's return (a command utrace started), so the recorder probes
	 * the new library before its functions run. */
	bool stop_on_dlopen;
	/* --follow: trace the processes the target forks, and those they fork. */
	bool follow;
	/* Keep the shadow stack for the unwinder (shadow.bpf.h): the program maps one. */
	bool unwind_shadow;
	/* The consumer is woken only once this much data waits; otherwise it polls on a timer, so
	 * a hit costs no wake-up. */
	__u64 wakeup_bytes;
	/* The lowest virtual address of the executable's code segments in its file: with the
	 * kernel's mm->start_code (where that code was loaded), the executable's load bias. */
	__u64 executable_code_vaddr;
	/* The recorder's process id: its exit stops the recording (process_exit). 64 bits, so the
	 * struct has no padding. */
	__u64 recorder_tgid;
	/* Non-zero for a Go program: entries and exits are paired by goroutine (see go.bpf.h). 64 bits, so the struct has no padding. */
	__u64 go_goroutines;
};

/* Not used by the programs: one object of each type above that no global holds, so that the
 * types reach the BTF and the skeleton's generated Rust types. */
struct interface_types {
	struct event event;
	enum event_bits event_bits;
	enum special_function special_function;
	enum cookie_bits cookie_bits;
};

#endif
