/*
 * endbr64.c - the endbr64-first function of sites.c, alone in its file so that only it is built
 * with -fcf-protection=branch: it starts with `endbr64`, then has push_first's body.
 */
long endbr64_first(long x);

__attribute__((noinline, noclone)) long endbr64_first(long x)
{
	__asm__ volatile("" ::: "rbx");
	return x * 3 + 1;
}
