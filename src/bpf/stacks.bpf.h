/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* --stack: the user stack at the entry of the functions that ask for it, unwound by the kernel
 * through frame pointers (bpf_get_stackid), with the caller's return address read from the top
 * of the stack, and for kernel events (-E) the kernel stack too; each distinct stack stored once
 * and its id written as the last value of the entry (an item with VALUE_STACK set: see
 * interface.h).
 *
 * The user stack map stores each frame as the build id of the file it lies in and the frame's
 * offset in that file (BPF_F_STACK_BUILD_ID), not as an address: the recorder reads the map
 * when the recording ends, often after the process has gone with its memory map, and
 * symbolizes the frames against the files alone. A frame the kernel cannot place in a file
 * (anonymous memory, a build id not in the page cache) keeps its address instead.
 *
 * The caller: at a function's entry no frame pointer names the caller yet, so the chain starts
 * at the caller's caller. The kernel adds the return address at the top of the stack itself only
 * where the probed instruction is a `push %rbp` or an `endbr64`; everywhere else the caller
 * would be lost. Every probe site of a function leaves the stack pointer as the call left it
 * (src/elf/site.rs), so the word at the stack pointer is the caller's return address: it is
 * read here, placed in its file (the file's device and inode, and the offset), and kept beside
 * the stack ids in `stacks`; the recorder puts it after the traced function's own frame unless
 * the kernel already did. At a system call the word at the user stack pointer is the return
 * address into the C library's wrapper's caller when the wrapper pushed nothing (the usual
 * single-threaded path); it is kept only when it lies in executable file-backed memory.
 *
 * Ids are never reused: without BPF_F_REUSE_STACKID, a new stack whose hash meets another in
 * its bucket gets no id (-EEXIST) rather than evicting the stack an earlier event names; the
 * entry then carries that negative error, which reports count as a stack that was lost.
 * Included by utrace.bpf.c before values.bpf.h. */
#ifndef UTRACE_STACKS_BPF_H
#define UTRACE_STACKS_BPF_H

/* Frames kept per stack; a stack that fills the map's one frame more was cut (the recorder
 * marks it as truncated and drops that frame). */
#define USER_STACK_FRAMES 64
#define STACK_MAP_FRAMES (USER_STACK_FRAMES + 1)
/* VM_EXEC (include/linux/mm.h). */
#define STACK_VM_EXEC 0x4

/* Stack id → its frames. Sized by the loader: one entry when no function asks for stacks. */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_STACK_BUILD_ID);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, STACK_MAP_FRAMES * sizeof(struct bpf_stack_build_id));
} user_stacks SEC(".maps");

/* Kernel stack id → its frames, as addresses (a build-id map refuses kernel stacks). */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, STACK_MAP_FRAMES * sizeof(__u64));
} kernel_stacks SEC(".maps");

/* What makes a stack distinct: its user and kernel stack ids (-1: none), whether a kernel
 * event's program took it, and its caller's return address in one process. */
struct stack_key {
	__s32 user_stack;
	__s32 kernel_stack;
	__u32 tgid;
	__u32 kernel_event;
	__u64 return_address;
};

/* A distinct stack: the id the entries carry, and where its caller's return address lies. */
struct stack {
	__u32 id;
	/* The file's device (the kernel's encoding: major << 20 | minor); 0 with `inode`. */
	__u32 device;
	/* 0 when the address is in no file, or is no return address (then not shown). */
	__u64 inode;
	/* In the file when `inode` is set; else the address itself. */
	__u64 offset;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct stack_key);
	__type(value, struct stack);
} stacks SEC(".maps");

/* The ids each CPU has given so far. Per CPU, as the BPF target of the clang this builds with
 * cannot return the old value of an atomic add (as go.bpf.h numbers goroutines): an id is that
 * count times 1024 plus the CPU (modulo 1024). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} stack_ids_given SEC(".maps");

/* bpf_find_vma's callback: places the return address `s->offset` in the file mapped at `vma`,
 * if that is executable code. */
static long place_return_address(struct task_struct *task, struct vm_area_struct *vma,
				 struct stack *s)
{
	struct file *file = BPF_CORE_READ(vma, vm_file);

	if (!file || !(BPF_CORE_READ(vma, vm_flags) & STACK_VM_EXEC))
		return 0;
	s->inode = BPF_CORE_READ(file, f_inode, i_ino);
	s->device = BPF_CORE_READ(file, f_inode, i_sb, s_dev);
	s->offset = s->offset - BPF_CORE_READ(vma, vm_start) + (BPF_CORE_READ(vma, vm_pgoff) << 12);
	return 0;
}

/* The id of the distinct stack with these stack ids and the return address at user stack
 * pointer `sp`, or a negative error. Never in legacy programs (see compat.bpf.h), which the
 * loader gives no stacks to capture. */
static __always_inline __s64 stack_id(__s64 user_stack, __s64 kernel_stack, bool kernel_event,
				      __u64 sp, const bool legacy)
{
	struct stack_key key = {};
	struct stack new = {}, *found;
	__u32 zero = 0, *given;
	long error;

	if (legacy)
		return -1;
	if (user_stack < 0 && kernel_stack < 0)
		return user_stack;
	key.user_stack = user_stack < 0 ? -1 : user_stack;
	key.kernel_stack = kernel_stack < 0 ? -1 : kernel_stack;
	key.tgid = bpf_get_current_pid_tgid() >> 32;
	key.kernel_event = kernel_event;
	if (bpf_probe_read_user(&key.return_address, sizeof(key.return_address), (void *)sp))
		key.return_address = 0;
	found = bpf_map_lookup_elem(&stacks, &key);
	if (found)
		return found->id;
	new.offset = key.return_address;
	if (key.return_address)
		bpf_find_vma(bpf_get_current_task_btf(), key.return_address, place_return_address,
			     &new, 0);
	given = bpf_map_lookup_elem(&stack_ids_given, &zero);
	if (!given)
		return -1;
	/* A BPF program runs to its end on its CPU: nothing else counts here meanwhile. */
	*given += 1;
	new.id = (*given << 10) | (bpf_get_smp_processor_id() & 1023);
	error = bpf_map_update_elem(&stacks, &key, &new, BPF_NOEXIST);
	if (!error)
		return new.id;
	/* Another CPU put it there first (its id is the one), or the map is full. */
	found = bpf_map_lookup_elem(&stacks, &key);
	return found ? found->id : error;
}

/* The id of the user stack at the probe whose registers are `ctx`, or a negative error. */
static __always_inline __s64 user_stack_id(struct pt_regs *ctx, const bool legacy)
{
	if (!settings.user_stacks || legacy)
		return -1;
	return stack_id(bpf_get_stackid(ctx, &user_stacks, BPF_F_USER_STACK), -1, false,
			PT_REGS_SP(ctx), legacy);
}

/* The id of the user and kernel stacks at a tracepoint whose context is `ctx`, where the user
 * registers are `regs`, or a negative error. */
static __always_inline __s64 kernel_event_stack_id(void *ctx, struct pt_regs *regs,
						    const bool legacy)
{
	__s64 user, kernel;

	if (legacy)
		return -1;
	user = bpf_get_stackid(ctx, &user_stacks, BPF_F_USER_STACK);
	kernel = bpf_get_stackid(ctx, &kernel_stacks, 0);
	return stack_id(user, kernel, true, BPF_CORE_READ(regs, sp), legacy);
}

#endif
