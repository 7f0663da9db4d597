/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Go programs (settings.go_goroutines): their calls are paired by goroutine and the distance of
 * their return-address slot from the top of the goroutine's stack, not by thread and slot. Go
 * copies a goroutine's stack when it grows, which moves the slot between a call's entry and its
 * exit, and moves goroutines between threads. Go's ABI
 * (ABIInternal, amd64) keeps the running goroutine's `g` in r14, at a function's entry and at its
 * `ret` alike. The event's thread field then holds a number for that `g`, given the first time
 * it is seen: Go reuses the `g` of an ended goroutine, so the numbers stay as few as the
 * goroutines that ever ran at once. Included by utrace.bpf.c after record_on() and values.bpf.h. */
#ifndef UTRACE_GO_BPF_H
#define UTRACE_GO_BPF_H

/* The `g` of a goroutine → its number. LRU: a program with more goroutines than this gives a new
 * number to one that was evicted, which splits its calls as if they ran on two threads. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u32);
} goroutine_numbers SEC(".maps");

/* The numbers each CPU has given so far. Per CPU, as the BPF target of the clang this builds
 * with cannot return the old value of an atomic add: a number is that count times 64 plus the
 * CPU (modulo 64), 65,536 numbers per CPU before they come round again. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} goroutines_numbered SEC(".maps");

/* Where goroutines are named by their ids (settings.go_goid_offset), the ids take the low bits of
 * an event's thread field, and the numbers given to the goroutines without one (each thread's
 * `g0` and signal goroutine, whose id is 0) have this bit set. */
#define GIVEN_GOROUTINE_NUMBER (1u << (EVENT_TID_BITS - 1))

/* The number of the goroutine whose `g` is `g`, in the EVENT_TID_BITS an event's thread holds:
 * its id where the program's DWARF says where `g` keeps it (read at each event: Go gives a new id
 * to a `g` it reuses), else a number given the first time `g` is seen. */
static __always_inline __u32 goroutine_number(__u64 g)
{
	__u32 zero = 0, number, *known, *given;
	__u64 goid = 0;

	if (settings.go_goid_offset &&
	    !bpf_probe_read_user(&goid, sizeof(goid), (void *)(g + settings.go_goid_offset)) && goid)
		return goid & (GIVEN_GOROUTINE_NUMBER - 1);
	known = bpf_map_lookup_elem(&goroutine_numbers, &g);
	if (known)
		return *known;
	given = bpf_map_lookup_elem(&goroutines_numbered, &zero);
	if (!given)
		return 0;
	/* A BPF program runs to its end on its CPU: nothing else counts here meanwhile. */
	*given += 1;
	number = ((*given << 6) | (bpf_get_smp_processor_id() & 63)) & ((1u << EVENT_TID_BITS) - 1);
	if (settings.go_goid_offset)
		number |= GIVEN_GOROUTINE_NUMBER;
	/* Another CPU may have numbered the same `g` at the same time: its number wins. */
	if (bpf_map_update_elem(&goroutine_numbers, &g, &number, BPF_NOEXIST) != 0) {
		known = bpf_map_lookup_elem(&goroutine_numbers, &g);
		if (known)
			return *known;
	}
	return number;
}

/* `g.stack.hi`'s offset in Go's `g` (after `stack.lo`), stable since Go 1.0. */
#define GO_STACK_HI_OFFSET 8

/* The return-address slot `slot` of a call of the goroutine whose `g` is `g`, as its distance
 * below the top of the goroutine's stack (`g.stack.hi`), negated: Go copies a stack to grow it
 * with every frame at the same distance from the top, so the value stays the same from the
 * call's entry to its exit, and a deeper call has a lower one, as with plain addresses. 0 (pair
 * by function) when the stack's top cannot be read or the slot is not below it. */
static __always_inline __u32 goroutine_slot(__u64 g, __u64 slot)
{
	__u64 hi = 0;

	if (bpf_probe_read_user(&hi, sizeof(hi), (void *)(g + GO_STACK_HI_OFFSET)))
		return 0;
	if (slot >= hi || hi - slot >= (1ull << 31))
		return 0;
	return (__u32)(slot - hi);
}

/* An entry or exit event of a traced function at a probe whose registers are `ctx` and cookie
 * `cookie`: paired by `slot` (see record()), or in a Go program by goroutine and the slot's
 * distance from the top of the goroutine's stack. A Go program's C code (cgo's) has no `g` in
 * r14: its calls get a number per thread (a key no `g`, a user address, can be), paired by
 * slot as on any thread's stack. */
static __always_inline int record_call(struct pt_regs *ctx, __u64 cookie, __u32 function,
				       __u64 slot, const bool legacy)
{
	if (!settings.go_goroutines)
		return record_values(ctx, function, slot, true, legacy);
	if (cookie & COOKIE_NOT_GO)
		return record_on(function, slot,
				 goroutine_number((__u32)bpf_get_current_pid_tgid() | (1ull << 63)));
	return record_on(function, goroutine_slot(ctx->r14, slot), goroutine_number(ctx->r14));
}

#endif
