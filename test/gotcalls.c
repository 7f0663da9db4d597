/*
 * gotcalls.c - calls write, malloc and free through its GOT (built with -fno-plt: `call
 * *write@GOTPCREL(%rip)`, no PLT stub), each from a function of its own, a known number of
 * times, free from two (release and main), and prints its counts ("calls <count> <name>").
 *
 * Usage: gotcalls N    (N rounds; exits with N % 7)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned long n_write, n_malloc, n_free, n_free_in_main;

__attribute__((noinline)) void say_dot(void)
{
	n_write++;
	if (write(STDOUT_FILENO, ".", 1) != 1)
		exit(100);
}

__attribute__((noinline)) void release(char *text)
{
	n_free++;
	free(text);
}

__attribute__((noinline)) char *buffer(size_t size)
{
	n_malloc++;
	return malloc(size);
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 10;
	long sum = 0;

	for (long i = 0; i < rounds; i++) {
		char *text = buffer(16 + (size_t)i);

		memset(text, 'x', 16);
		sum += text[i % 16];
		if (i % 2 == 0)
			say_dot();
		if (i % 4 != 3) {
			release(text);
		} else {
			n_free_in_main++;
			free(text);
		}
	}
	printf("\nsum %ld\n", sum);
	printf("calls %lu write@got\n", n_write);
	printf("calls %lu malloc@got\n", n_malloc);
	printf("calls %lu free@got\n", n_free + n_free_in_main);
	return (int)(rounds % 7);
}
