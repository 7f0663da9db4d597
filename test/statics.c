/*
 * statics.c - static functions, which only .symtab names: a stripped build keeps none of them,
 * its separate debug file (or MiniDebugInfo) has them all.
 *
 * Usage: statics [ROUNDS]     (default 100)
 *
 * Each round calls square() and twice() once each, and twice() calls halve() twice; main calls
 * malloc() ROUNDS times (kept until the end). Built with -DOTHER_BUILD, the sum differs, and so
 * does the build id: the debug file of one build does not match the other.
 *
 * Expected counts: main 1, square ROUNDS, twice ROUNDS, halve 2 * ROUNDS.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define COUNTED __attribute__((noipa))
#define BUMP(c) atomic_fetch_add_explicit(&(c), 1, memory_order_relaxed)

#ifdef OTHER_BUILD
#define OFFSET 7
#else
#define OFFSET 1
#endif

static _Atomic unsigned long n_main, n_square, n_twice, n_halve;

COUNTED static unsigned long square(unsigned long x)
{
	BUMP(n_square);
	return x * x + OFFSET;
}

COUNTED static unsigned long halve(unsigned long x)
{
	BUMP(n_halve);
	return x / 2;
}

COUNTED static unsigned long twice(unsigned long x)
{
	BUMP(n_twice);
	return halve(x) + halve(x + 1) + 2 * x;
}

int main(int argc, char **argv)
{
	BUMP(n_main);
	unsigned long rounds = argc > 1 ? strtoul(argv[1], NULL, 10) : 100;
	unsigned long sum = 0;
	void **blocks = malloc(rounds * sizeof(void *));
	for (unsigned long i = 0; i < rounds; i++) {
		sum += square(i) + twice(i);
		blocks[i] = malloc(24);
	}
	printf("sum %lu\n", sum);
	printf("calls %lu main\n", n_main);
	printf("calls %lu square\n", n_square);
	printf("calls %lu twice\n", n_twice);
	printf("calls %lu halve\n", n_halve);
	for (unsigned long i = 0; i < rounds; i++)
		free(blocks[i]);
	free(blocks);
	return 0;
}
