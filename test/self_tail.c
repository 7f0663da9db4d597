/*
 * self_tail.c - a function that ends in a tail call to itself (a `jmp` to its
 * own start, as SQLite's sqlite3WhereSplit), for utrace's call trees.
 *
 * Usage: self_tail [DEPTH]     (1..100, default 3)
 *
 * split calls leaf, then, until DEPTH reaches 0, itself in tail position. It
 * calls itself through split_again, another name for the same address, which
 * GCC does not know is itself: a self call it knows would become a loop. Built
 * with -foptimize-sibling-calls, the call is a `jmp split`.
 *
 * Expected counts: main 1, split DEPTH + 1, leaf DEPTH + 1.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define COUNTED __attribute__((noipa))
#define BUMP(c) atomic_fetch_add_explicit(&(c), 1, memory_order_relaxed)

static _Atomic unsigned long n_main, n_split, n_leaf;

COUNTED long leaf(long x)
{
	BUMP(n_leaf);
	return x * 3 + 1;
}

extern long split_again(long depth, long acc);
__asm__(".globl split_again\n.set split_again, split");

COUNTED long split(long depth, long acc)
{
	BUMP(n_split);
	acc = leaf(acc);
	if (depth == 0)
		return acc;
	return split_again(depth - 1, acc);
}

int main(int argc, char **argv)
{
	BUMP(n_main);
	long depth = argc > 1 ? atol(argv[1]) : 3;
	if (depth < 1 || depth > 100) {
		fprintf(stderr, "usage: self_tail [DEPTH 1..100]\n");
		return 2;
	}
	printf("result %ld\n", split(depth, 1));
	printf("calls %lu main\n", n_main);
	printf("calls %lu split\n", n_split);
	printf("calls %lu leaf\n", n_leaf);
	return 0;
}
