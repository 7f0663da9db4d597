/*
 * forks.c - forks children one after another, for utrace's --follow when the recorder is killed
 * while a child is held at its fork.
 *
 * Usage: forks N
 *
 * Forks N children, one at a time; each calls child_work 3 times and exits with 7; the parent
 * waits for each and counts those that ended with 7. It prints
 *
 *   forked N, N ended with 7
 *
 * and exits 0 if every child did, 1 otherwise. A child left stopped would hang the parent.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define COUNTED __attribute__((noipa))

static volatile unsigned long sink;

COUNTED void child_work(unsigned long x)
{
	sink += x * 2654435761UL;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 10, good = 0;

	for (long i = 0; i < n; i++) {
		pid_t child = fork();
		int status;

		if (child < 0) {
			perror("fork");
			return 1;
		}
		if (child == 0) {
			for (int k = 0; k < 3; k++)
				child_work(k);
			_exit(7);
		}
		if (waitpid(child, &status, 0) == child && WIFEXITED(status) &&
		    WEXITSTATUS(status) == 7)
			good++;
	}
	printf("forked %ld, %ld ended with 7\n", n, good);
	return good == n ? 0 : 1;
}
