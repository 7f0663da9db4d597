/*
 * exitcode.c - checks that utrace passes exit codes and signals through.
 *
 * Usage: exitcode [CODE | kill]
 *
 * Prints "exitcode: stdout" to stdout and "exitcode: stderr" to stderr, then
 * the "calls" lines (see test/README.md), and
 *   - with CODE (0..255, default 0): exits with CODE;
 *   - with "kill": raises SIGTERM with its default disposition, so the
 *     process dies of the signal and a shell reports status 143 (128 + 15).
 * Output is flushed before raise(), so stdout is the same in both cases.
 *
 * Expected counts: main 1, finish 1.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNTED __attribute__((noipa))
#define BUMP(c) atomic_fetch_add_explicit(&(c), 1, memory_order_relaxed)

static _Atomic unsigned long n_main, n_finish;

/* Prints the counts; with kill != 0 ends the process by SIGTERM. */
COUNTED int finish(int code, int kill)
{
	BUMP(n_finish);
	printf("calls %lu main\n", n_main);
	printf("calls %lu finish\n", n_finish);
	fflush(stdout);
	fflush(stderr);
	if (kill) {
		sigset_t set;
		sigemptyset(&set);
		sigaddset(&set, SIGTERM);
		signal(SIGTERM, SIG_DFL);
		sigprocmask(SIG_UNBLOCK, &set, NULL);
		raise(SIGTERM);
		/* Not reached. */
		fprintf(stderr, "exitcode: SIGTERM did not kill\n");
		return 1;
	}
	return code;
}

int main(int argc, char **argv)
{
	BUMP(n_main);
	int code = 0, kill = 0;
	if (argc > 1) {
		if (strcmp(argv[1], "kill") == 0) {
			kill = 1;
		} else {
			char *end;
			long v = strtol(argv[1], &end, 10);
			if (*end != '\0' || v < 0 || v > 255) {
				fprintf(stderr,
					"usage: exitcode [CODE | kill]\n");
				return 2;
			}
			code = (int)v;
		}
	}
	printf("exitcode: stdout\n");
	fprintf(stderr, "exitcode: stderr\n");
	return finish(code, kill);
}
