/*
 * jumps.c - indirect jumps whose ends utrace must tell apart in a program
 * that gets no uretprobe (it imports swapcontext, so it may switch stacks):
 * a switch's jump through a table of offsets, which stays in its function,
 * and tail calls through a pointer, which leave it.
 *
 * Usage: jumps [ROUNDS]     (1..1000000, default 10)
 *
 * Each round, main calls classify(round) (a switch of 8 cases, a jump table
 * in position-independent code), then apply(&ops[round % 2], round), which
 * ends in a tail call through the pointer it is given (`jmp *(%rdi)`, built
 * with -foptimize-sibling-calls) to twice or thrice. swapcontext is called
 * only with more than one argument, which the tests never give.
 *
 * Expected counts (ROUNDS = R): main 1, classify R, apply R, twice R/2
 * rounded up, thrice R/2 rounded down.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#define COUNTED __attribute__((noipa))
#define BUMP(c) atomic_fetch_add_explicit(&(c), 1, memory_order_relaxed)

static _Atomic unsigned long n_main, n_classify, n_apply, n_twice, n_thrice;
static volatile long sink;

COUNTED long classify(long n)
{
	BUMP(n_classify);
	switch (n % 8) {
	case 0: sink += 3; return n * 7;
	case 1: sink ^= n; return n + 11;
	case 2: sink -= 5; return n << 2;
	case 3: sink += n * n; return n - 13;
	case 4: sink |= 64; return n / 3;
	case 5: sink &= ~n; return n * n;
	case 6: sink += 17; return n ^ 0x55;
	default: sink ^= 0x3c; return -n;
	}
}

struct op {
	long (*run)(long);
};

COUNTED long twice(long n)
{
	BUMP(n_twice);
	return 2 * n;
}

COUNTED long thrice(long n)
{
	BUMP(n_thrice);
	return 3 * n;
}

COUNTED long apply(const struct op *op, long n)
{
	BUMP(n_apply);
	return op->run(n);
}

static const struct op ops[2] = {{twice}, {thrice}};

int main(int argc, char **argv)
{
	BUMP(n_main);
	long rounds = argc > 1 ? atol(argv[1]) : 10;
	if (rounds < 1 || rounds > 1000000) {
		fprintf(stderr, "usage: jumps [ROUNDS 1..1000000]\n");
		return 2;
	}
	if (argc > 2) {
		ucontext_t here;
		swapcontext(&here, &here);
	}
	long total = 0;
	for (long round = 0; round < rounds; round++)
		total += classify(round) + apply(&ops[round % 2], round);
	printf("total %ld\n", total);
	printf("calls %lu main\n", n_main);
	printf("calls %lu classify\n", n_classify);
	printf("calls %lu apply\n", n_apply);
	printf("calls %lu twice\n", n_twice);
	printf("calls %lu thrice\n", n_thrice);
	return 0;
}
