/*
 * mathcalls.c - PLT calls into two libraries, libm and libc, for `utrace record --lib`,
 * `--no-lib` and `--libname` (built by the tests with -lm). `mathcalls [N]` (1..100000, default
 * 10) calls step(i) N times; each step calls cos once and cbrt twice (libm), strtol once
 * (libc). main calls strtol once more to read N when it is given.
 * See test/README.md.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define COUNTED __attribute__((noipa))

static _Atomic unsigned long n_main, n_step, n_cos, n_cbrt, n_strtol;

/*
 * Read through volatile, so gcc knows no argument at compile time and cannot fold a call into a
 * constant; the two cbrt calls have different arguments, so they are not merged into one.
 */
static volatile double angle = 0.25;
static volatile int digit = 7;

COUNTED static double step(int i)
{
	char text[2] = { (char)('0' + digit), 0 };
	double x, y, z;
	int n;

	atomic_fetch_add_explicit(&n_step, 1, memory_order_relaxed);
	x = cos(i * angle);
	atomic_fetch_add_explicit(&n_cos, 1, memory_order_relaxed);
	y = cbrt(x + 2.0);
	z = cbrt(x - 2.0);
	atomic_fetch_add_explicit(&n_cbrt, 2, memory_order_relaxed);
	n = (int)strtol(text, NULL, 10);
	atomic_fetch_add_explicit(&n_strtol, 1, memory_order_relaxed);
	return y + z + n;
}

int main(int argc, char **argv)
{
	long rounds = 10;
	double sum = 0;

	atomic_fetch_add_explicit(&n_main, 1, memory_order_relaxed);
	if (argc > 1) {
		char *end;

		rounds = strtol(argv[1], &end, 10);
		atomic_fetch_add_explicit(&n_strtol, 1, memory_order_relaxed);
		if (*end || rounds < 1 || rounds > 100000) {
			fprintf(stderr, "usage: mathcalls [N]   (1 <= N <= 100000)\n");
			return 2;
		}
	}
	for (int i = 0; i < rounds; i++)
		sum += step(i);
	printf("sum %.6f\n", sum);
	printf("calls %lu main\n", atomic_load(&n_main));
	printf("calls %lu step\n", atomic_load(&n_step));
	printf("calls %lu cos@plt\n", atomic_load(&n_cos));
	printf("calls %lu cbrt@plt\n", atomic_load(&n_cbrt));
	printf("calls %lu strtol@plt\n", atomic_load(&n_strtol));
	return 0;
}
