/*
 * jumped_into.c - a function that other code jumps into past its first instruction, as glibc's
 * `__mempcpy_avx_unaligned_erms` jumps past `__memcpy_avx_unaligned_erms`'s `mov %rdi,%rax`.
 * `skipped_into` starts with an instruction the kernel single-steps, then straight-line code up
 * to a `nop` it emulates, where a probe could move; `jumper` does its own first step and jumps
 * to the instruction after `skipped_into`'s first, so a probe moved there would count its calls
 * as `skipped_into`'s. Both return a + b + 1.
 *
 * Usage: jumped_into N    (calls skipped_into N times and jumper 2N times; prints
 * "calls <count> <name>")
 */
#include <stdio.h>
#include <stdlib.h>

long skipped_into(long a, long b);
long jumper(long a, long b);

__asm__(".text\n"
	".globl skipped_into\n"
	".type skipped_into, @function\n"
	"skipped_into:\n"
	"	mov %rdi, %rax\n"
	".Lskipped_into_body:\n"
	"	add %rsi, %rax\n"
	"	add $1, %rax\n"
	"	nop\n"
	"	ret\n"
	".size skipped_into, .-skipped_into\n"
	".globl jumper\n"
	".type jumper, @function\n"
	"jumper:\n"
	"	lea (%rdi), %rax\n"
	"	jmp .Lskipped_into_body\n"
	".size jumper, .-jumper\n");

int main(int argc, char **argv)
{
	long n = argc > 1 ? strtol(argv[1], NULL, 10) : 100;
	long sum = 0;

	for (long i = 0; i < n; i++) {
		sum += skipped_into(i, 1);
		sum += jumper(i, 2) + jumper(i, 3);
	}
	printf("sum %ld\n", sum);
	printf("calls %ld skipped_into\n", n);
	printf("calls %ld jumper\n", 2 * n);
	printf("calls 1 main\n");
	return 0;
}
