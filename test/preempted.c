/* A tiny function preempted for a known time inside one of its calls.
 *
 * Usage: preempted CALLS SPIN_MS
 *
 * The main thread and a SCHED_FIFO thread share one CPU. The FIFO thread waits on a pipe; the
 * main thread calls tiny() CALLS times, and in the middle call tiny() writes to the pipe (a raw
 * system call, so no library call is traced under it). The FIFO thread, of a higher class, takes
 * the CPU at once and spins SPIN_MS milliseconds: the main thread stays preempted (runnable) that
 * long inside that one call. Needs CAP_SYS_NICE (root) for SCHED_FIFO.
 *
 * Prints `calls CALLS tiny` and `spun NS` (how long the FIFO thread held the CPU, CLOCK_MONOTONIC,
 * from its wake-up to its last instruction: the least the call was preempted), then `mid-spin 1`
 * where the main thread ran on before the spin ended after all (the kernel's fair server lends a
 * starved normal thread some time: 50 ms a second by default, on 6.12 and later), else
 * `mid-spin 0`.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static unsigned long n_tiny;
static int wake_pipe[2];
static long spin_ms;
static unsigned long long spun_ns;
static volatile int spinning;

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* write(2) without libc: a traced write@plt would be a call under tiny(). */
static long raw_write(int fd, const void *buf, unsigned long len)
{
	long ret;

	asm volatile("syscall"
		     : "=a"(ret)
		     : "0"((long)SYS_write), "D"((long)fd), "S"(buf), "d"(len)
		     : "rcx", "r11", "memory");
	return ret;
}

__attribute__((noipa)) void tiny(int wake)
{
	n_tiny++;
	if (wake)
		raw_write(wake_pipe[1], "x", 1);
}

static void *spinner(void *unused)
{
	char byte;
	unsigned long long start, end;

	(void)unused;
	if (read(wake_pipe[0], &byte, 1) != 1)
		return NULL;
	spinning = 1;
	start = now_ns();
	end = start + spin_ms * 1000000ull;
	while (now_ns() < end)
		;
	spun_ns = now_ns() - start;
	spinning = 0;
	return NULL;
}

int main(int argc, char **argv)
{
	unsigned long calls = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000;
	pthread_attr_t attr;
	struct sched_param param = {.sched_priority = 1};
	cpu_set_t cpu;
	pthread_t thread;
	int error;

	spin_ms = argc > 2 ? strtol(argv[2], NULL, 10) : 50;
	if (pipe(wake_pipe))
		return perror("pipe"), 1;
	/* Both threads on the CPU this one runs on. */
	CPU_ZERO(&cpu);
	CPU_SET(sched_getcpu(), &cpu);
	if (sched_setaffinity(0, sizeof(cpu), &cpu))
		return perror("sched_setaffinity"), 1;
	pthread_attr_init(&attr);
	pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
	pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
	pthread_attr_setschedparam(&attr, &param);
	pthread_attr_setaffinity_np(&attr, sizeof(cpu), &cpu);
	/* It runs before this thread goes on, until it waits on the pipe. */
	error = pthread_create(&thread, &attr, spinner, NULL);
	if (error) {
		fprintf(stderr, "pthread_create (SCHED_FIFO): %s\n", strerror(error));
		return 1;
	}
	int mid_spin = 0;
	for (unsigned long i = 0; i < calls; i++) {
		tiny(i == calls / 2);
		if (i == calls / 2 && spinning)
			mid_spin = 1;
	}
	pthread_join(thread, NULL);
	printf("calls %lu tiny\n", n_tiny);
	printf("spun %llu\n", spun_ns);
	printf("mid-spin %d\n", mid_spin);
	return 0;
}
