/*
 * libcount.c - a shared library for `utrace record --nest-lib` (built by the tests with
 * -shared -fPIC). lib_outer(n) calls lib_inner n times: calls between functions inside the
 * library. lib_report() prints the library's own counts ("calls <count> <name>"); lib_counts()
 * hands them to a program that adds them up across the library's loads (each starts them at 0).
 */
#include <stdatomic.h>
#include <stdio.h>

#define COUNTED __attribute__((noipa))

static _Atomic unsigned long n_lib_outer, n_lib_inner, n_lib_static;

COUNTED static int lib_static(int x)
{
	atomic_fetch_add_explicit(&n_lib_static, 1, memory_order_relaxed);
	return x * 3;
}

COUNTED int lib_inner(int x)
{
	atomic_fetch_add_explicit(&n_lib_inner, 1, memory_order_relaxed);
	return lib_static(x) + 1;
}

COUNTED int lib_outer(int n)
{
	int sum = 0;

	atomic_fetch_add_explicit(&n_lib_outer, 1, memory_order_relaxed);
	for (int i = 0; i < n; i++)
		sum += lib_inner(i);
	return sum;
}

void lib_report(void)
{
	printf("calls %lu lib_outer\n", atomic_load(&n_lib_outer));
	printf("calls %lu lib_inner\n", atomic_load(&n_lib_inner));
	printf("calls %lu lib_static\n", atomic_load(&n_lib_static));
}

/* outer, inner, static. */
void lib_counts(unsigned long counts[3])
{
	counts[0] = atomic_load(&n_lib_outer);
	counts[1] = atomic_load(&n_lib_inner);
	counts[2] = atomic_load(&n_lib_static);
}
