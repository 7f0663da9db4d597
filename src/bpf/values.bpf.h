/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Arguments and return values (-A, -R): a function with a `struct value_spec` gets its values
 * written after its event, in one record (the layout is in interface.h). Only when the loader
 * says some function has one (settings.value_functions): otherwise the verifier prunes all of
 * this. Included by utrace.bpf.c after record_on(). */
#ifndef UTRACE_VALUES_BPF_H
#define UTRACE_VALUES_BPF_H

/* Function id → what its probes capture. Sized by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	/* Entries are allocated as they are added: most recordings add none. */
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct value_spec);
} value_specs SEC(".maps");

/* An event and its values as they are written: twice the payload's size, so that an item
 * written at any offset below VALUE_PAYLOAD_MAX stays inside. */
struct value_record {
	struct event event;
	__u8 payload[2 * VALUE_PAYLOAD_MAX];
};

/* One record per CPU, built there and copied into the ring buffer: a reservation's size must be
 * known to the verifier, and values vary in size. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct value_record);
} value_records SEC(".maps");

/* (process, address) → where a string the probe could not read lies (interface.h). Sized by the
 * loader where strings are captured; least recently used first out, as the recorder only looks
 * (an address may fail again before the recorder has read the first failure's event). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct string_place_key);
	__type(value, struct string_place);
} string_places SEC(".maps");

/* VM_WRITE (include/linux/mm.h), and ENOENT, bpf_find_vma's error when no mapping holds the
 * address. */
#define STRING_VM_WRITE 0x2
#define STRING_ENOENT 2
/* Strings per call placed when unread: the rest the recorder reads from the process alone. */
#define UNREAD_STRINGS_MAX 2

/* What capture_item() reads from and where it writes. */
struct capture {
	/* Arguments 1-6 as registers hold them, and the stack pointer (arguments 7 and up). */
	__u64 registers[8];
	__u64 sp;
	/* rax: the return value, at an exit. */
	__u64 returned;
	/* The user stack's id or a negative error, at an entry that captures it (--stack). */
	__s64 user_stack;
	struct value_spec spec;
	/* An exit, whose return value is known (false at a tail jump: the callee computes it). */
	bool exit;
	/* A kernel function's probe (-k): its pointers may be the kernel's. */
	bool kernel;
	bool return_known;
	/* Bytes of payload written so far. */
	__u32 length;
	/* The first strings that could not be read (non-NULL pointers), to place once captured. */
	__u64 unread[UNREAD_STRINGS_MAX];
};

/* Captures item `index` of the spec (a step of repeat(): where the kernel has bpf_loop or
 * open-coded iterators, verified once, whatever the count). */
static long capture_item(__u64 index, void *data)
{
	struct capture *c = data;
	__u32 zero = 0, off = c->length & (VALUE_PAYLOAD_MAX - 1);
	struct value_record *record = bpf_map_lookup_elem(&value_records, &zero);
	__u8 item = c->spec.items[index & (VALUES_MAX - 1)];
	__u8 source = item & VALUE_SOURCE_MASK;
	__u64 value = 0;
	__s16 read;

	if (!record)
		return 1;
	if (item & VALUE_STACK) {
		if (c->exit)
			return 0;
		value = c->user_stack;
	} else if (source == VALUE_RETURN) {
		if (!c->exit || !c->return_known)
			return 0;
		value = c->returned;
	} else if (c->exit) {
		return 0;
	} else if (source <= 6) {
		value = c->registers[(source - 1) & 7];
	} else if (c->kernel) {
		/* The planner gives kernel functions no stack arguments (where kprobe_multi's sp
		 * points is not the kprobe's): written as 0, as the slot must be there. */
		value = 0;
	} else if (bpf_probe_read_user(&value, sizeof(value), (void *)(c->sp + 8 * (source - 6)))) {
		/* The stack slot cannot be read: written as 0, as the slot must be there. */
		value = 0;
	}
	__builtin_memcpy(&record->payload[off], &value, sizeof(value));
	off += sizeof(value);
	if (item & VALUE_STRING) {
		/* One byte more than string_size, to tell a string that was cut. */
		/* A kernel function's string may be the kernel's or the process's (a `__user`
		 * pointer, which BTF marks only on some kernels): the address tells, as x86-64 puts the
		 * kernel in the upper half. Never a uprobe's: the process would choose what is read. */
		if (c->kernel && (__s64)value < 0)
			read = bpf_probe_read_kernel_str(&record->payload[off + sizeof(read)],
							 settings.string_size + 2, (void *)value);
		else
			read = bpf_probe_read_user_str(&record->payload[off + sizeof(read)],
						       settings.string_size + 2, (void *)value);
		/* The count without the NUL, or the error. The recorder looks for the process's
		 * strings alone. */
		if (read > 0)
			read -= 1;
		else if (read < 0 && value && (__s64)value > 0 && !c->unread[UNREAD_STRINGS_MAX - 1])
			c->unread[c->unread[0] != 0] = value;
		__builtin_memcpy(&record->payload[off], &read, sizeof(read));
		off += sizeof(read) + (read > 0 ? read : 0);
	}
	c->length = off;
	return 0;
}

/* bpf_find_vma's callback: where in `vma` the string at `p->offset` (its address until then)
 * lies. In a file only where no write has reached the mapping (no anonymous pages, not
 * writable): there the file holds what the process sees, and cannot be changed by it. */
static long place_in_mapping(struct task_struct *task, struct vm_area_struct *vma,
			     struct string_place *p)
{
	struct file *file = BPF_CORE_READ(vma, vm_file);

	p->kind = STRING_IN_MEMORY;
	if (!file || (BPF_CORE_READ(vma, vm_flags) & STRING_VM_WRITE) ||
	    BPF_CORE_READ(vma, anon_vma))
		return 0;
	p->kind = STRING_IN_FILE;
	p->inode = BPF_CORE_READ(file, f_inode, i_ino);
	p->device = BPF_CORE_READ(file, f_inode, i_sb, s_dev);
	p->offset = p->offset - BPF_CORE_READ(vma, vm_start) + (BPF_CORE_READ(vma, vm_pgoff) << 12);
	return 0;
}

/* Tells the recorder where the string at `address` lies, which the probe could not read: it
 * reads it there (a read of its own may fault the page in). Only on this rare path, and never in
 * legacy programs (no bpf_find_vma: the recorder reads the process's memory while it lives). */
static __always_inline void place_unread_string(__u64 address, __u32 tgid, const bool legacy)
{
	struct string_place_key key = { .tgid = tgid, .address = address };
	struct string_place place = { .offset = address };
	long found;

	if (legacy || !address)
		return;
	found = bpf_find_vma(bpf_get_current_task_btf(), address, place_in_mapping, &place, 0);
	if (found == -STRING_ENOENT)
		place.kind = STRING_NOT_MAPPED;
	else if (found)
		return;
	bpf_map_update_elem(&string_places, &key, &place, BPF_ANY);
}

/* The event of `function` (its exit when EVENT_EXIT is set) at a probe whose registers are
 * `ctx`, with the values its spec asks for; `return_known`: at an exit, whether rax holds what
 * the function returns; `kernel`: a kernel function's kprobe (-k). */
static __always_inline int record_values_of(struct pt_regs *ctx, __u32 function, __u64 stack,
					    bool return_known, const bool legacy, const bool kernel)
{
	__u32 id = function & ~EVENT_EXIT, zero = 0;
	__u64 now, pid_tgid;
	struct value_spec *spec;
	struct value_record *out;
	struct capture c = {};
	long written;

	if (!settings.value_functions)
		return record(function, stack);
	spec = bpf_map_lookup_elem(&value_specs, &id);
	if (!spec)
		return record(function, stack);
	now = bpf_ktime_get_ns();
	pid_tgid = bpf_get_current_pid_tgid();
	if (!recording_in(pid_tgid >> 32))
		return 0;
	c.registers[0] = PT_REGS_PARM1(ctx);
	c.registers[1] = PT_REGS_PARM2(ctx);
	c.registers[2] = PT_REGS_PARM3(ctx);
	c.registers[3] = PT_REGS_PARM4(ctx);
	c.registers[4] = PT_REGS_PARM5(ctx);
	c.registers[5] = PT_REGS_PARM6(ctx);
	c.sp = PT_REGS_SP(ctx);
	c.returned = PT_REGS_RC(ctx);
	c.spec = *spec;
	c.exit = function & EVENT_EXIT;
	c.return_known = return_known;
	c.kernel = kernel;
	/* A stack item is the spec's last (see interface.h). */
	if (!c.exit && c.spec.count && c.spec.count <= VALUES_MAX &&
	    (c.spec.items[(c.spec.count - 1) & (VALUES_MAX - 1)] & VALUE_STACK))
		c.user_stack = user_stack_id(ctx, legacy);
	repeat(c.spec.count, VALUES_MAX, capture_item, &c, legacy);
	/* Before the event goes out, so the recorder finds the places when it reads it. */
	place_unread_string(c.unread[0], pid_tgid >> 32, legacy);
	place_unread_string(c.unread[1], pid_tgid >> 32, legacy);
	out = bpf_map_lookup_elem(&value_records, &zero);
	if (!out)
		return 0;
	fill_event(&out->event, now, function, stack, (__u32)pid_tgid);
	written = bpf_ringbuf_output(&events, out,
				     sizeof(out->event) + (c.length & (VALUE_PAYLOAD_MAX - 1)),
				     wakeup_flag());
	if (written)
		count_lost((__u32)pid_tgid);
	return 0;
}

/* record_values_of() at a uprobe. */
static __always_inline int record_values(struct pt_regs *ctx, __u32 function, __u64 stack,
					 bool return_known, const bool legacy)
{
	return record_values_of(ctx, function, stack, return_known, legacy, false);
}

#endif
