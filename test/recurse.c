/*
 * recurse.c - recursion far deeper than the kernel's 64 nested uretprobes.
 *
 * Usage: recurse [DEPTH [ROUNDS]]     (default 3000 deep, 2 rounds)
 *
 * Each round calls descend(DEPTH), which calls itself down to descend(0),
 * which calls bottom(); then main calls step() 10 times at the top.
 * Prints the sum the recursion computed and the "calls" lines (see
 * test/README.md).
 *
 * Expected counts: main 1, descend ROUNDS * (DEPTH + 1), bottom ROUNDS,
 * step 10 * ROUNDS.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define COUNTED __attribute__((noipa))
#define BUMP(c) atomic_fetch_add_explicit(&(c), 1, memory_order_relaxed)

static _Atomic unsigned long n_main, n_descend, n_bottom, n_step;

COUNTED unsigned long bottom(unsigned long x)
{
	BUMP(n_bottom);
	return x * 3 + 1;
}

/* Not a tail call: the addition after the call keeps every frame. */
COUNTED unsigned long descend(unsigned long depth)
{
	BUMP(n_descend);
	if (depth == 0)
		return bottom(depth);
	return descend(depth - 1) + depth;
}

COUNTED unsigned long step(unsigned long x)
{
	BUMP(n_step);
	return x ^ (x >> 3);
}

int main(int argc, char **argv)
{
	BUMP(n_main);
	unsigned long depth = argc > 1 ? strtoul(argv[1], NULL, 10) : 3000;
	unsigned long rounds = argc > 2 ? strtoul(argv[2], NULL, 10) : 2;
	unsigned long sum = 0;
	for (unsigned long round = 0; round < rounds; round++) {
		sum += descend(depth);
		for (int i = 0; i < 10; i++)
			sum = step(sum);
	}
	printf("recurse: sum %lu\n", sum);
	printf("calls %lu main\n", n_main);
	printf("calls %lu descend\n", n_descend);
	printf("calls %lu bottom\n", n_bottom);
	printf("calls %lu step\n", n_step);
	return 0;
}
