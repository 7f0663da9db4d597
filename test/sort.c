/*
 * sort.c - the bundled sample program for utrace.
 *
 * Usage: sort [N]      (N defaults to 5000)
 *
 * Fills an array with N pseudo-random integers (fixed seed), sorts one copy
 * with its own recursive merge sort and another with libc qsort(), checks
 * that both are sorted and equal, prints a result line and then one
 * "calls <count> <name>" line per counted function (see test/README.md).
 *
 * Expected counts for N >= 1 (all exact):
 *   main 1, fill_random 1, next_random N, merge_sort 2N-1, merge N-1,
 *   is_sorted 2, checksum 1, qsort@plt 1,
 *   compare_ints: whatever libc's qsort needs (counted by the program).
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNTED __attribute__((noipa))
#define BUMP(c) atomic_fetch_add_explicit(&(c), 1, memory_order_relaxed)

static _Atomic unsigned long n_main, n_fill_random, n_next_random,
    n_merge_sort, n_merge, n_compare_ints, n_is_sorted, n_checksum,
    n_qsort_plt;

/* 32-bit linear congruential generator, fixed constants: deterministic. */
COUNTED uint32_t next_random(uint32_t *state)
{
	BUMP(n_next_random);
	*state = *state * 1664525u + 1013904223u;
	return *state >> 8;
}

COUNTED void fill_random(int *a, size_t n, uint32_t seed)
{
	BUMP(n_fill_random);
	uint32_t state = seed;
	for (size_t i = 0; i < n; i++)
		a[i] = (int)(next_random(&state) % 1000000u) - 500000;
}

/* Merges the sorted halves a[0..mid) and a[mid..n) through tmp. */
COUNTED void merge(int *a, int *tmp, size_t mid, size_t n)
{
	BUMP(n_merge);
	size_t i = 0, j = mid, k = 0;
	while (i < mid && j < n)
		tmp[k++] = (a[j] < a[i]) ? a[j++] : a[i++];
	while (i < mid)
		tmp[k++] = a[i++];
	while (j < n)
		tmp[k++] = a[j++];
	memcpy(a, tmp, n * sizeof *a);
}

/* For n >= 1 this is called 2n-1 times in all, and merge() n-1 times. */
COUNTED void merge_sort(int *a, int *tmp, size_t n)
{
	BUMP(n_merge_sort);
	if (n < 2)
		return;
	size_t mid = n / 2;
	merge_sort(a, tmp, mid);
	merge_sort(a + mid, tmp + mid, n - mid);
	merge(a, tmp, mid, n);
}

/* qsort callback: called by libc through a function pointer. */
COUNTED int compare_ints(const void *pa, const void *pb)
{
	BUMP(n_compare_ints);
	int a = *(const int *)pa, b = *(const int *)pb;
	return (a > b) - (a < b);
}

COUNTED int is_sorted(const int *a, size_t n)
{
	BUMP(n_is_sorted);
	for (size_t i = 1; i < n; i++)
		if (a[i - 1] > a[i])
			return 0;
	return 1;
}

COUNTED unsigned long checksum(const int *a, size_t n)
{
	BUMP(n_checksum);
	unsigned long sum = 0;
	for (size_t i = 0; i < n; i++)
		sum = sum * 31u + (unsigned)a[i];
	return sum;
}

int main(int argc, char **argv)
{
	BUMP(n_main);
	size_t n = 5000;
	if (argc > 1) {
		char *end;
		long v = strtol(argv[1], &end, 10);
		if (*end != '\0' || v < 1 || v > 100000000) {
			fprintf(stderr, "usage: sort [N]   (1 <= N)\n");
			return 2;
		}
		n = (size_t)v;
	}

	int *a = malloc(n * sizeof *a);
	int *b = malloc(n * sizeof *b);
	int *tmp = malloc(n * sizeof *tmp);
	if (!a || !b || !tmp) {
		fprintf(stderr, "sort: out of memory\n");
		return 1;
	}

	fill_random(a, n, 12345u);
	memcpy(b, a, n * sizeof *a);

	merge_sort(a, tmp, n);
	BUMP(n_qsort_plt);
	qsort(b, n, sizeof *b, compare_ints);

	int ok = is_sorted(a, n) & is_sorted(b, n) &&
		 memcmp(a, b, n * sizeof *a) == 0;
	printf("sorted %zu integers: %s, first %d, last %d, checksum %lu\n", n,
	       ok ? "ok" : "MISMATCH", a[0], a[n - 1], checksum(a, n));

	printf("calls %lu main\n", n_main);
	printf("calls %lu fill_random\n", n_fill_random);
	printf("calls %lu next_random\n", n_next_random);
	printf("calls %lu merge_sort\n", n_merge_sort);
	printf("calls %lu merge\n", n_merge);
	printf("calls %lu compare_ints\n", n_compare_ints);
	printf("calls %lu is_sorted\n", n_is_sorted);
	printf("calls %lu checksum\n", n_checksum);
	printf("calls %lu qsort@plt\n", n_qsort_plt);

	free(a);
	free(b);
	free(tmp);
	return ok ? 0 : 1;
}
