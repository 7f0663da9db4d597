/*
 * budget.c - a hot tiny leaf under slower callers, for `record --budget`.
 *
 * Usage: budget SECONDS
 *
 * Runs rounds for SECONDS seconds (wall clock): each round() calls step()
 * STEPS times, and each step() does some work of its own and calls tiny(),
 * a leaf of a few instructions, TINY times. Traced in full, tiny()'s probes
 * cost the program most of its time; without them it runs near its own
 * speed.
 *
 * Prints "ready" when it starts (for a test that attaches to it), and
 * "rate <rounds>" for its last second (how fast it ran once a budget
 * had taken effect), then the "calls" lines (see test/README.md). Expected
 * counts: main 1, round, step and tiny as counted.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define COUNTED __attribute__((noipa))
#define BUMP(c) atomic_fetch_add_explicit(&(c), 1, memory_order_relaxed)

enum { STEPS = 100, TINY = 20, WORK = 3000 };

static _Atomic unsigned long n_main, n_round, n_step, n_tiny;

COUNTED unsigned long tiny(unsigned long x)
{
	BUMP(n_tiny);
	return x * 6364136223846793005UL + 1442695040888963407UL;
}

COUNTED unsigned long step(unsigned long x)
{
	BUMP(n_step);
	for (int i = 0; i < WORK; i++) {
		x ^= x >> 7;
		__asm__ volatile("" : "+r"(x));
	}
	for (int i = 0; i < TINY; i++)
		x = tiny(x);
	return x;
}

COUNTED unsigned long round_of_steps(unsigned long x)
{
	BUMP(n_round);
	for (int i = 0; i < STEPS; i++)
		x = step(x);
	return x;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

COUNTED int main(int argc, char **argv)
{
	BUMP(n_main);
	double seconds = argc > 1 ? atof(argv[1]) : 3;
	double start = now(), last_second = start + seconds - 1;
	unsigned long x = 1, rounds_before_last = 0;
	int in_last = 0;
	printf("ready\n");
	fflush(stdout);
	for (double t = start; t < start + seconds; t = now()) {
		if (!in_last && t >= last_second) {
			in_last = 1;
			rounds_before_last = n_round;
		}
		x = round_of_steps(x);
	}
	printf("rate %lu\n", n_round - rounds_before_last);
	printf("checksum %lu\n", x & 1);
	printf("calls %lu main\n", n_main);
	printf("calls %lu round_of_steps\n", n_round);
	printf("calls %lu step\n", n_step);
	printf("calls %lu tiny\n", n_tiny);
	return 0;
}
