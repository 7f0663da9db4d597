/* Sleeps N times (nanosleep of 2 ms) in one function, and writes K bytes-counts to /dev/null in
 * another: for off-CPU time and system calls (-E offcpu, -E syscalls). Prints what it did:
 *   calls <count> <name>    for its counted functions
 *   write <count> <total>   the write() calls made by write_all and the sum of their returns
 * Usage: sleeper [SLEEPS [WRITES [FORK]]]: with FORK non-zero, a forked child does the same. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static _Atomic unsigned long sleep_all_calls, write_all_calls;

__attribute__((noinline)) void sleep_all(int sleeps)
{
	struct timespec nap = {0, 2 * 1000 * 1000};

	atomic_fetch_add_explicit(&sleep_all_calls, 1, memory_order_relaxed);
	for (int i = 0; i < sleeps; i++)
		nanosleep(&nap, NULL);
}

/* Writes 1, 2, ... bytes: each return value tells which write it was. */
__attribute__((noinline)) long write_all(int fd, int writes)
{
	static const char bytes[64];
	long total = 0;

	atomic_fetch_add_explicit(&write_all_calls, 1, memory_order_relaxed);
	for (int i = 0; i < writes; i++)
		total += write(fd, bytes, 1 + i % 32);
	return total;
}

int main(int argc, char **argv)
{
	int sleeps = argc > 1 ? atoi(argv[1]) : 10;
	int writes = argc > 2 ? atoi(argv[2]) : 10;
	int fork_child = argc > 3 && atoi(argv[3]);
	int fd = open("/dev/null", O_WRONLY);
	pid_t child = fork_child ? fork() : -1;
	long total;

	if (fd < 0)
		return 1;
	sleep_all(sleeps);
	total = write_all(fd, writes);
	if (child == 0)
		_exit(0);
	if (child > 0)
		waitpid(child, NULL, 0);
	printf("write %d %ld\n", writes, total);
	printf("calls %lu sleep_all\n", sleep_all_calls);
	printf("calls %lu write_all\n", write_all_calls);
	return 0;
}
