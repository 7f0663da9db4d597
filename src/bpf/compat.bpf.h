/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* What differs between the kernels utrace loads on (5.10 and up), in one place.
 *
 * Each program that needs something a kernel before 5.17 lacks comes in two variants built from
 * one always-inlined body with a constant `legacy` argument: the current one, and the legacy one
 * (its name ends in `_legacy`), which the loader picks where the kernel has no BPF cookies for
 * uprobes (5.15) or no bpf_loop and bpf_find_vma (5.17), as Debian 11's 5.10. The compiler
 * removes from each variant what the other uses, which matters: a kernel refuses at load a
 * program that names a callback (bpf_loop's, bpf_find_vma's), even where the verifier would never
 * reach it. What a legacy program does instead:
 * - the function id and bits of a probe come from the address it was hit at (legacy_cookie)
 *   rather than from the cookie, and those of a return probe from its entry (return_cookie);
 * - loops are bounded loops, verified one iteration after another (slower to load);
 * - the current task is read with probe reads, not through BTF pointers (5.11);
 * - no user stacks (--stack: it places the caller with bpf_find_vma).
 * Kernels from 5.17 lacking a newer feature get the current programs, each feature checked where
 * it is used (CO-RE existence checks, weak kfuncs), so the verifier prunes what they lack. */
#ifndef UTRACE_COMPAT_BPF_H
#define UTRACE_COMPAT_BPF_H

/* Calls `step(i, data)` for each i from 0 below `count` (at most `max`, a constant) until it
 * returns non-zero, in the form the kernel verifies fastest: open-coded iterators (Linux 6.4),
 * bpf_loop (5.17: its callback is verified once), else, in legacy programs, a bounded loop (each
 * iteration verified on its own). */
static __always_inline void repeat(__u32 count, __u32 max, long (*step)(__u64, void *), void *data,
				   const bool legacy)
{
	int i;

	if (legacy) {
		_Pragma("clang loop unroll(disable)") for (i = 0; i < max && i < count; i++)
		{
			if (step(i, data))
				break;
		}
	} else if (bpf_core_type_exists(struct bpf_iter_num)) {
		bpf_for(i, 0, count < max ? count : max)
		{
			if (step(i, data))
				break;
		}
	} else {
		bpf_loop(count < max ? count : max, step, data, 0);
	}
}

/* The fields legacy programs read that newer kernels renamed or dropped: the tree of a process's
 * memory areas before the maple tree (Linux 6.1), and a task's state before `__state` (5.14). */
struct vm_area_struct___legacy {
	unsigned long vm_start;
	unsigned long vm_end;
	struct rb_node vm_rb;
	unsigned long vm_pgoff;
	struct file *vm_file;
} __attribute__((preserve_access_index));

struct mm_struct___legacy {
	struct rb_root mm_rb;
} __attribute__((preserve_access_index));

struct task_struct___legacy {
	long state;
} __attribute__((preserve_access_index));

/* A task's state (TASK_DEAD and co.), under either name. */
static __always_inline unsigned int task_state(struct task_struct *task)
{
	if (bpf_core_field_exists(task->__state))
		return BPF_CORE_READ(task, __state);
	return BPF_CORE_READ((struct task_struct___legacy *)task, state);
}

/* The current task's memory: its address (which changes at an exec) and, for a uprobe program,
 * the page of its uretprobe trampoline. */
static __always_inline struct mm_struct *current_mm(const bool legacy)
{
	if (legacy)
		return BPF_CORE_READ((struct task_struct *)bpf_get_current_task(), mm);
	return bpf_get_current_task_btf()->mm;
}

/* Legacy programs: the function id and bits of the probe hit at `address`.
 *
 * The recorder fills site_cookies with the cookie of every probe, by the inode of its file and its
 * offset there; the program finds the memory area holding the address (a walk down the
 * process's tree of areas), and so the file and the offset, once per address and process: then
 * address_cookies has it. A process that execs gets a new memory map (mm), which keeps old
 * addresses from being taken for new ones. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	/* Entries are allocated as the recorder adds them: only legacy recordings add any. */
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 20);
	__type(key, struct site_key);
	__type(value, __u64);
} site_cookies SEC(".maps");

struct address_key {
	__u32 tgid;
	__u32 unused;
	__u64 address;
};

struct address_cookie {
	__u64 cookie;
	__u64 mm;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, struct address_key);
	__type(value, struct address_cookie);
} address_cookies SEC(".maps");

/* Hits a legacy program could not tie to a probe (an address in no file, or not one the
 * recorder probed; a return whose entry was not seen): not recorded. */
__u64 unidentified_hits = 0;

/* The deepest tree of memory areas walked: a red-black tree of 2^20 areas is at most 40 deep. */
#define MEMORY_TREE_DEPTH 48

/* The memory area of `mm` that holds `address`, as find_vma() finds it; NULL if none. */
static __always_inline struct vm_area_struct___legacy *legacy_area(struct mm_struct *mm,
								  __u64 address)
{
	struct rb_node *node = BPF_CORE_READ((struct mm_struct___legacy *)mm, mm_rb.rb_node);
	struct vm_area_struct___legacy *area;
	int depth;

	_Pragma("clang loop unroll(disable)") for (depth = 0; depth < MEMORY_TREE_DEPTH; depth++)
	{
		if (!node)
			return NULL;
		area = (void *)node - bpf_core_field_offset(struct vm_area_struct___legacy, vm_rb);
		if (BPF_CORE_READ(area, vm_end) <= address)
			node = BPF_CORE_READ(node, rb_right);
		else if (BPF_CORE_READ(area, vm_start) <= address)
			return area;
		else
			node = BPF_CORE_READ(node, rb_left);
	}
	return NULL;
}

/* Whether the probe at `address` in the current process is known, and then its cookie. */
static __always_inline bool legacy_cookie(__u64 address, __u64 *cookie)
{
	struct mm_struct *mm = current_mm(true);
	struct address_key key = {.tgid = bpf_get_current_pid_tgid() >> 32, .address = address};
	struct address_cookie *known = bpf_map_lookup_elem(&address_cookies, &key), found;
	struct vm_area_struct___legacy *area;
	struct site_key site = {};
	struct file *file;
	__u64 *planned;

	if (known && known->mm == (__u64)mm) {
		*cookie = known->cookie;
		return true;
	}
	area = legacy_area(mm, address);
	file = area ? BPF_CORE_READ(area, vm_file) : NULL;
	if (!file)
		goto unknown;
	site.inode = BPF_CORE_READ(file, f_inode, i_ino);
	site.offset = address - BPF_CORE_READ(area, vm_start) + (BPF_CORE_READ(area, vm_pgoff) << 12);
	planned = bpf_map_lookup_elem(&site_cookies, &site);
	if (!planned)
		goto unknown;
	found.cookie = *planned;
	found.mm = (__u64)mm;
	bpf_map_update_elem(&address_cookies, &key, &found, BPF_ANY);
	*cookie = found.cookie;
	return true;
unknown:
	__sync_fetch_and_add(&unidentified_hits, 1);
	return false;
}

/* Legacy programs: the cookies of the calls whose return probe is pending, per thread and
 * return-address slot, pushed at the entry (COOKIE_RETURN_PROBED) and popped by the return
 * probe, which the kernel runs at the caller's address and cannot tell which function returns.
 * A slot holds more than one call after tail calls between traced functions: the kernel then
 * runs their return probes innermost first, which is the order they are popped in. */
#define PENDING_RETURNS 4

struct pending_key {
	__u32 tid;
	__u32 unused;
	__u64 slot;
};

struct pending_returns {
	__u64 cookies[PENDING_RETURNS];
	__u32 count;
	__u32 unused;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, struct pending_key);
	__type(value, struct pending_returns);
} pending_returns SEC(".maps");

/* An index into `cookies`, bounded where the verifier sees it (the compiler would drop the mask
 * where its own range checks make it redundant, and older verifiers cannot follow those). */
static __always_inline __u32 pending_index(__u32 i)
{
	asm volatile("" : "+r"(i));
	return i & (PENDING_RETURNS - 1);
}

/* A call with `cookie` whose return is probed entered at `slot`; `chained`: it was tail-called
 * by a traced function whose return is pending at the same slot (otherwise what the slot holds
 * is left from calls whose returns were never seen: longjmp, exceptions). */
static __always_inline void push_pending_return(__u64 slot, __u64 cookie, bool chained)
{
	struct pending_key key = {.tid = (__u32)bpf_get_current_pid_tgid(), .slot = slot};
	struct pending_returns *pending = bpf_map_lookup_elem(&pending_returns, &key), fresh = {};

	if (!pending || !chained) {
		fresh.cookies[0] = cookie;
		fresh.count = 1;
		bpf_map_update_elem(&pending_returns, &key, &fresh, BPF_ANY);
		return;
	}
	if (pending->count < PENDING_RETURNS) {
		pending->cookies[pending_index(pending->count)] = cookie;
		pending->count++;
	}
}

/* Whether a call is pending at `slot`, and then the cookie of the innermost one, which returns
 * now. */
static __always_inline bool return_cookie(__u64 slot, __u64 *cookie)
{
	struct pending_key key = {.tid = (__u32)bpf_get_current_pid_tgid(), .slot = slot};
	struct pending_returns *pending = bpf_map_lookup_elem(&pending_returns, &key);

	if (!pending || pending->count == 0 || pending->count > PENDING_RETURNS) {
		__sync_fetch_and_add(&unidentified_hits, 1);
		return false;
	}
	pending->count--;
	*cookie = pending->cookies[pending_index(pending->count)];
	if (pending->count == 0)
		bpf_map_delete_elem(&pending_returns, &key);
	return true;
}

/* Whether the probe whose program runs with `ctx` is known, and then its cookie: the attach
 * cookie, or in a legacy program what legacy_cookie() finds for the probed address (a uprobe's
 * ip is the probed instruction while its programs run). */
static __always_inline bool probe_cookie(struct pt_regs *ctx, __u64 *cookie, const bool legacy)
{
	if (legacy)
		return legacy_cookie(PT_REGS_IP(ctx), cookie);
	*cookie = bpf_get_attach_cookie(ctx);
	return true;
}

#endif
