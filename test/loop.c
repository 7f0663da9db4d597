/*
 * loop.c - a program that runs for a while, for utrace's robustness tests
 * (a recorder killed, signalled or out of disk space while it runs).
 *
 * Usage: loop SECONDS [--marker=PATH] [--stay] [--thread]
 *
 *   --marker=PATH  create PATH first, so a test can tell whether it ran at all;
 *   --stay         keep going after SIGTERM (say so each time) instead of
 *                  stopping early;
 *   --thread       run the loop in a thread of its own (spin(), its start
 *                  routine), main waiting for it.
 *
 * Calls tick() in a loop for SECONDS seconds (wall clock), or until SIGTERM
 * arrives: then it prints "loop: SIGTERM received" and stops early (with
 * --stay it prints that and goes on). Either way it then prints
 * "loop: done" and the "calls" lines (see test/README.md), and exits 0.
 *
 * Expected counts: main 1, spin 1 with --thread (else 0), tick: whatever the
 * loop managed (counted).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define COUNTED __attribute__((noipa))
#define BUMP(c) atomic_fetch_add_explicit(&(c), 1, memory_order_relaxed)

static _Atomic unsigned long n_main, n_spin, n_tick;
static volatile sig_atomic_t terms;

static void on_term(int signal)
{
	(void)signal;
	terms++;
}

COUNTED unsigned long tick(unsigned long x)
{
	BUMP(n_tick);
	return x * 6364136223846793005UL + 1442695040888963407UL;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* What the loop is given, and what it ends with. */
struct loop {
	double seconds;
	int stay;
	unsigned long x;
};

/* Calls tick() until the time is up or SIGTERM stops it. Inlined: the loop runs
 * in main or in spin, never under a traced function of its own. */
static inline __attribute__((always_inline)) void run(struct loop *loop)
{
	double end = now() + loop->seconds;
	unsigned long x = 1;
	int reported = 0;
	while (now() < end) {
		for (int i = 0; i < 1000; i++)
			x = tick(x);
		if (terms > reported) {
			reported = terms;
			printf("loop: SIGTERM received\n");
			fflush(stdout);
			if (!loop->stay)
				break;
		}
	}
	loop->x = x;
}

/* The start routine of --thread's thread. */
COUNTED void *spin(void *loop)
{
	BUMP(n_spin);
	run(loop);
	return NULL;
}

int main(int argc, char **argv)
{
	BUMP(n_main);
	if (argc < 2) {
		fprintf(stderr, "usage: loop SECONDS [--marker=PATH] [--stay] [--thread]\n");
		return 2;
	}
	struct loop loop = {.seconds = atof(argv[1])};
	int threaded = 0;
	for (int i = 2; i < argc; i++) {
		if (strncmp(argv[i], "--marker=", 9) == 0) {
			FILE *marker = fopen(argv[i] + 9, "w");
			if (marker)
				fclose(marker);
		} else if (strcmp(argv[i], "--stay") == 0) {
			loop.stay = 1;
		} else if (strcmp(argv[i], "--thread") == 0) {
			threaded = 1;
		}
	}
	signal(SIGTERM, on_term);

	pthread_t thread;
	if (threaded) {
		if (pthread_create(&thread, NULL, spin, &loop) != 0) {
			fprintf(stderr, "loop: cannot start a thread\n");
			return 1;
		}
		pthread_join(thread, NULL);
	} else {
		run(&loop);
	}
	printf("loop: done (%lu)\n", loop.x & 0xff);
	printf("calls %lu main\n", n_main);
	if (threaded)
		printf("calls %lu spin\n", n_spin);
	printf("calls %lu tick\n", n_tick);
	return 0;
}
