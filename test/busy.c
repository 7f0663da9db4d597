/*
 * busy.c - a program whose own speed shows whether it is still traced, for
 * utrace's tests of ending a recording (kill -9 of the recorder, a second
 * Ctrl-C, --duration).
 *
 * Usage: busy SECONDS
 *
 * Two threads each call tick() 1000 times, sleep 200 us, and again, for
 * SECONDS seconds. Every 100 ms the main thread prints how fast the calls
 * went in that window:
 *   rate <calls per second>
 * Traced, a call costs microseconds and the rate drops by an order of
 * magnitude; untraced it is set by the sleeps. SIGINT is ignored (a test
 * stops the recorder with it, not the program). At the end it prints the
 * "calls" lines (see test/README.md) and exits 0.
 *
 * Expected counts: main 1, tick: whatever the threads managed (counted).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define COUNTED __attribute__((noipa))
#define BUMP(c) atomic_fetch_add_explicit(&(c), 1, memory_order_relaxed)

static _Atomic unsigned long n_main, n_tick;
static _Atomic int done;

COUNTED static void tick(void)
{
	BUMP(n_tick);
}

static void *worker(void *unused)
{
	(void)unused;
	while (!done) {
		for (int i = 0; i < 1000; i++)
			tick();
		usleep(200);
	}
	return NULL;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	BUMP(n_main);
	if (argc != 2) {
		fprintf(stderr, "usage: busy SECONDS\n");
		return 2;
	}
	signal(SIGINT, SIG_IGN);
	double end = now() + atof(argv[1]);
	pthread_t threads[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&threads[i], NULL, worker, NULL);
	unsigned long last = 0;
	double last_time = now();
	while (now() < end) {
		usleep(100000);
		unsigned long calls = n_tick;
		double t = now();
		printf("rate %.0f\n", (calls - last) / (t - last_time));
		fflush(stdout);
		last = calls;
		last_time = t;
	}
	done = 1;
	for (int i = 0; i < 2; i++)
		pthread_join(threads[i], NULL);
	printf("calls %lu main\n", (unsigned long)n_main);
	printf("calls %lu tick\n", (unsigned long)n_tick);
	return 0;
}
