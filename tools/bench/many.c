/*
 * many.c - 10,000 functions, f0000 to f9999: what tools/bench.sh times utrace's attach and
 * detach on. The preprocessor writes them out.
 *
 * Usage: many            calls each once (prints "many: 10000 calls, checksum S")
 *        many SECONDS    calls all of them again and again for SECONDS seconds: a program hot
 *                        in every traced function while utrace detaches (prints "many: N calls,
 *                        checksum S")
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Each body differs (__COUNTER__), so no two functions fold into one. */
#define DEFINE(name) __attribute__((noinline)) long name(long x) { return x + __COUNTER__; }
#define CALL(name) sum = name(sum);

/* Each level appends one decimal digit to the name and applies M to all ten. */
#define DIGIT1(M, p) M(p##0) M(p##1) M(p##2) M(p##3) M(p##4) M(p##5) M(p##6) M(p##7) M(p##8) M(p##9)
#define DIGIT2(M, p)                                                                      \
	DIGIT1(M, p##0) DIGIT1(M, p##1) DIGIT1(M, p##2) DIGIT1(M, p##3) DIGIT1(M, p##4)   \
	DIGIT1(M, p##5) DIGIT1(M, p##6) DIGIT1(M, p##7) DIGIT1(M, p##8) DIGIT1(M, p##9)
#define DIGIT3(M, p)                                                                      \
	DIGIT2(M, p##0) DIGIT2(M, p##1) DIGIT2(M, p##2) DIGIT2(M, p##3) DIGIT2(M, p##4)   \
	DIGIT2(M, p##5) DIGIT2(M, p##6) DIGIT2(M, p##7) DIGIT2(M, p##8) DIGIT2(M, p##9)
#define TEN_THOUSAND(M)                                                                   \
	DIGIT3(M, f0) DIGIT3(M, f1) DIGIT3(M, f2) DIGIT3(M, f3) DIGIT3(M, f4)             \
	DIGIT3(M, f5) DIGIT3(M, f6) DIGIT3(M, f7) DIGIT3(M, f8) DIGIT3(M, f9)

TEN_THOUSAND(DEFINE)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	long sum = 0;
	long rounds = 0;
	double until = argc > 1 ? now_s() + atof(argv[1]) : 0;

	do {
		TEN_THOUSAND(CALL)
		rounds++;
	} while (now_s() < until);
	printf("many: %ld calls, checksum %ld\n", rounds * 10000, sum);
	return 0;
}
