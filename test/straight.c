/*
 * straight.c - functions whose first instructions the kernel would single-step but whose first
 * branch it emulates, the shapes libpython's hottest functions have: `test %rsi,%rsi; je`
 * (or_default: a NULL check of its second argument) and `test %rdi,%rdi; js` (clamp: a sign
 * check). utrace probes them on that branch. Each counts its own calls; with 20 rounds or fewer
 * the program also prints the line utrace's replay must show for each call (its first argument
 * and return value, captured at the moved site).
 *
 * Usage: straight N    (N rounds; prints the replay lines, then "calls <count> <name>")
 */
#include <stdio.h>
#include <stdlib.h>

#define PROBED __attribute__((noinline, noclone))

static unsigned long n_or_default, n_clamp;

/* Called on the rare paths only, so the probed functions branch before doing anything. */
PROBED long slow_default(long fallback)
{
	return fallback * 7 + 1;
}

PROBED long or_default(long fallback, const long *value)
{
	if (__builtin_expect(value == NULL, 0))
		return slow_default(fallback);
	n_or_default++;
	return *value + fallback;
}

PROBED long clamp(long x)
{
	if (__builtin_expect(x < 0, 0))
		return slow_default(x);
	n_clamp++;
	return x * 3;
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 100;
	long sum = 0, value = 5;
	unsigned long null_calls = 0, negative_calls = 0;

	for (long i = 0; i < rounds; i++) {
		const long *pointer = i % 10 == 3 ? NULL : &value;
		long x = i % 7 == 2 ? -i : i;
		long a = or_default(i, pointer);
		long b = clamp(x);
		null_calls += pointer == NULL;
		negative_calls += x < 0;
		if (rounds <= 20) {
			printf("  or_default(%ld) = %ld;\n", i, a);
			printf("  clamp(%ld) = %ld;\n", x, b);
		}
		sum += a + b;
	}
	printf("sum %ld\n", sum);
	printf("calls %lu or_default\n", n_or_default + null_calls);
	printf("calls %lu clamp\n", n_clamp + negative_calls);
	printf("calls %lu slow_default\n", null_calls + negative_calls);
	return 0;
}
