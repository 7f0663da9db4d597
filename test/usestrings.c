/*
 * usestrings.c - calls into libstrings.so (linked with -lstrings and an $ORIGIN runpath by the
 * tests), and calls strlen and memcmp through its own PLT too, other numbers of times: the
 * landed probes in libc's strlen and memcmp see both files' calls (and libc's own), and each
 * stub counts its own.
 *
 * Usage: usestrings N    (N rounds of the library's loop; prints "calls <count> <file>:<name>")
 * With USESTRINGS_WAIT=1 in the environment it first prints "ready" and waits for SIGUSR1, so
 * that a recorder can attach (-p) before it calls anything.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wait_for_usr1.h"

long lib_strings(const char *text, long rounds);
void lib_strings_report(void);

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 100;
	unsigned long n_strlen = 0, n_memcmp = 0;
	const char *words[] = { "pear", "apple", "fig" };
	const char *wait = getenv("USESTRINGS_WAIT");
	long sum = 0;

	if (wait && wait[0] == '1')
		wait_for_usr1();

	for (long i = 0; i < rounds; i++) {
		const char *word = words[i % 3];

		sum += (long)strlen(word) + (long)strlen(argv[0]);
		n_strlen += 2;
		sum += memcmp(word, "fig", 3) == 0;
		n_memcmp++;
		if (i % 2 == 0)
			sum += lib_strings(word, 3);
	}
	printf("sum %ld\n", sum);
	lib_strings_report();
	printf("calls %lu usestrings:strlen@plt\n", n_strlen);
	printf("calls %lu usestrings:memcmp@plt\n", n_memcmp);
	return 0;
}
