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
	/* The bit of a kernel event's function id (a `syscall_functions` value, the settings'
	 * `off_cpu_function`) set when its entries capture the user and kernel stacks (--stack: see
	 * stacks.bpf.h); never set in an event. */
	KERNEL_EVENT_STACK_BIT = 30,
};

#define EVENT_EXIT (1u << EVENT_EXIT_BIT)
#define KERNEL_EVENT_STACK (1u << KERNEL_EVENT_STACK_BIT)

/* `function` values of the ring buffer's notes, which are never function ids. */
enum special_function {
	/* A dlopen or dlclose returned. */
	EVENT_LIBRARIES_CHANGED = 0x7fffffff,
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
	/* Never written by a program: the recorder's piece of a call's captured values (up to 8
	 * bytes in `timestamp_ns`, their count in `stack`), which goes before the call's event in
	 * the trace. Reserved here so that no note takes it. */
	EVENT_VALUES = 0x7ffffffb,
};

/* Values a probe captures (-A, -R), beside the event: a record longer than `struct event` holds
 * them after it, one item after another in the order of the function's `struct value_spec`:
 * - an integer: its 8 bytes (little-endian);
 * - a string: the pointer's 8 bytes, then a signed 16-bit count of the bytes read (without the
 *   terminating NUL; a negative errno when the pointer could not be read), then those bytes.
 * An entry holds the arguments asked for, an exit the return value; a record without values is
 * a bare event. */
enum value_bits {
	/* Items per function at most. */
	VALUES_MAX = 16,
	/* Bits of an item that say where the value is: 0 for the return value, N for argument N
	 * (from 1: 1-6 in registers, 7 and up on the stack as at the entry). */
	VALUE_SOURCE_MASK = 0x3f,
	/* Set in an item that is the id of the user stack at the entry (--stack, see stacks.bpf.h):
	 * its 8 bytes, the id or a negative error. Always the last item of an entry. */
	VALUE_STACK_BIT = 6,
	/* Set in an item whose value points to a C string to read. */
	VALUE_STRING_BIT = 7,
	/* The most bytes of values after an event (a power of two). */
	VALUE_PAYLOAD_MAX = 8192,
	/* The longest string read: VALUES_MAX strings and their headers fit the payload. */
	VALUE_STRING_MAX = 500,
};

#define VALUE_RETURN 0
#define VALUE_STRING (1u << VALUE_STRING_BIT)
#define VALUE_STACK (1u << VALUE_STACK_BIT)

/* What a function's probes capture: `count` items (source | VALUE_STRING). */
struct value_spec {
	__u8 items[VALUES_MAX];
	__u32 count;
	__u32 reserved;
};

/* Where a string lies that the probe could not read (its page not in memory yet: a probe may not
 * fault), found by values.bpf.h in the process's memory map for the recorder, which reads it
 * from there (src/record/strings.rs). Only where the kernel has bpf_find_vma. */
enum string_place_kind {
	/* In a file mapping that nothing has written to: the file holds what the process sees, at
	 * `offset` of the file `device` (major << 20 | minor) and `inode`. */
	STRING_IN_FILE = 1,
	/* In memory the process may have written: only the process holds it. */
	STRING_IN_MEMORY = 2,
	/* No mapping holds the address. */
	STRING_NOT_MAPPED = 3,
};

struct string_place_key {
	__u32 tgid;
	__u32 reserved;
	__u64 address;
};

struct string_place {
	__u32 kind;
	__u32 device;
	__u64 inode;
	__u64 offset;
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
	/* function_exit_site: the site is a tail jump of a function that captures its return
	 * value, which the callee has yet to compute: nothing is captured there. */
	COOKIE_NO_RETURN_VALUE_BIT = 34,
	/* function_entry_legacy: the function's return is probed by function_exit_legacy, which
	 * finds the function's cookie where the entry left it (see compat.bpf.h). */
	COOKIE_RETURN_PROBED_BIT = 35,
	/* function_entry, function_exit_site: in a Go program, the function is not Go code (cgo's C
	 * code, a PLT stub): r14 holds no goroutine's `g`, its calls pair by thread (go.bpf.h). */
	COOKIE_NOT_GO_BIT = 36,
	/* plt_call: the stub's virtual address in the executable fills the high 32 bits;
	 * library_plt_call: the stub's file offset in its library; got_call: the GOT slot's
	 * virtual address in the executable. */
	COOKIE_ROUTE_SHIFT = 32,
	/* Every program but the legacy ones: which generation of the function's links this probe
	 * belongs to (see current_link in utrace.bpf.c). Routes stay below it. */
	COOKIE_GENERATION_BIT = 63,
};

#define COOKIE_ALSO_EXIT (1ull << COOKIE_ALSO_EXIT_BIT)
#define COOKIE_AFTER_RETURN (1ull << COOKIE_AFTER_RETURN_BIT)
#define COOKIE_NO_RETURN_VALUE (1ull << COOKIE_NO_RETURN_VALUE_BIT)
#define COOKIE_RETURN_PROBED (1ull << COOKIE_RETURN_PROBED_BIT)
#define COOKIE_NOT_GO (1ull << COOKIE_NOT_GO_BIT)
#define COOKIE_ROUTE_MASK ((1ull << (COOKIE_GENERATION_BIT - COOKIE_ROUTE_SHIFT)) - 1)

/* Where a probe is, for the legacy programs, which get no cookie (compat.bpf.h): the inode of its
 * file and its offset there. */
struct site_key {
	__u64 inode;
	__u64 offset;
};

/* Set by the loader before the programs are loaded (`const volatile struct settings settings`),
 * constant for the verifier, which prunes what a setting turns off. No padding, so the Rust
 * type generated from it has every field public and is written in one expression. */
struct settings {
	/* The process whose threads are traced. */
	__u32 tgid;
	/* Count nothing until the target has exec'ed: a command utrace started is, before that, a
	 * copy of utrace running utrace's own libraries. */
	bool wait_for_exec;
	/* Stop the process at a dlopen's or dlclose's return (a command utrace started), so the
	 * recorder probes a new library before its functions run, and releases the probes of a
	 * closed one before it can be opened again. */
	bool stop_at_dlopen_dlclose;
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
	/* In a Go program, the offset of `goid` in the runtime's `g`, from its DWARF: goroutines
	 * are named by their ids (see go.bpf.h); 0 where it is not known. */
	__u64 go_goid_offset;
	/* Non-zero when functions may capture values: probes look up their `struct value_spec`
	 * (0: none looks, and the verifier prunes the code that would). */
	__u32 value_functions;
	/* The most bytes of a string value read, the NUL not counted (at most VALUE_STRING_MAX; one
	 * more is read to tell a string that was cut). */
	__u32 string_size;
	/* Non-zero when some functions capture the user stack at their entry (--stack: see
	 * stacks.bpf.h). 64 bits, so the struct has no padding. */
	__u64 user_stacks;
	/* -E offcpu: the function id of `linux:schedule`, whose calls are a traced thread's time off
	 * the CPU (kernel_events.bpf.h). */
	__u32 off_cpu_function;
	/* -K: the deepest kernel function recorded, 1 for those a system call reaches first among
	 * the traced ones (kernel_functions.bpf.h); 0: every depth. */
	__u32 kernel_depth;
	/* Without -E offcpu: the function id of `linux:preempted`, whose calls are the intervals a
	 * traced thread spent preempted, off the CPU but runnable (kernel_events.bpf.h); 0: none. */
	__u32 preempted_function;
	/* --budget: the links of the functions planned at start may be replaced, and
	 * link_generations says which records each function (utrace.bpf.c). Without it, every
	 * probe records, and the check is left out when the programs are verified. */
	__u32 replaceable_links;
};

/* Kernel events and USDT probes (-E, kernel_events.bpf.h). */
enum kernel_event_bits {
	/* System call numbers below this can be traced: the size of the map of their ids. */
	SYSCALL_NUMBERS = 512,
	/* The most arguments of a USDT probe captured (<sys/sdt.h> passes at most 12). */
	USDT_ARGUMENTS_MAX = 12,
};

/* A traced library whose PLT calls are probed where they land (library_plt_call): its file's
 * inode, as the recorder found it, and the runtime address of its file offset 0 in its code
 * mapping, learned at the first call through one of its stubs (0 until then). */
struct library_code {
	__u64 inode;
	__u64 base;
};

enum library_code_bits {
	/* Libraries whose PLT calls land, at most. */
	LIBRARY_SLOTS = 64,
};

/* Not used by the programs: one object of each type above that no global holds, so that the
 * types reach the BTF and the skeleton's generated Rust types. */
struct interface_types {
	struct event event;
	enum event_bits event_bits;
	enum special_function special_function;
	enum cookie_bits cookie_bits;
	enum value_bits value_bits;
	struct value_spec value_spec;
	enum string_place_kind string_place_kind;
	struct string_place_key string_place_key;
	struct string_place string_place;
	enum kernel_event_bits kernel_event_bits;
	struct library_code library_code;
	enum library_code_bits library_code_bits;
	struct site_key site_key;
};

#endif
