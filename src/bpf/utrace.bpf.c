// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Entry and exit probes for every traced function. Each probe carries its function id as the
 * BPF cookie and writes one 24-byte event into the ring buffer. An exit is seen either by a
 * uretprobe or, where that would break C++ exception unwinding, by a plain uprobe on each
 * instruction that leaves the function (src/elf/returns.rs). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "interface.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by the loader (see interface.h). */
const volatile struct settings settings = {
	.wakeup_bytes = 1 << 20,
};

/* Never touched: it brings the shared types into the BTF (see interface.h). */
struct interface_types interface_types;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	/* Resized by the loader (--buffer-size). */
	__uint(max_entries, 16 << 20);
} events SEC(".maps");

/* Events that found the ring buffer full. */
__u64 lost_events = 0;

/* The same, per thread id: touched only when an event is lost, so it costs nothing otherwise. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} lost_by_thread SEC(".maps");

static __always_inline void count_lost(__u32 tid)
{
	__u64 one = 1, *lost;

	__sync_fetch_and_add(&lost_events, 1);
	lost = bpf_map_lookup_elem(&lost_by_thread, &tid);
	if (lost)
		__sync_fetch_and_add(lost, 1);
	else if (bpf_map_update_elem(&lost_by_thread, &tid, &one, BPF_NOEXIST) != 0) {
		/* Another CPU added the thread first (or the map is full: then it stays uncounted
		 * per thread, still counted in lost_events). */
		lost = bpf_map_lookup_elem(&lost_by_thread, &tid);
		if (lost)
			__sync_fetch_and_add(lost, 1);
	}
}
/* Whether the target has exec'ed (see settings.wait_for_exec). */
bool exec_seen = false;
/* Set by the recorder once every link is attached and cleared before the first is detached: links
 * come and go one at a time, and a call whose entry and return probes were not both in place
 * would give an exit without an entry. */
bool recording = false;

/* The guardian's process id (src/record/guardian.rs), set by the recorder once it runs; 0 when
 * there is none. */
__u32 guardian_tgid = 0;
/* Whether the recorder, or the guardian, has exited while the recording was on. Each is set with
 * a locked add before the other is read: whichever exits second sees the first gone. */
__u32 recorder_gone = 0;
__u32 guardian_gone = 0;
#define GONE(flag) (*(volatile __u32 *)&(flag))

#include "compat.bpf.h"
#include "shadow.bpf.h"

/* A raw tracepoint: attached by name, with no need for tracefs to be mounted. */
SEC("raw_tp/sched_process_exec")
int target_exec(void *ctx)
{
	if ((bpf_get_current_pid_tgid() >> 32) == settings.tgid)
		exec_seen = true;
	return 0;
}

/* --budget: per function id, the generation of its links that records its calls (0 or 1). The
 * recorder replaces a set of links by one without the functions it detaches: while both are
 * attached, each kept function's probe runs twice, and only the link of the generation named
 * here records (the other's session entries ask for no return). Resized by the loader to the
 * functions planned at start (1 without --budget); ids past it are never replaced. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} link_generations SEC(".maps");

/* Whether the probe whose cookie is `cookie` belongs to the links that record its function. */
static __always_inline bool current_link(__u64 cookie)
{
	__u32 function = (__u32)cookie;
	__u32 *generation;

	if (!settings.replaceable_links)
		return true;
	generation = bpf_map_lookup_elem(&link_generations, &function);
	return !generation || *generation == (cookie >> COOKIE_GENERATION_BIT);
}

/* --follow: the processes the target forked, and those they forked (tgid → 1). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} followed_processes SEC(".maps");

/* Whether the target's first exec (a command utrace forked, turning into the program) has gone
 * by: only the execs after it load a new program. */
bool target_exec_passed = false;

/* Weak, as is bpf_session_is_return: on a kernel without them, the loader leaves out the program
 * that calls them (src/probe/load.rs). */
extern int bpf_send_signal_task(struct task_struct *task, int sig, enum pid_type type,
				__u64 value) __ksym __weak;

extern struct task_struct *bpf_task_from_pid(__s32 pid) __ksym __weak;
extern void bpf_task_release(struct task_struct *p) __ksym __weak;

#define SIGSTOP 19
#define SIGCONT 18
#define SIGUSR1 10
/* task->signal->flags: the whole process is exiting (include/linux/sched/signal.h). */
#define SIGNAL_GROUP_EXIT 0x00000004

/* The target, or a process it forked under --follow. */
static __always_inline bool is_traced(__u32 tgid)
{
	return tgid == settings.tgid ||
	       (settings.follow && bpf_map_lookup_elem(&followed_processes, &tgid));
}

/* Whether process `tgid` runs a traced program: the link's pid filter decides where breakpoints
 * go, but another tracer's probe on the same file runs our program too; and before its exec, a
 * command utrace started runs utrace's own code. */
static __always_inline bool runs_traced_program(__u32 tgid)
{
	return is_traced(tgid) && !(settings.wait_for_exec && !exec_seen);
}

/* Whether a hit in process `tgid` is one to record now. */
static __always_inline bool recording_in(__u32 tgid)
{
	return recording && runs_traced_program(tgid);
}

/* Fills `e` for `function` on `thread` of the current process, at `now`. */
static __always_inline void fill_event(struct event *e, __u64 now, __u32 function, __u64 stack,
				       __u32 thread)
{
	e->timestamp_ns = now;
	e->tid = (thread & ((1u << EVENT_TID_BITS) - 1)) |
		 (bpf_get_smp_processor_id() << EVENT_TID_BITS);
	e->function = function;
	e->stack = (__u32)stack;
	e->pid = bpf_get_current_pid_tgid() >> 32;
}

/* Wakes the consumer only once settings.wakeup_bytes wait (see interface.h). */
static __always_inline __u64 wakeup_flag(void)
{
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= settings.wakeup_bytes)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

/* An event of `function` on `thread` (a thread id, or a goroutine's number: see go.bpf.h). */
static __always_inline int record_on(__u32 function, __u64 stack, __u32 thread)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct event *e;

	if (!recording_in(pid_tgid >> 32))
		return 0;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_lost((__u32)pid_tgid);
		return 0;
	}
	fill_event(e, now, function, stack, thread);
	bpf_ringbuf_submit(e, wakeup_flag());
	return 0;
}

static __always_inline int record(__u32 function, __u64 stack)
{
	return record_on(function, stack, (__u32)bpf_get_current_pid_tgid());
}

#include "stacks.bpf.h"
#include "values.bpf.h"
#include "go.bpf.h"
#include "kernel_events.bpf.h"
#include "kernel_functions.bpf.h"

/* At the return of dlopen or dlclose: tells the recorder a library may have been mapped or
 * unmapped. */
SEC("uretprobe.multi")
int libraries_changed(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct event *e;

	if ((pid_tgid >> 32) != settings.tgid || !recording)
		return 0;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		/* No stop without the event: nobody would know to let the process go on. */
		count_lost((__u32)pid_tgid);
		return 0;
	}
	e->timestamp_ns = bpf_ktime_get_ns();
	e->tid = (__u32)pid_tgid & ((1u << EVENT_TID_BITS) - 1);
	e->function = EVENT_LIBRARIES_CHANGED;
	e->stack = 0;
	e->pid = pid_tgid >> 32;
	/* The stop before the recorder can see the event: its continue must come after. Sent to
	 * the thread: a process-wide SIGSTOP another thread sent and has not taken yet would make
	 * the kernel drop this one, and this thread would run on into the new library unprobed. */
	if (settings.stop_at_dlopen_dlclose)
		bpf_send_signal_thread(SIGSTOP);
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	return 0;
}

/* A traced function's entry site. */
static __always_inline int entered(struct pt_regs *ctx, const bool legacy)
{
	/* At the entry (or a site before any stack change) sp points at the return address. */
	__u64 slot = PT_REGS_SP(ctx), cookie, ret;
	bool chained;

	/* Legacy programs look their cookie up: not for processes that are not traced. */
	if (legacy && !runs_traced_program(bpf_get_current_pid_tgid() >> 32))
		return 0;
	if (!probe_cookie(ctx, &cookie, legacy) || !current_link(cookie))
		return 0;
	if (legacy && (cookie & COOKIE_RETURN_PROBED)) {
		chained = !bpf_probe_read_user(&ret, sizeof(ret), (void *)slot) &&
			  tail_called(ret, legacy);
		push_pending_return(slot, cookie, chained);
	}
	shadow_entered(slot, legacy);
	record_call(ctx, cookie, (__u32)cookie, slot, legacy);
	if (cookie & COOKIE_ALSO_EXIT)
		record_call(ctx, cookie, (__u32)cookie | EVENT_EXIT, slot, legacy);
	return 0;
}

SEC("uprobe.multi")
int function_entry(struct pt_regs *ctx)
{
	return entered(ctx, false);
}

SEC("uprobe")
int function_entry_legacy(struct pt_regs *ctx)
{
	return entered(ctx, true);
}

extern bool bpf_session_is_return(void) __ksym __weak;

/* The target of the direct `call` (e8 rel32) that the return address `ret` follows, or 0 when
 * the instruction before `ret` is not one. */
static __always_inline __u64 direct_call_target(__u64 ret)
{
	__u8 call[5];
	__s32 rel;

	if (bpf_probe_read_user(call, sizeof(call), (void *)(ret - sizeof(call))))
		return 0;
	if (call[0] != 0xe8)
		return 0;
	__builtin_memcpy(&rel, &call[1], sizeof(rel));
	return ret + rel;
}

/* Whether the return address `ret` follows a direct `call` in the executable's code of the PLT
 * stub at `stub` (its virtual address in the file). */
static __always_inline bool called_from_executable_stub(__u64 ret, __u64 stub)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u64 start = BPF_CORE_READ(task, mm, start_code);
	__u64 end = BPF_CORE_READ(task, mm, end_code);

	if (ret < start + 5 || ret > end)
		return false;
	return direct_call_target(ret) == start - settings.executable_code_vaddr + stub;
}

/* Whether the return address `ret` follows a `call *disp32(%rip)` (ff 15 disp32) in the
 * executable's code that reads the GOT slot at `got_slot` (its virtual address in the file). */
static __always_inline bool called_through_executable_got(__u64 ret, __u64 got_slot)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u64 start = BPF_CORE_READ(task, mm, start_code);
	__u64 end = BPF_CORE_READ(task, mm, end_code);
	__u8 call[6];
	__s32 disp;

	if (ret < start + sizeof(call) || ret > end)
		return false;
	if (bpf_probe_read_user(call, sizeof(call), (void *)(ret - sizeof(call))))
		return false;
	if (call[0] != 0xff || call[1] != 0x15)
		return false;
	__builtin_memcpy(&disp, &call[2], sizeof(disp));
	return ret + disp == start - settings.executable_code_vaddr + got_slot;
}

/* The PLT stubs of traced libraries whose calls are probed where they land: per stub's
 * function id, the library's slot in library_code. Filled by the recorder. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} library_stubs SEC(".maps");

/* Per library slot: its inode (from the recorder) and where its code is (learned). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LIBRARY_SLOTS);
	__type(key, __u32);
	__type(value, struct library_code);
} library_code SEC(".maps");

/* Calls through a library's stub not counted because the kernel could not say, at the
 * library's first such call, where its code is (its memory map was being changed). */
__u64 unverified_library_calls = 0;

#define PAGE_SHIFT 12
#define EBUSY 16

/* bpf_find_vma's question: the runtime address of file offset 0 of the mapping of `inode` that
 * holds `address` (0: another file holds it). */
struct code_base_lookup {
	__u64 inode;
	__u64 base;
};

static long code_base_of(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct code_base_lookup *lookup = data;
	struct file *file = BPF_CORE_READ(vma, vm_file);

	if (file && BPF_CORE_READ(file, f_inode, i_ino) == lookup->inode)
		lookup->base = BPF_CORE_READ(vma, vm_start) -
			       (BPF_CORE_READ(vma, vm_pgoff) << PAGE_SHIFT);
	return 0;
}

/* Whether the return address `ret` follows a direct `call` of the PLT stub at file offset
 * `stub` of the traced library whose stub has function id `function`. Its code's load address
 * is learned from the first call that lands in the library's file (bpf_find_vma): a library
 * with landed stubs is one the program loaded with itself, which stays where it is. */
static __always_inline bool called_from_library_stub(__u64 ret, __u32 function, __u64 stub)
{
	struct code_base_lookup lookup = {};
	struct library_code *code;
	__u32 *slot;
	__u64 target;
	long error;

	slot = bpf_map_lookup_elem(&library_stubs, &function);
	if (!slot)
		return false;
	code = bpf_map_lookup_elem(&library_code, slot);
	target = direct_call_target(ret);
	if (!code || !target)
		return false;
	if (code->base)
		return target - code->base == stub;
	lookup.inode = code->inode;
	error = bpf_find_vma(bpf_get_current_task_btf(), target, code_base_of, &lookup, 0);
	if (error == -EBUSY)
		__sync_fetch_and_add(&unverified_library_calls, 1);
	if (error || !lookup.base)
		return false;
	code->base = lookup.base;
	return target - lookup.base == stub;
}

/* The calls a landed probe counts: those through one route into the library. */
enum landed_route {
	/* A direct call of the executable's PLT stub (plt_call). */
	EXECUTABLE_STUB,
	/* A direct call of a traced library's PLT stub (library_plt_call). */
	LIBRARY_STUB,
	/* A call through the executable's GOT slot (got_call). */
	EXECUTABLE_GOT,
};

/* A library call probed in the library function it lands in: a PLT call rather than at its
 * stub, whose indirect jump the kernel would single-step; a call through the GOT, which has no
 * stub. The function's other callers hit this probe too: only a call made through the route
 * counts, and only that one gets a return probe (a session: returning 1 at the entry skips the
 * return; the kernel, though, keeps the return probe without asking for a process other than
 * the link's that hits the breakpoint, which happens when another tracer probes the same
 * function in its own process). The cookie holds the call's function id and, in its high 32
 * bits, where the route is: the stub's virtual address in the executable (plt_call), its file
 * offset in a traced library (library_plt_call), the GOT slot's virtual address in the
 * executable (got_call). */
static __always_inline int landed_call_session(struct pt_regs *ctx, const enum landed_route route)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 where = (cookie >> COOKIE_ROUTE_SHIFT) & COOKIE_ROUTE_MASK;
	__u64 sp = PT_REGS_SP(ctx);
	__u64 ret;
	bool through_route;

	if (bpf_session_is_return()) {
		/* The `ret` has popped the return address: its slot is just below sp. */
		shadow_left(sp - 8, false);
		return record_values(ctx, (__u32)cookie | EVENT_EXIT, sp - 8, true, false);
	}
	/* Once recording stops, no call gets a return probe: return probes that keep coming hold up
	 * the release of the links (see AttachedProbes::detach). Before the target's exec, the
	 * process runs utrace's own code, whose libraries may sit elsewhere. */
	if ((bpf_get_current_pid_tgid() >> 32) != settings.tgid || !recording ||
	    (settings.wait_for_exec && !exec_seen) || !current_link(cookie))
		return 1;
	if (bpf_probe_read_user(&ret, sizeof(ret), (void *)sp))
		return 1;
	if (route == LIBRARY_STUB)
		through_route = called_from_library_stub(ret, (__u32)cookie, where);
	else if (route == EXECUTABLE_GOT)
		through_route = called_through_executable_got(ret, where);
	else
		through_route = called_from_executable_stub(ret, where);
	if (!through_route)
		return 1;
	/* This call gets a return probe: an exception through it needs its address restored. */
	shadow_entered(sp, false);
	record_values(ctx, (__u32)cookie, sp, false, false);
	return 0;
}

SEC("uprobe.session")
int plt_call(struct pt_regs *ctx)
{
	return landed_call_session(ctx, EXECUTABLE_STUB);
}

SEC("uprobe.session")
int library_plt_call(struct pt_regs *ctx)
{
	return landed_call_session(ctx, LIBRARY_STUB);
}

SEC("uprobe.session")
int got_call(struct pt_regs *ctx)
{
	return landed_call_session(ctx, EXECUTABLE_GOT);
}

/* On a `ret` or a tail jump of the function (sp points at the return address), or after a call
 * of a PLT stub. */
static __always_inline int left_at_site(struct pt_regs *ctx, const bool legacy)
{
	__u64 slot = PT_REGS_SP(ctx), cookie;

	if (legacy && !runs_traced_program(bpf_get_current_pid_tgid() >> 32))
		return 0;
	if (!probe_cookie(ctx, &cookie, legacy) || !current_link(cookie))
		return 0;
	if (cookie & COOKIE_AFTER_RETURN)
		slot -= 8;
	shadow_left(slot, legacy);
	if (settings.value_functions && !settings.go_goroutines)
		return record_values(ctx, (__u32)cookie | EVENT_EXIT, slot,
				     !(cookie & COOKIE_NO_RETURN_VALUE), legacy);
	return record_call(ctx, cookie, (__u32)cookie | EVENT_EXIT, slot, legacy);
}

SEC("uprobe.multi")
int function_exit_site(struct pt_regs *ctx)
{
	return left_at_site(ctx, false);
}

SEC("uprobe")
int function_exit_site_legacy(struct pt_regs *ctx)
{
	return left_at_site(ctx, true);
}

/* A function whose exit a return probe sees, where the kernel has uprobe sessions: its entry
 * and its return in one program. The entry asks for the return probe only while recording, so
 * once recording stops (the recorder detaching, or gone: see process_exit) no call makes a new
 * return instance. Those would hold up the release of every link: releasing one waits for the
 * kernel's uretprobe SRCU grace period, which each new return instance pushes back. */
SEC("uprobe.session")
int function_call(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 sp = PT_REGS_SP(ctx);

	if (bpf_session_is_return()) {
		/* The `ret` has popped the return address: its slot is just below sp. */
		shadow_left(sp - 8, false);
		return record_values(ctx, (__u32)cookie | EVENT_EXIT, sp - 8, true, false);
	}
	if (!recording || !current_link(cookie))
		return 1;
	/* At the entry (or a site before any stack change) sp points at the return address. */
	shadow_entered(sp, false);
	record_values(ctx, (__u32)cookie, sp, false, false);
	return 0;
}

/* The same, where the kernel has no sessions: the return probe of function_entry's functions. */
static __always_inline int returned(struct pt_regs *ctx, const bool legacy)
{
	/* The `ret` has popped the return address: its slot is just below sp. */
	__u64 slot = PT_REGS_SP(ctx) - 8, cookie;

	if (legacy) {
		if (!runs_traced_program(bpf_get_current_pid_tgid() >> 32))
			return 0;
		if (!return_cookie(slot, &cookie))
			return 0;
	} else {
		cookie = bpf_get_attach_cookie(ctx);
	}
	shadow_left(slot, legacy);
	return record_values(ctx, (__u32)cookie | EVENT_EXIT, slot, true, legacy);
}

SEC("uretprobe.multi")
int function_exit(struct pt_regs *ctx)
{
	return returned(ctx, false);
}

SEC("uretprobe")
int function_exit_legacy(struct pt_regs *ctx)
{
	return returned(ctx, true);
}

/* Where the kernel has no bpf_send_signal_task (before Linux 6.13), a forked child stops
 * itself instead, at its first return to user space (child_started): per child, its parent. */
struct forked_child {
	__u32 parent_tgid;
	__u32 parent_tid;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct forked_child);
} starting_children SEC(".maps");

/* Says that followed process `child` was forked by thread `parent_tid` of `parent_tgid`, and stops
 * it until the recorder has probed it: the current task if `task` is NULL. Nothing is said, and
 * the child runs on untraced, where it cannot be stopped. */
static __always_inline void follow_child(__u32 child, __u32 parent_tgid, __u32 parent_tid,
					 struct task_struct *task)
{
	__u8 yes = 1;
	struct event *e;
	long stopped;

	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		/* No stop without the event: nobody would know to let the child go on. */
		__sync_fetch_and_add(&lost_events, 1);
		return;
	}
	if (bpf_map_update_elem(&followed_processes, &child, &yes, BPF_ANY)) {
		/* The map is full. */
		bpf_ringbuf_discard(e, 0);
		return;
	}
	if (task)
		stopped = bpf_send_signal_task(task, SIGSTOP, PIDTYPE_TGID, 0);
	else
		stopped = bpf_send_signal(SIGSTOP);
	if (stopped) {
		bpf_map_delete_elem(&followed_processes, &child);
		bpf_ringbuf_discard(e, 0);
		return;
	}
	e->timestamp_ns = bpf_ktime_get_ns();
	e->tid = parent_tid & ((1u << EVENT_TID_BITS) - 1);
	e->function = EVENT_PROCESS_FORKED;
	e->stack = parent_tgid;
	e->pid = child;
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

/* --follow: a traced process forked a new one (not a thread). The child is stopped before it runs
 * a single instruction of its own (the tracepoint fires before it is first woken), so the
 * recorder can attach probes filtered to it and then let it go on: a link's pid filter does not
 * pass a forked child. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(process_forked, struct task_struct *parent, struct task_struct *child)
{
	struct forked_child forked = {.parent_tgid = parent->tgid, .parent_tid = parent->pid};
	__u32 child_tgid = child->tgid;

	if (child_tgid == forked.parent_tgid || !recording || !is_traced(forked.parent_tgid))
		return 0;
	/* Before its exec, a started command is still utrace's own child. */
	if (forked.parent_tgid == settings.tgid && settings.wait_for_exec && !target_exec_passed)
		return 0;
	if (bpf_ksym_exists(bpf_send_signal_task))
		follow_child(child_tgid, forked.parent_tgid, forked.parent_tid, child);
	else
		bpf_map_update_elem(&starting_children, &child_tgid, &forked, BPF_ANY);
	return 0;
}

/* --follow without bpf_send_signal_task: a forked child returns from fork (the first return to
 * user space of a new process is the end of that system call, whose tracepoint every task has
 * once one program watches it) and stops itself there, before it runs an instruction of its
 * own. */
SEC("raw_tp/sys_exit")
int child_started(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct forked_child *forked = bpf_map_lookup_elem(&starting_children, &tgid);
	struct forked_child parent;

	if (!forked)
		return 0;
	parent = *forked;
	bpf_map_delete_elem(&starting_children, &tgid);
	if (recording)
		follow_child(tgid, parent.parent_tgid, parent.parent_tid, NULL);
	return 0;
}

/* --follow: a traced process exec'ed a new program. It is stopped before the program's first
 * instruction (the loader's) until the recorder has probed the program. */
SEC("raw_tp/sched_process_exec")
int process_execed(void *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct event *e;

	if (!recording || !is_traced(tgid))
		return 0;
	if (tgid == settings.tgid && settings.wait_for_exec && !target_exec_passed) {
		/* The command utrace started becomes the program that was planned. */
		target_exec_passed = true;
		return 0;
	}
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&lost_events, 1);
		return 0;
	}
	if (bpf_send_signal(SIGSTOP)) {
		/* Not stopped: the new program runs on untraced. */
		bpf_ringbuf_discard(e, 0);
		return 0;
	}
	e->timestamp_ns = bpf_ktime_get_ns();
	e->tid = (__u32)pid_tgid & ((1u << EVENT_TID_BITS) - 1);
	e->function = EVENT_PROCESS_EXECED;
	e->stack = 0;
	e->pid = tgid;
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	return 0;
}

/* Sends `signal` to process `tgid`: SIGCONT lets it go on if it is stopped (a SIGCONT to a
 * process that runs changes nothing unless it handles SIGCONT, and one to a process about to stop
 * cancels the stop); SIGSTOP stops every thread. */
static __always_inline void signal_process(__u32 tgid, int signal)
{
	struct task_struct *task;

	if (!bpf_ksym_exists(bpf_send_signal_task) || !bpf_ksym_exists(bpf_task_from_pid))
		return;
	task = bpf_task_from_pid(tgid);
	if (!task)
		return;
	bpf_send_signal_task(task, signal, PIDTYPE_TGID, 0);
	bpf_task_release(task);
}


/* How the guardian learns that the recorder died: a note here, which wakes it at once. A ring
 * buffer, not a signal: signalling another process needs bpf_send_signal_task (6.13). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} recorder_deaths SEC(".maps");

static __always_inline void tell_guardian(void)
{
	__u32 *note = bpf_ringbuf_reserve(&recorder_deaths, sizeof(*note), 0);

	if (!note)
		return;
	*note = settings.recorder_tgid;
	bpf_ringbuf_submit(note, BPF_RB_FORCE_WAKEUP);
}

static long continue_followed(void *map, __u32 *tgid, __u8 *value, void *ctx)
{
	signal_process(*tgid, SIGCONT);
	return 0;
}

/* A process's last thread is exiting (or, for the recorder, its first one in a group exit).
 *
 * The recorder, still recording: it was killed (SIGKILL, the OOM killer) or crashed (seen at its
 * first thread's exit, see below). Recording stops here, before the kernel closes the recorder's
 * files and so releases its links: from now on no call makes a return instance (function_call,
 * plt_call), and the releases finish at once rather than while the program keeps calling. The
 * processes that may wait stopped for the recorder (at a dlopen, a stack write, a fork or exec
 * under --follow) are let go; but where a guardian runs (a program with an unwinder, whose frames
 * may hold the trampoline, or a kernel on which only the guardian can send signals), the target
 * is stopped instead where the kernel allows, and the guardian lets it go once it has given every
 * frame its return address back.
 *
 * The guardian: if the recorder went first, the target is let go (again, or for the first time
 * if the guardian could not do its work).
 *
 * A followed process: its pid may be reused by a process that is not followed once it has been
 * reaped, which comes after this.
 *
 * Signals to other processes need bpf_send_signal_task (6.13); before that the guardian sends
 * them (and legacy programs do not name bpf_for_each_map_elem's callback: see compat.bpf.h).
 *
 * The tracepoint's second argument, group_dead, came with Linux 6.16: the task alone is taken,
 * and the process's count of live threads, which do_exit() lowers before this tracepoint on every
 * kernel, says whether this is the last thread (two threads exiting at once may both see 0,
 * which does no harm here). */
static __always_inline int exited(struct task_struct *task, const bool legacy)
{
	__u32 tgid = task->tgid;
	bool group_dead = task->signal->live.counter == 0;

	if (tgid == settings.recorder_tgid) {
		/* Killed, the recorder's threads exit in any order, and the exit of its ptrace
		 * tracer thread (-p) lets the held threads go: act at the first one. A thread that
		 * simply ends is not a group exit. */
		if (!group_dead && !(task->signal->flags & SIGNAL_GROUP_EXIT))
			return 0;
		if (!recording)
			return 0;
		recording = false;
		/* Gone before not serving: an unwinder that finds no request served knows why. */
		__sync_fetch_and_add(&recorder_gone, 1);
		serving_stack_writes = false;
		if (guardian_tgid && !GONE(guardian_gone)) {
			/* The guardian gives the stacks back while the target is stopped, then lets it
			 * go on: stopped now, before the links go, so no thread meets a trampoline
			 * nobody restores; told now, not when the recorder's files close, which comes
			 * after the links' release (slow while the target is stopped with return
			 * instances). Let go here if the guardian went meanwhile. */
			signal_process(settings.tgid, SIGSTOP);
			tell_guardian();
			if (GONE(guardian_gone))
				signal_process(settings.tgid, SIGCONT);
		} else {
			signal_process(settings.tgid, SIGCONT);
		}
		if (!legacy && settings.follow && bpf_ksym_exists(bpf_send_signal_task))
			bpf_for_each_map_elem(&followed_processes, continue_followed, NULL, 0);
	} else if (!group_dead) {
		return 0;
	} else if (guardian_tgid && tgid == guardian_tgid) {
		/* Gone before the recorder (killed too), or done after it: a stop it was to end is
		 * ended here (a continue after its own is harmless). */
		__sync_fetch_and_add(&guardian_gone, 1);
		if (GONE(recorder_gone))
			signal_process(settings.tgid, SIGCONT);
	} else if (settings.follow && tgid != settings.tgid) {
		bpf_map_delete_elem(&followed_processes, &tgid);
		bpf_map_delete_elem(&starting_children, &tgid);
	}
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(process_exit, struct task_struct *task)
{
	return exited(task, false);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(process_exit_legacy, struct task_struct *task)
{
	return exited(task, true);
}
