/*
 * straight.c - functions whose first instructions the kernel would single-step but whose first
 * branch it emulates, the shapes libpython's hottest functions have: `test %rsi,%rsi; je`
 * (or_default: a NULL check of its second argument), `test %rdi,%rdi; js` (clamp: a sign
 * check), and loads first: `mov 0x8(%rdi),%rax; test %rax,%rax; je` (type_flags: an object's
 * type, PyObject_IS_GC's shape) and `mov current_type(%rip),%rax; test; je` (current_flags:
 * PyErr_Occurred's). utrace probes them on that branch. Each counts its own calls; with 20
 * rounds or fewer the program also prints the line utrace's replay must show for each call of
 * or_default and clamp (its first argument and return value, captured at the moved site).
 *
 * Every tenth round type_flags is given an object in a page it may not read: its first load
 * faults, and the SIGSEGV handler siglongjmps back into main. Such a call never reaches a probe
 * past the load; the program prints how many there were ("faulted <count> type_flags"), which
 * a probe at the entry counts as calls and a moved one does not.
 *
 * Usage: straight N    (N rounds; prints the replay lines, then "calls <count> <name>")
 */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define PROBED __attribute__((noinline, noclone))

struct type {
	long flags;
};

struct object {
	long refcount;
	const struct type *type;
};

static unsigned long n_or_default, n_clamp, n_type_flags, n_current_flags;
static const struct type *current_type;
static sigjmp_buf escape;

/* Called on the rare paths only, so the probed functions branch before doing anything. */
PROBED long slow_default(long fallback)
{
	return fallback * 7 + 1;
}

PROBED long or_default(long fallback, const long *value)
{
	if (__builtin_expect(value == NULL, 0))
		return slow_default(fallback);
	n_or_default++;
	return *value + fallback;
}

PROBED long clamp(long x)
{
	if (__builtin_expect(x < 0, 0))
		return slow_default(x);
	n_clamp++;
	return x * 3;
}

PROBED long type_flags(const struct object *object)
{
	const struct type *type = object->type;
	if (__builtin_expect(type == NULL, 0))
		return slow_default(0);
	n_type_flags++;
	return type->flags;
}

PROBED long current_flags(long fallback)
{
	const struct type *type = current_type;
	if (__builtin_expect(type == NULL, 0))
		return slow_default(fallback);
	n_current_flags++;
	return type->flags;
}

static void escape_fault(int signal)
{
	(void)signal;
	siglongjmp(escape, 1);
}

/* What call_loads saw: the calls that took the rare path (no type), and the faults. */
struct load_calls {
	unsigned long untyped, no_current, faults;
};

/*
 * Calls type_flags and current_flags `rounds` times each: every fifth call of each finds no
 * type (the rare path), every tenth type_flags call faults on its first load (and that round
 * calls no current_flags).
 */
static struct load_calls call_loads(long rounds)
{
	static const struct type a_type = { 42 };
	static const struct object typed = { 1, &a_type }, untyped = { 1, NULL };
	const struct object *unreadable =
		mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct sigaction on_fault = { .sa_handler = escape_fault };
	/* Changed between sigsetjmp and siglongjmp: volatile, or the jump back may lose them. */
	volatile unsigned long untyped_calls = 0, no_current_calls = 0, faults = 0;

	if (unreadable == MAP_FAILED || sigaction(SIGSEGV, &on_fault, NULL) != 0) {
		perror("straight");
		exit(1);
	}
	for (volatile long i = 0; i < rounds; i++) {
		const struct object *object = i % 10 == 7 ? unreadable
					      : i % 5 == 1  ? &untyped
							    : &typed;
		if (sigsetjmp(escape, 1) != 0) {
			faults++;
			continue;
		}
		type_flags(object);
		untyped_calls += object == &untyped;
		current_type = i % 5 == 2 ? NULL : &a_type;
		current_flags(i);
		no_current_calls += current_type == NULL;
	}
	return (struct load_calls){ untyped_calls, no_current_calls, faults };
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 100;
	long sum = 0, value = 5;
	unsigned long null_calls = 0, negative_calls = 0;

	for (long i = 0; i < rounds; i++) {
		const long *pointer = i % 10 == 3 ? NULL : &value;
		long x = i % 7 == 2 ? -i : i;
		long a = or_default(i, pointer);
		long b = clamp(x);
		null_calls += pointer == NULL;
		negative_calls += x < 0;
		if (rounds <= 20) {
			printf("  or_default(%ld) = %ld;\n", i, a);
			printf("  clamp(%ld) = %ld;\n", x, b);
		}
		sum += a + b;
	}
	struct load_calls loads = call_loads(rounds);
	printf("sum %ld\n", sum);
	printf("calls %lu or_default\n", n_or_default + null_calls);
	printf("calls %lu clamp\n", n_clamp + negative_calls);
	printf("calls %lu slow_default\n",
	       null_calls + negative_calls + loads.untyped + loads.no_current);
	/* type_flags: the calls that got past its first load (see above). */
	printf("calls %lu type_flags\n", n_type_flags + loads.untyped);
	printf("calls %lu current_flags\n", n_current_flags + loads.no_current);
	printf("faulted %lu type_flags\n", loads.faults);
	return 0;
}
