/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* A shadow stack of the return addresses uretprobes replace, so C++ exceptions and Rust panics
 * unwind through traced frames.
 *
 * A uretprobe replaces the return address of a traced call with the kernel's trampoline in the
 * [uprobes] page, which has no unwind info: an unwinder that walks through such a frame fails
 * and the program aborts. So each thread keeps (slot, original return address) of its traced
 * frames here. When the thread enters the unwinder (_Unwind_RaiseException and co.), every slot
 * still holding the trampoline gets its original back; once the unwinder has handed control to a
 * landing pad (the thread's next traced event at or above the unwinder's frame), the frames
 * still alive get the trampoline again, so their returns are still seen. The kernel keeps its
 * record of each frame meanwhile and drops those the unwinding skipped by itself (at the next
 * uretprobe it prepares, or at a trampoline hit with a higher sp).
 *
 * The writes themselves are the recorder's: a kernel locked down for integrity (the default of
 * many distributions) refuses bpf_probe_write_user. The program sends the list of writes through
 * the `stack_writes` ring buffer and pauses the thread with a SIGSTOP, taken before it runs
 * another instruction: under -c it stops every thread; under -p, where the recorder holds the
 * threads with ptrace, it is a signal-delivery-stop of that thread alone that only the tracer
 * sees and suppresses. If the recorder dies with a thread in that stop, the kernel detaches the
 * thread, which should then take the signal and stop for the guardian; on 6.12 such a thread was
 * seen to run on instead (its next call got the trampoline before it stopped), so a throw there
 * can still meet frames nobody restored: a known gap, before 6.13 only. The recorder writes them
 * with process_vm_writev and lets it go on.
 *
 * Included by utrace.bpf.c after its globals. Off (and pruned by the verifier) unless the loader
 * found an unwinder in the program. */

/* More than the kernel's MAX_URETPROBE_DEPTH (64, beyond which it replaces no return address):
 * frames entered while the kernel's own count was full take room here without needing it. */
#define SHADOW_DEPTH 128
/* In `ret[i]`: the slot holds the original return address because the unwinder runs, not the
 * trampoline. User-space addresses never have the top bit set. */
#define SHADOW_RESTORED (1ull << 63)

struct shadow_stack {
	/* Frames in `slot`/`ret`, outermost first (highest slot). */
	__u32 depth;
	__u32 unused;
	/* While the unwinder runs: the slot of its entry's return address (the outermost one when
	 * it is entered again); 0 otherwise. */
	__u64 unwind_slot;
	/* The address of each frame's return-address slot. */
	__u64 slot[SHADOW_DEPTH];
	/* The return address the call pushed there, with SHADOW_RESTORED. */
	__u64 ret[SHADOW_DEPTH];
};

/* Return-address slots the recorder is asked to write while the process is stopped. Mirrored by
 * src/record/stack_writes.rs. */
struct stack_write_request {
	/* The process whose memory is written (tgid). */
	__u32 pid;
	/* Entries of `writes` in use. */
	__u32 count;
	/* The thread that waits paused for them: under ptrace, the tracer serves a pause stop of
	 * this thread with this request. */
	__u32 tid;
	__u32 reserved;
	struct {
		__u64 address;
		__u64 value;
	} writes[SHADOW_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 << 10);
} stack_writes SEC(".maps");

/* A request is built here, on its CPU, then copied into the ring buffer: the loops that fill it
 * (bpf_loop's callbacks among them) take a map value's pointer where a ring buffer's reservation
 * would have to be released on every path. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack_write_request);
} stack_write_scratch SEC(".maps");

/* Requests sent (each with its stop); the recorder lets the process go on once it has served as
 * many. */
__u64 stack_write_requests = 0;
/* Cleared by the recorder when it stops serving requests: a stop nobody ends would hold the
 * process forever. */
bool serving_stack_writes = false;

/* Per thread, by thread id. Not task storage: from a uprobe (a preemptible program) its lookup
 * can fail while another thread on the same CPU was preempted inside one (it takes a per-CPU
 * lock), and a frame missed there would kill the program at its next exception. A hash lookup
 * takes no lock. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 16);
	__type(key, __u32);
	__type(value, struct shadow_stack);
} shadow_stacks SEC(".maps");

/* The value a thread's stack starts from (too large for the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct shadow_stack);
} empty_shadow_stack SEC(".maps");

/* Whether the current thread is one whose frames are followed: the target's, once it runs the
 * traced program. Unlike the events, this does not wait for `recording`: a return address the
 * kernel replaced must be known whenever it was replaced. */
static __always_inline bool shadow_applies(void)
{
	return settings.unwind_shadow && (bpf_get_current_pid_tgid() >> 32) == settings.tgid &&
	       (!settings.wait_for_exec || exec_seen);
}

/* An index into the stack's arrays, bounded where the verifier sees it (the compiler would
 * otherwise move a range check away from the access). */
static __always_inline __u32 frame_index(__u32 i)
{
	asm volatile("" : "+r"(i));
	return i & (SHADOW_DEPTH - 1);
}

/* The current thread's shadow stack; with `create`, a new one if it has none (NULL only when the
 * map is full or busy). */
static __always_inline struct shadow_stack *shadow_of_thread(bool create)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), zero = 0;
	struct shadow_stack *stack = bpf_map_lookup_elem(&shadow_stacks, &tid), *empty;

	if (stack || !create)
		return stack;
	empty = bpf_map_lookup_elem(&empty_shadow_stack, &zero);
	if (!empty)
		return NULL;
	bpf_map_update_elem(&shadow_stacks, &tid, empty, BPF_NOEXIST);
	return bpf_map_lookup_elem(&shadow_stacks, &tid);
}

/* A thread of the target ends: its shadow stack goes, and the thread id may be reused. */
SEC("raw_tp/sched_process_exit")
int shadow_thread_exit(void *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;

	if (settings.unwind_shadow && (pid_tgid >> 32) == settings.tgid)
		bpf_map_delete_elem(&shadow_stacks, &tid);
	return 0;
}

/* Where the kernel's uretprobes return to in this process; 0 before its first uprobe hit
 * created the [uprobes] page. */
static __always_inline __u64 trampoline_address(const bool legacy)
{
	struct xol_area *area;

	if (legacy)
		return BPF_CORE_READ(current_mm(true), uprobes_state.xol_area, vaddr);
	/* Plain loads through BTF pointers, checked by the verifier and faulting safely: cheaper
	 * than three probe reads on every traced call. */
	area = current_mm(false)->uprobes_state.xol_area;
	return area ? area->vaddr : 0;
}

/* What the loops over a thread's frames work on. */
struct frame_walk {
	struct shadow_stack *stack;
	/* shadow_drop: the slot below which frames are forgotten, and whether at it too. */
	__u64 slot;
	bool inclusive;
	/* shadow_rearm, unwinder_entered: the writes asked for, and the trampoline's address. */
	struct stack_write_request *request;
	__u64 trampoline;
};

/* shadow_drop's step: forgets the top frame if it lies below the slot. */
static long drop_frame(__u64 n, void *data)
{
	struct frame_walk *walk = data;
	struct shadow_stack *stack = walk->stack;
	__u32 top;

	if (stack->depth == 0)
		return 1;
	top = frame_index(stack->depth - 1);
	if (stack->slot[top] > walk->slot || (!walk->inclusive && stack->slot[top] == walk->slot))
		return 1;
	stack->depth = top;
	return 0;
}

/* Forgets the frames whose slot is below `slot` (or at it, with `inclusive`): they ended without
 * their return being seen (longjmp, an exception) or, at it, end now. */
static __always_inline void shadow_drop(struct shadow_stack *stack, __u64 slot, bool inclusive,
					const bool legacy)
{
	struct frame_walk walk = {.stack = stack, .slot = slot, .inclusive = inclusive};

	repeat(SHADOW_DEPTH, SHADOW_DEPTH, drop_frame, &walk, legacy);
}

/* A request for up to SHADOW_DEPTH writes, empty, and in `space` its room in the ring buffer,
 * reserved now so that the frames are only changed when it can be sent; NULL when the recorder
 * is not serving or the buffer is full (the slots stay as they are). */
static __always_inline struct stack_write_request *stack_write_request(void **space)
{
	struct stack_write_request *request;
	__u32 zero = 0;

	*space = NULL;
	if (!serving_stack_writes)
		return NULL;
	request = bpf_map_lookup_elem(&stack_write_scratch, &zero);
	if (!request)
		return NULL;
	*space = bpf_ringbuf_reserve(&stack_writes, sizeof(*request), 0);
	if (!*space)
		return NULL;
	request->pid = settings.tgid;
	request->count = 0;
	request->tid = (__u32)bpf_get_current_pid_tgid();
	request->reserved = 0;
	return request;
}

static __always_inline void add_stack_write(struct stack_write_request *request, __u64 address,
					    __u64 value)
{
	__u32 i = frame_index(request->count);

	request->writes[i].address = address;
	request->writes[i].value = value;
	request->count++;
}

/* Sends `request`, through the room reserved for it in `space`, and pauses the thread until the
 * recorder has written it; releases the room of an empty one. The stop is taken when the
 * thread returns to user space, after this program: the request is in the ring buffer before
 * anyone can see the pause.
 * Under -c (the whole group stops) the order matters: the recorder lets the process go
 * on once it has served as many requests as were counted, so the count goes up before the stop
 * is sent, and the stop before the recorder can see the request (a continue sent before the stop
 * would leave the process stopped). Sent to the thread, not the process: a process-wide SIGSTOP
 * already pending (another thread's, not yet taken) makes the kernel drop this one without
 * waking this thread, which then runs on into the unwinder until the other thread's stop reaches
 * it. Under ptrace (-p) only this thread pauses: the tracer serves its stop with the request of
 * the same thread id (src/record/seizer.rs). */
static __always_inline void send_stack_writes(struct stack_write_request *request, void *space)
{
	if (request->count == 0) {
		bpf_ringbuf_discard(space, 0);
		return;
	}
	bpf_probe_read_kernel(space, sizeof(*request), request);
	__sync_fetch_and_add(&stack_write_requests, 1);
	bpf_send_signal_thread(19 /* SIGSTOP */);
	bpf_ringbuf_submit(space, BPF_RB_FORCE_WAKEUP);
}

/* Tells the replayer where the unwinder landed: the frames whose slot lies below `landing_sp`
 * were skipped (EVENT_UNWOUND). Written before the event that found the landing, so that event
 * is not among them. */
static __always_inline void note_unwound(__u64 landing_sp)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct event *e;

	if (!recording)
		return;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_lost((__u32)pid_tgid);
		return;
	}
	e->timestamp_ns = bpf_ktime_get_ns();
	e->tid = ((__u32)pid_tgid & ((1u << EVENT_TID_BITS) - 1)) |
		 (bpf_get_smp_processor_id() << EVENT_TID_BITS);
	e->function = EVENT_UNWOUND;
	e->stack = (__u32)landing_sp;
	e->pid = pid_tgid >> 32;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/* shadow_rearm's step: frame `n`, restored for the unwinder, gets the trampoline again if it
 * still holds its return address. */
static long rearm_frame(__u64 n, void *data)
{
	struct frame_walk *walk = data;
	struct shadow_stack *stack = walk->stack;
	__u32 i = frame_index(n);
	__u64 ret = stack->ret[i], now;

	if (n >= stack->depth)
		return 1;
	if (!(ret & SHADOW_RESTORED))
		return 0;
	ret &= ~SHADOW_RESTORED;
	stack->ret[i] = ret;
	if (bpf_probe_read_user(&now, sizeof(now), (void *)stack->slot[i]) == 0 && now == ret &&
	    walk->trampoline)
		add_stack_write(walk->request, stack->slot[i], walk->trampoline);
	return 0;
}

/* At the thread's event whose frame is at `slot`: if the unwinder ran and this event is at or
 * above its frame, it has handed control back at a stack pointer of `landing_sp` (above `slot`
 * for an entry, whose call pushed its return address there; `slot` itself for an exit, whose
 * frame is still alive); the frames it restored that are still alive (all the frames left, the
 * dead ones dropped) get the trampoline again. A slot that no longer holds the original (a frame
 * gone without the shadow stack seeing it) is left alone. */
static __always_inline void shadow_rearm(struct shadow_stack *stack, __u64 slot, __u64 landing_sp,
					 const bool legacy)
{
	struct frame_walk walk = {.stack = stack};
	void *space;

	if (stack->unwind_slot == 0 || slot < stack->unwind_slot)
		return;
	walk.request = stack_write_request(&space);
	if (!walk.request || !space)
		return;
	stack->unwind_slot = 0;
	note_unwound(landing_sp);
	walk.trampoline = trampoline_address(legacy);
	repeat(SHADOW_DEPTH, SHADOW_DEPTH, rearm_frame, &walk, legacy);
	send_stack_writes(walk.request, space);
}

/* Whether the return address at `slot` is the trampoline: a call tail-called by a traced
 * function, whose return is pending at the same slot (the kernel keeps the caller's original
 * return address for both). */
static __always_inline bool tail_called(__u64 ret, const bool legacy)
{
	return ret == trampoline_address(legacy);
}

/* At a traced function's entry, before the kernel replaces the return address at `slot`. */
static __always_inline void shadow_entered(__u64 slot, const bool legacy)
{
	struct shadow_stack *stack;
	__u64 ret;
	bool chained;
	__u32 depth;

	if (!shadow_applies())
		return;
	stack = shadow_of_thread(true);
	if (!stack || bpf_probe_read_user(&ret, sizeof(ret), (void *)slot))
		return;
	/* The frame already here stands for both. */
	chained = tail_called(ret, legacy);
	shadow_drop(stack, slot, !chained, legacy);
	shadow_rearm(stack, slot, slot + 8, legacy);
	depth = stack->depth;
	if (chained || depth >= SHADOW_DEPTH)
		return;
	stack->slot[frame_index(depth)] = slot;
	stack->ret[frame_index(depth)] = ret;
	stack->depth = depth + 1;
}

/* At a traced function's exit, its return address slot at `slot`. */
static __always_inline void shadow_left(__u64 slot, const bool legacy)
{
	struct shadow_stack *stack;

	if (!shadow_applies())
		return;
	stack = shadow_of_thread(false);
	if (!stack)
		return;
	shadow_drop(stack, slot, true, legacy);
	shadow_rearm(stack, slot, slot, legacy);
}

/* unwinder_entered's step: frame `n`, if it holds the trampoline, gets its return address. */
static long restore_frame(__u64 n, void *data)
{
	struct frame_walk *walk = data;
	struct shadow_stack *stack = walk->stack;
	__u32 i = frame_index(n);
	__u64 ret = stack->ret[i], now;

	if (n >= stack->depth)
		return 1;
	if (ret & SHADOW_RESTORED)
		return 0;
	if (bpf_probe_read_user(&now, sizeof(now), (void *)stack->slot[i]) ||
	    now != walk->trampoline)
		return 0;
	add_stack_write(walk->request, stack->slot[i], ret);
	stack->ret[i] = ret | SHADOW_RESTORED;
	return 0;
}

/* At the entry of an unwinder function (_Unwind_RaiseException, _Unwind_Resume, ...), which walks
 * the frames above its own: give every frame the return address its unwind info describes. */
static __always_inline int unwinder_entry(struct pt_regs *ctx, const bool legacy)
{
	__u64 slot = PT_REGS_SP(ctx);
	struct frame_walk walk = {};
	void *space;

	if (!shadow_applies())
		return 0;
	walk.stack = shadow_of_thread(false);
	if (!GONE(recorder_gone)) {
		walk.trampoline = trampoline_address(legacy);
		if (!walk.stack || !walk.trampoline)
			return 0;
		shadow_drop(walk.stack, slot, false, legacy);
		walk.request = stack_write_request(&space);
		if (walk.request && space) {
			repeat(SHADOW_DEPTH, SHADOW_DEPTH, restore_frame, &walk, legacy);
			send_stack_writes(walk.request, space);
			if (walk.stack->unwind_slot < slot)
				walk.stack->unwind_slot = slot;
			return 0;
		}
		/* No request: the recorder may have died since the check above (it is marked gone
		 * before it stops serving); then this thread must stop for the guardian as below,
		 * not unwind through the trampoline. */
		if (!GONE(recorder_gone))
			return 0;
	}
	/* The recorder died: nobody serves a request. Its guardian gives the stacks back while
	 * the process is stopped, then deletes them; until then, no unwinding through frames that
	 * may hold the trampoline. */
	if (guardian_tgid && !GONE(guardian_gone) && walk.stack && walk.stack->depth)
		bpf_send_signal_thread(19 /* SIGSTOP */);
	return 0;
}

SEC("uprobe.multi")
int unwinder_entered(struct pt_regs *ctx)
{
	return unwinder_entry(ctx, false);
}

SEC("uprobe")
int unwinder_entered_legacy(struct pt_regs *ctx)
{
	return unwinder_entry(ctx, true);
}
