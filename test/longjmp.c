/*
 * longjmp.c - setjmp/longjmp and sigsetjmp/siglongjmp across three traced
 * frames, in a loop.
 *
 * Usage: longjmp [ROUNDS]     (default 100)
 *
 * Each round, play() saves its context (setjmp, or sigsetjmp on odd rounds)
 * and calls outer() -> middle() -> inner(); inner() jumps back into play()
 * (longjmp, or siglongjmp on odd rounds) except on every fourth round, when
 * all three return normally. After either, play() calls after_round(). Prints
 * how many rounds jumped and the "calls" lines (see test/README.md).
 *
 * Expected counts (ROUNDS = R): main 1, play 1, outer, middle, inner and
 * after_round R each, _setjmp@plt and __sigsetjmp@plt R/2 each (rounded up
 * and down), longjmp@plt and siglongjmp@plt: the jumps made on even and on odd
 * rounds.
 */
#include <setjmp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define COUNTED __attribute__((noipa))
#define BUMP(c) atomic_fetch_add_explicit(&(c), 1, memory_order_relaxed)

static _Atomic unsigned long n_main, n_play, n_outer, n_middle, n_inner,
    n_after_round, n_setjmp, n_sigsetjmp, n_longjmp, n_siglongjmp;

static jmp_buf plain;
static sigjmp_buf with_mask;
static volatile unsigned long work;

COUNTED void inner(unsigned long round)
{
	BUMP(n_inner);
	work += round;
	if (round % 4 == 3)
		return;
	if (round % 2 == 0) {
		BUMP(n_longjmp);
		longjmp(plain, 1);
	}
	BUMP(n_siglongjmp);
	siglongjmp(with_mask, 1);
}

COUNTED void middle(unsigned long round)
{
	BUMP(n_middle);
	inner(round);
	work += 2;
}

COUNTED void outer(unsigned long round)
{
	BUMP(n_outer);
	middle(round);
	work += 3;
}

COUNTED void after_round(unsigned long round)
{
	BUMP(n_after_round);
	work ^= round;
}

COUNTED unsigned long play(unsigned long rounds)
{
	BUMP(n_play);
	volatile unsigned long jumps = 0;
	for (volatile unsigned long round = 0; round < rounds; round++) {
		int landed;
		if (round % 2 == 0) {
			BUMP(n_setjmp);
			landed = setjmp(plain);
		} else {
			BUMP(n_sigsetjmp);
			landed = sigsetjmp(with_mask, 1);
		}
		if (landed)
			jumps++;
		else
			outer(round);
		after_round(round);
	}
	return jumps;
}

int main(int argc, char **argv)
{
	BUMP(n_main);
	unsigned long rounds = argc > 1 ? strtoul(argv[1], NULL, 10) : 100;
	printf("longjmp: %lu of %lu rounds jumped\n", play(rounds), rounds);
	printf("calls %lu main\n", n_main);
	printf("calls %lu play\n", n_play);
	printf("calls %lu outer\n", n_outer);
	printf("calls %lu middle\n", n_middle);
	printf("calls %lu inner\n", n_inner);
	printf("calls %lu after_round\n", n_after_round);
	printf("calls %lu _setjmp@plt\n", n_setjmp);
	printf("calls %lu __sigsetjmp@plt\n", n_sigsetjmp);
	printf("calls %lu longjmp@plt\n", n_longjmp);
	printf("calls %lu siglongjmp@plt\n", n_siglongjmp);
	return 0;
}
