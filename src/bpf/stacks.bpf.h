/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* --stack: the user stack at the entry of the functions that ask for it, unwound by the kernel
 * through frame pointers (bpf_get_stackid), stored once per distinct stack in a stack map, and
 * its id written as the last value of the entry (an item with VALUE_STACK set: see interface.h).
 *
 * The map stores each frame as the build id of the file it lies in and the frame's offset in
 * that file (BPF_F_STACK_BUILD_ID), not as an address: the recorder reads the map when the
 * recording ends, often after the process has gone with its memory map, and symbolizes the
 * frames against the files alone. A frame the kernel cannot place in a file (anonymous memory,
 * a build id not in the page cache) keeps its address instead.
 *
 * Ids are never reused: without BPF_F_REUSE_STACKID, a new stack whose hash meets another in
 * its bucket gets no id (-EEXIST) rather than evicting the stack an earlier event names; the
 * entry then carries that negative error, which reports count as a stack that was lost.
 * Included by utrace.bpf.c before values.bpf.h. */
#ifndef UTRACE_STACKS_BPF_H
#define UTRACE_STACKS_BPF_H

/* Frames kept per stack; the outermost beyond these are cut. */
#define USER_STACK_FRAMES 64

/* Stack id → its frames. Sized by the loader: one entry when no function asks for stacks. */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_STACK_BUILD_ID);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, USER_STACK_FRAMES * sizeof(struct bpf_stack_build_id));
} user_stacks SEC(".maps");

/* The id of the user stack at the probe whose registers are `ctx`, or a negative error. At a
 * function's entry (a `push %rbp` or an `endbr64`) the kernel also takes the caller's return
 * address from the top of the stack, where no frame pointer names it yet. */
static __always_inline __s64 user_stack_id(struct pt_regs *ctx)
{
	if (!settings.user_stacks)
		return -1;
	return bpf_get_stackid(ctx, &user_stacks, BPF_F_USER_STACK);
}

#endif
