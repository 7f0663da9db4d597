/*
 * sites.c - the functions utrace's benchmark (tools/bench.sh) times, one per kind of probe
 * site, each called in a tight loop that times itself.
 *
 * Usage: sites KIND CALLS [THREADS]
 *
 *   KIND     push | endbr64 | single-step | plt | plt-emulated | plt-ifunc | string: which
 *            function the loop calls
 *   CALLS    calls per thread
 *   THREADS  threads running the loop at once (default 1)
 *
 * Prints one line: "sites: KIND calls=C threads=T ns_per_call=X calls_per_s=Y", where
 * ns_per_call is the wall time of one thread's loop (CLOCK_MONOTONIC) divided by its calls,
 * averaged over the threads, and calls_per_s counts the calls of all threads over the longest
 * loop.
 *
 * The probed function of each kind, and what the kernel does with a uprobe on its first
 * instruction (tools/bench.sh checks the instruction with objdump):
 *
 *   push         push_first: saves a callee-saved register first (`push %rbx`): emulated.
 *   endbr64      endbr64_first (endbr64.c, built with -fcf-protection=branch): the same body
 *                behind `endbr64`, which the kernel single-steps.
 *   single-step  single_step_first: a leaf whose first instruction reads a global through a
 *                RIP-relative `mov`: single-stepped out of line.
 *   plt          labs@plt: the loop calls labs() through the program's PLT (built with
 *                -fno-builtin so the call stays a call); the stub starts with an indirect
 *                RIP-relative `jmp`, single-stepped. labs itself starts with a `mov` and has
 *                no instruction the kernel emulates before its `ret`, so utrace keeps the
 *                probe on the stub.
 *   plt-emulated pthread_getspecific@plt: the same kind of stub, into a libc function whose
 *                second instruction (`ja`, after a `cmp`) the kernel emulates: utrace probes
 *                the call there instead of on the stub.
 *   plt-ifunc    memcmp@plt: the same kind of stub, into libc's ifunc memcmp, whose
 *                implementation the resolver picks for the CPU (__memcmp_avx2_movbe here: `cmp`,
 *                then a `jb` the kernel emulates): utrace probes the call there when it knows the
 *                process's choice (libc6-dbg installed, no GLIBC_TUNABLES), on the stub
 *                otherwise.
 *   string       push_string: push_first's shape with a string argument (20 bytes), for the
 *                cost of capturing it (-A push_string@arg1/s).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROBED __attribute__((noinline, noclone))

long endbr64_first(long x); /* endbr64.c */

/* Read by single_step_first; not static, so the read is one RIP-relative mov in a PIE. */
long bench_offset = 1;

/* The empty asm claims %rbx, so the function must save it first: it starts with `push %rbx`. */
PROBED long push_first(long x)
{
	__asm__ volatile("" ::: "rbx");
	return x * 3 + 1;
}

/* push_first's shape, given a C string. */
PROBED long push_string(const char *text)
{
	__asm__ volatile("" ::: "rbx");
	return text[0] * 3 + 1;
}

/* A leaf whose first instruction is `mov bench_offset(%rip), %rax`. */
PROBED long single_step_first(long x)
{
	return bench_offset + x;
}

enum kind { PUSH, ENDBR64, SINGLE_STEP, PLT, PLT_EMULATED, PLT_IFUNC, STRING };

static const char *const kind_names[] = { "push",	  "endbr64",   "single-step", "plt",
					   "plt-emulated", "plt-ifunc", "string" };

/* The buffers the plt-ifunc loop compares: equal, so memcmp reads them through. */
static char bench_left[16] = "sixteen bytes..", bench_right[16] = "sixteen bytes..";

/* The key the plt-emulated loop reads. */
static pthread_key_t bench_key;

struct loop {
	enum kind kind;
	long calls;
	double seconds;
	long sum;
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One loop per kind, so each iteration is one direct call and nothing else of note. */
static void *run_loop(void *arg)
{
	struct loop *loop = arg;
	long sum = 0;
	double start = now();

	switch (loop->kind) {
	case PUSH:
		for (long i = 0; i < loop->calls; i++)
			sum += push_first(i);
		break;
	case ENDBR64:
		for (long i = 0; i < loop->calls; i++)
			sum += endbr64_first(i);
		break;
	case SINGLE_STEP:
		for (long i = 0; i < loop->calls; i++)
			sum += single_step_first(i);
		break;
	case PLT:
		for (long i = 0; i < loop->calls; i++)
			sum += labs(i - loop->calls / 2);
		break;
	case PLT_EMULATED:
		for (long i = 0; i < loop->calls; i++)
			sum += pthread_getspecific(bench_key) == NULL;
		break;
	case PLT_IFUNC:
		for (long i = 0; i < loop->calls; i++)
			/* A length that changes, or the compiler hoists the pure call out of the loop. */
			sum += memcmp(bench_left, bench_right, sizeof(bench_left) - (size_t)(i & 1)) == 0;
		break;
	case STRING: {
		char text[] = "a string of 20 bytes";
		for (long i = 0; i < loop->calls; i++) {
			text[0] = (char)('a' + i % 26);
			sum += push_string(text);
		}
		break;
	}
	}
	loop->seconds = now() - start;
	loop->sum = sum;
	return NULL;
}

int main(int argc, char **argv)
{
	enum kind kind = PUSH;
	int known = 0;

	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: sites push|endbr64|single-step|plt|plt-emulated|plt-ifunc|string CALLS [THREADS]\n");
		return 2;
	}
	for (int k = PUSH; k <= STRING; k++) {
		if (strcmp(argv[1], kind_names[k]) == 0) {
			kind = (enum kind)k;
			known = 1;
		}
	}
	long calls = strtol(argv[2], NULL, 10);
	int threads = argc == 4 ? atoi(argv[3]) : 1;
	if (!known || calls <= 0 || threads < 1 || threads > 64) {
		fprintf(stderr, "sites: bad arguments\n");
		return 2;
	}

	struct loop loops[64];
	pthread_t ids[64];
	if (pthread_key_create(&bench_key, NULL) != 0)
		return 1;
	for (int t = 0; t < threads; t++) {
		loops[t] = (struct loop){ .kind = kind, .calls = calls };
		if (threads == 1)
			run_loop(&loops[t]);
		else if (pthread_create(&ids[t], NULL, run_loop, &loops[t]) != 0) {
			fprintf(stderr, "sites: cannot start a thread\n");
			return 1;
		}
	}
	double total_seconds = 0, longest = 0;
	long sum = 0;
	for (int t = 0; t < threads; t++) {
		if (threads > 1)
			pthread_join(ids[t], NULL);
		total_seconds += loops[t].seconds;
		if (loops[t].seconds > longest)
			longest = loops[t].seconds;
		sum += loops[t].sum;
	}
	printf("sites: %s calls=%ld threads=%d ns_per_call=%.2f calls_per_s=%.0f checksum=%ld\n",
	       kind_names[kind], calls, threads, total_seconds / threads / (double)calls * 1e9,
	       (double)calls * threads / longest, sum);
	return 0;
}
