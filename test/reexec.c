/*
 * reexec.c - a process whose child execs the same program again, for utrace's
 * --follow: the child's probes from the fork already cover the file it execs.
 *
 * Usage: reexec          (the parent)
 *        reexec child    (what the child execs, through /proc/self/exe)
 *
 * The parent calls work 2 times, forks, waits for the child; the child execs
 * /proc/self/exe child, which calls work 3 times. Each process prints its
 * counts with its role in front (see test/README.md):
 *
 * Expected counts: parent: main 1, work 2, fork@plt 1;
 *                  child (after the exec): main 1, work 3.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define COUNTED __attribute__((noipa))
#define BUMP(c) atomic_fetch_add_explicit(&(c), 1, memory_order_relaxed)

static _Atomic unsigned long n_main, n_work, n_fork_plt;

COUNTED void work(void)
{
	BUMP(n_work);
}

int main(int argc, char **argv)
{
	BUMP(n_main);
	int child = argc > 1 && strcmp(argv[1], "child") == 0;
	for (int i = 0; i < (child ? 3 : 2); i++)
		work();
	if (!child) {
		fflush(stdout);
		BUMP(n_fork_plt);
		pid_t pid = fork();
		if (pid < 0) {
			perror("reexec: fork");
			return 1;
		}
		if (pid == 0) {
			execl("/proc/self/exe", argv[0], "child", (char *)NULL);
			perror("reexec: exec");
			_exit(127);
		}
		int status;
		if (waitpid(pid, &status, 0) != pid) {
			perror("reexec: waitpid");
			return 1;
		}
	}
	const char *role = child ? "child" : "parent";
	printf("%s calls %lu main\n", role, n_main);
	printf("%s calls %lu work\n", role, n_work);
	if (!child)
		printf("%s calls %lu fork@plt\n", role, n_fork_plt);
	return 0;
}
