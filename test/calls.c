/*
 * calls.c - coverage program for utrace: every way a function gets called.
 *
 * Usage: calls [EXIT_CODE]     (EXIT_CODE 0..255, default 0)
 *
 * Runs a fixed workload, prints its results and one "calls <count> <name>"
 * line per counted function (see test/README.md), then exits with EXIT_CODE.
 *
 *   direct recursion     fib(20) in main, fib(10 + i) in thread i
 *   mutual recursion     is_even(25), is_odd(10)
 *   function pointers    ops[] table: op_add, op_sub, op_mul, 10 calls each
 *   libc callback        qsort() of 64 items with compare_items
 *   static function      scramble(), 100 calls
 *   PLT calls            getpid@plt (3), qsort@plt (1),
 *                        pthread_create@plt (4), pthread_join@plt (4)
 *   threads              4 pthreads running worker(); thread i calls
 *                        worker_step 1000 * (i + 1) times
 *
 * Expected counts (independent of EXIT_CODE):
 *   main 1, fib 23573, is_even 18, is_odd 19, op_add 10, op_sub 10,
 *   op_mul 10, scramble 100, worker 4, worker_step 10000, getpid@plt 3,
 *   qsort@plt 1, pthread_create@plt 4, pthread_join@plt 4,
 *   compare_items: whatever libc's qsort needs (counted by the program).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define COUNTED __attribute__((noipa))
#define BUMP(c) atomic_fetch_add_explicit(&(c), 1, memory_order_relaxed)

#define NTHREADS 4

static _Atomic unsigned long n_main, n_fib, n_is_even, n_is_odd, n_op_add,
    n_op_sub, n_op_mul, n_compare_items, n_scramble, n_worker, n_worker_step,
    n_getpid_plt, n_qsort_plt, n_pthread_create_plt, n_pthread_join_plt;

/* Direct recursion: fib(n) makes 2*fib(n+1)-1 calls of fib in all. */
COUNTED unsigned long fib(unsigned n)
{
	BUMP(n_fib);
	if (n < 2)
		return n;
	return fib(n - 1) + fib(n - 2);
}

/* Mutual recursion: is_even(n) or is_odd(n) makes n+1 calls in all. */
COUNTED int is_odd(unsigned n);

COUNTED int is_even(unsigned n)
{
	BUMP(n_is_even);
	if (n == 0)
		return 1;
	return is_odd(n - 1);
}

COUNTED int is_odd(unsigned n)
{
	BUMP(n_is_odd);
	if (n == 0)
		return 0;
	return is_even(n - 1);
}

/* Called only through the ops[] table below. */
COUNTED long op_add(long a, long b)
{
	BUMP(n_op_add);
	return a + b;
}

COUNTED long op_sub(long a, long b)
{
	BUMP(n_op_sub);
	return a - b;
}

COUNTED long op_mul(long a, long b)
{
	BUMP(n_op_mul);
	return a * b;
}

/* Not static and not const, so the compiler must load the pointers. */
long (*ops[3])(long, long) = { op_add, op_sub, op_mul };

struct item {
	int key;
	int id;
};

/* qsort callback, called by libc through a function pointer. */
COUNTED int compare_items(const void *pa, const void *pb)
{
	BUMP(n_compare_items);
	const struct item *a = pa, *b = pb;
	if (a->key != b->key)
		return (a->key > b->key) - (a->key < b->key);
	return (a->id > b->id) - (a->id < b->id);
}

/* A static function: utrace shows it under its C name. */
COUNTED static unsigned long scramble(unsigned long x)
{
	BUMP(n_scramble);
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdUL;
	x ^= x >> 33;
	return x;
}

COUNTED unsigned long worker_step(unsigned long acc, unsigned long i)
{
	BUMP(n_worker_step);
	return acc * 6364136223846793005UL + i + 1442695040888963407UL;
}

struct task {
	unsigned index;
	unsigned long result;
};

/* Thread start routine, called by libc: thread i does 1000*(i+1) steps. */
COUNTED void *worker(void *arg)
{
	BUMP(n_worker);
	struct task *t = arg;
	unsigned long acc = t->index;
	unsigned long steps = 1000UL * (t->index + 1);
	for (unsigned long i = 0; i < steps; i++)
		acc = worker_step(acc, i);
	t->result = acc + fib(10 + t->index);
	return NULL;
}

int main(int argc, char **argv)
{
	BUMP(n_main);
	int code = 0;
	if (argc > 1) {
		char *end;
		long v = strtol(argv[1], &end, 10);
		if (*end != '\0' || v < 0 || v > 255) {
			fprintf(stderr, "usage: calls [EXIT_CODE]   (0..255)\n");
			return 2;
		}
		code = (int)v;
	}

	/* PLT call to a libc function that gcc does not treat as a builtin.
	 * The pid itself is not printed: the output must not vary. */
	int pid_ok = 1;
	for (int i = 0; i < 3; i++) {
		BUMP(n_getpid_plt);
		pid_ok &= getpid() > 0;
	}

	unsigned long f = fib(20);
	int e25 = is_even(25);
	int o10 = is_odd(10);

	long acc = 1;
	for (int i = 0; i < 30; i++)
		acc = ops[i % 3](acc, i + 2);

	struct item items[64];
	for (int i = 0; i < 64; i++) {
		items[i].key = (int)(scramble((unsigned long)i) % 16);
		items[i].id = i;
	}
	BUMP(n_qsort_plt);
	qsort(items, 64, sizeof items[0], compare_items);
	unsigned long order = 0;
	for (int i = 0; i < 64; i++)
		order = order * 131 + (unsigned long)items[i].id;

	unsigned long mixed = 0;
	for (unsigned long i = 64; i < 100; i++)
		mixed ^= scramble(i);

	pthread_t threads[NTHREADS];
	struct task tasks[NTHREADS];
	for (unsigned i = 0; i < NTHREADS; i++) {
		tasks[i].index = i;
		tasks[i].result = 0;
		BUMP(n_pthread_create_plt);
		if (pthread_create(&threads[i], NULL, worker, &tasks[i]) != 0) {
			fprintf(stderr, "calls: pthread_create failed\n");
			return 1;
		}
	}
	for (unsigned i = 0; i < NTHREADS; i++) {
		BUMP(n_pthread_join_plt);
		pthread_join(threads[i], NULL);
	}

	printf("fib(20) = %lu\n", f);
	printf("is_even(25) = %d, is_odd(10) = %d\n", e25, o10);
	printf("ops = %ld\n", acc);
	printf("qsort order = %lu\n", order);
	printf("scramble = %lu\n", mixed);
	for (unsigned i = 0; i < NTHREADS; i++)
		printf("thread %u = %lu\n", i, tasks[i].result);
	printf("pid ok = %d\n", pid_ok);

	printf("calls %lu main\n", n_main);
	printf("calls %lu fib\n", n_fib);
	printf("calls %lu is_even\n", n_is_even);
	printf("calls %lu is_odd\n", n_is_odd);
	printf("calls %lu op_add\n", n_op_add);
	printf("calls %lu op_sub\n", n_op_sub);
	printf("calls %lu op_mul\n", n_op_mul);
	printf("calls %lu compare_items\n", n_compare_items);
	printf("calls %lu scramble\n", n_scramble);
	printf("calls %lu worker\n", n_worker);
	printf("calls %lu worker_step\n", n_worker_step);
	printf("calls %lu getpid@plt\n", n_getpid_plt);
	printf("calls %lu qsort@plt\n", n_qsort_plt);
	printf("calls %lu pthread_create@plt\n", n_pthread_create_plt);
	printf("calls %lu pthread_join@plt\n", n_pthread_join_plt);
	return code;
}
