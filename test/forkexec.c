/*
 * forkexec.c - a process that forks, for utrace's --follow.
 *
 * Usage: forkexec [PROGRAM [ARGS...]]
 *
 * With FORKEXEC_WAIT=1 in the environment it first prints "ready" and waits
 * for SIGUSR1 (for a tracer to attach with -p).
 *
 * The parent calls parent_work 5 times, forks, waits for the child, then
 * calls parent_work 2 more times. The child calls run_child once, which calls
 * child_work 11 times; then, given PROGRAM, it execs it (which prints its own
 * counts), else it exits. Each process prints its counts with its role in
 * front (see test/README.md):
 *
 *   child calls <count> <name>     (before the exec)
 *   parent calls <count> <name>    (after the child has ended)
 *
 * Expected counts: parent: main 1, parent_work 7, fork@plt 1;
 *                  child: run_child 1, child_work 11 (and main's frame,
 *                  inherited from the parent, never returns in the child).
 * The exit code is the child's.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wait_for_usr1.h"

#define COUNTED __attribute__((noipa))
#define BUMP(c) atomic_fetch_add_explicit(&(c), 1, memory_order_relaxed)

static _Atomic unsigned long n_main, n_parent_work, n_child_work, n_run_child,
    n_fork_plt;

COUNTED unsigned long parent_work(unsigned long x)
{
	BUMP(n_parent_work);
	return x * 2654435761UL + 1;
}

COUNTED unsigned long child_work(unsigned long x)
{
	BUMP(n_child_work);
	return x * 6364136223846793005UL + 3;
}

COUNTED unsigned long run_child(void)
{
	BUMP(n_run_child);
	unsigned long acc = 7;
	for (int i = 0; i < 11; i++)
		acc = child_work(acc);
	return acc;
}

int main(int argc, char **argv)
{
	BUMP(n_main);
	const char *wait = getenv("FORKEXEC_WAIT");
	if (wait && wait[0] == '1')
		wait_for_usr1();
	unsigned long acc = 1;
	for (int i = 0; i < 5; i++)
		acc = parent_work(acc);

	/* Nothing buffered may be copied into the child. */
	fflush(stdout);
	BUMP(n_fork_plt);
	pid_t child = fork();
	if (child < 0) {
		perror("forkexec: fork");
		return 1;
	}
	if (child == 0) {
		unsigned long result = run_child();
		printf("child result = %lu\n", result);
		printf("child calls %lu run_child\n", n_run_child);
		printf("child calls %lu child_work\n", n_child_work);
		fflush(stdout);
		if (argc > 1) {
			execv(argv[1], argv + 1);
			perror("forkexec: exec");
			_exit(127);
		}
		_exit(0);
	}

	int status;
	if (waitpid(child, &status, 0) != child) {
		perror("forkexec: waitpid");
		return 1;
	}
	for (int i = 0; i < 2; i++)
		acc = parent_work(acc);
	printf("parent result = %lu\n", acc);
	printf("parent calls %lu main\n", n_main);
	printf("parent calls %lu parent_work\n", n_parent_work);
	printf("parent calls %lu fork@plt\n", n_fork_plt);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
