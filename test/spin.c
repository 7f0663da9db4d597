/*
 * spin.c - functions whose untraced time the program measures itself, for
 * utrace's probe-cost correction test.
 *
 * Usage: spin ROUNDS CALLS SPIN LEAF_SPIN
 *
 * Each round runs, in this order:
 *   - untraced_work(CALLS, SPIN), timed: CALLS times, spin SPIN iterations of
 *     an empty loop, then call untraced_tiny();
 *   - work(CALLS, SPIN): the same code, calling tiny();
 *   - untraced_leaf(LEAF_SPIN), timed, and leaf(LEAF_SPIN): a loop of
 *     LEAF_SPIN iterations that calls nothing.
 * The test traces it with --no-function 'untraced_*' (and clock_gettime*, so
 * the timing itself is not probed): the untraced copies run exactly the code
 * of the traced ones without probes.
 *
 * tiny() and untraced_tiny() are written in assembly to start with
 * `push %rbp`, which the kernel emulates under a probe; leaf() and
 * untraced_leaf() to start with a `mov`, which it single-steps.
 *
 * Prints to stderr the shortest time of a round, in ns:
 *   spin: untraced work <ns>
 *   spin: untraced leaf <ns>
 * (untraced_work's time includes its CALLS untraced_tiny calls, a few ns each)
 * and to stdout the "calls" lines (see test/README.md).
 *
 * Expected counts: main 1, work ROUNDS, tiny ROUNDS * CALLS, leaf ROUNDS.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define COUNTED __attribute__((noipa))
#define BUMP(c) atomic_fetch_add_explicit(&(c), 1, memory_order_relaxed)

static _Atomic unsigned long n_main, n_work, n_leaf;
/* Counted by the assembly of tiny and untraced_tiny (the latter not printed: both copies run
 * the same code). */
_Atomic unsigned long n_tiny, n_untraced_tiny;

/* The loop both copies of work and leaf spend their time in: one code at one
 * address, so the traced and untraced copies run at the same speed. */
COUNTED void untraced_spin(unsigned long n)
{
	for (unsigned long i = 0; i < n; i++)
		__asm__ volatile("" ::: "memory");
}

/* leaf(n): untraced_spin(n), with `mov` as its first instruction. */
#define SPIN_LEAF(name)                                                        \
	__asm__(".text\n"                                                      \
		".globl " #name "\n"                                           \
		".type " #name ", @function\n" #name ":\n"                     \
		"	mov %rdi, %rax\n"                                      \
		"	sub $8, %rsp\n"                                        \
		"	mov %rax, %rdi\n"                                      \
		"	call untraced_spin\n"                                  \
		"	add $8, %rsp\n"                                        \
		"	ret\n"                                                 \
		".size " #name ", . - " #name "\n");                           \
	void name(unsigned long n)

SPIN_LEAF(leaf);
SPIN_LEAF(untraced_leaf);

/* tiny(x): x + 1, counting its call; its first instruction is a `push`. */
#define TINY(name, counter)                                                    \
	__asm__(".text\n"                                                      \
		".globl " #name "\n"                                           \
		".type " #name ", @function\n" #name ":\n"                     \
		"	push %rbp\n"                                           \
		"	lock incq " #counter "(%rip)\n"                        \
		"	lea 1(%rdi), %rax\n"                                   \
		"	pop %rbp\n"                                            \
		"	ret\n"                                                 \
		".size " #name ", . - " #name "\n");                           \
	unsigned long name(unsigned long x)

TINY(tiny, n_tiny);
TINY(untraced_tiny, n_untraced_tiny);

#define WORK(name, callee)                                                     \
	COUNTED unsigned long name(unsigned long calls, unsigned long n)      \
	{                                                                      \
		unsigned long sum = 0;                                         \
		for (unsigned long i = 0; i < calls; i++) {                    \
			untraced_spin(n);                                      \
			sum = callee(sum);                                     \
		}                                                              \
		return sum;                                                    \
	}

WORK(work, tiny)
WORK(untraced_work, untraced_tiny)

static unsigned long now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (unsigned long)t.tv_sec * 1000000000ul + (unsigned long)t.tv_nsec;
}

static unsigned long arg(char **argv, int i)
{
	return strtoul(argv[i], NULL, 10);
}

int main(int argc, char **argv)
{
	BUMP(n_main);
	if (argc != 5) {
		fprintf(stderr, "usage: spin ROUNDS CALLS SPIN LEAF_SPIN\n");
		return 2;
	}
	unsigned long rounds = arg(argv, 1), calls = arg(argv, 2);
	unsigned long n = arg(argv, 3), leaf_n = arg(argv, 4);
	unsigned long best_work = -1ul, best_leaf = -1ul, sum = 0;
	/* One CPU for every round: the two vCPUs of a VM need not run alike. */
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(sched_getcpu(), &one);
	sched_setaffinity(0, sizeof(one), &one);
	for (unsigned long r = 0; r < rounds; r++) {
		unsigned long start = now_ns();
		sum += untraced_work(calls, n);
		unsigned long took = now_ns() - start;
		best_work = took < best_work ? took : best_work;
		BUMP(n_work);
		sum += work(calls, n);

		start = now_ns();
		untraced_leaf(leaf_n);
		took = now_ns() - start;
		best_leaf = took < best_leaf ? took : best_leaf;
		BUMP(n_leaf);
		leaf(leaf_n);
	}
	fprintf(stderr, "spin: untraced work %lu\nspin: untraced leaf %lu\n",
		best_work, best_leaf);
	printf("sum %lu\n", sum);
	printf("calls %lu main\n", n_main);
	printf("calls %lu work\n", n_work);
	printf("calls %lu tiny\n", n_tiny);
	printf("calls %lu leaf\n", n_leaf);
	return 0;
}
