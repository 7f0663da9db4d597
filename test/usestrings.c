/*
 * usestrings.c - calls into libstrings.so (linked with -lstrings and an $ORIGIN runpath by the
 * tests), and calls strlen and memcmp through its own PLT too, other numbers of times: the
 * landed probes in libc's strlen and memcmp see both files' calls (and libc's own), and each
 * stub counts its own.
 *
 * Usage: usestrings N    (N rounds of the library's loop; prints "calls <count> <file>:<name>")
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long lib_strings(const char *text, long rounds);
void lib_strings_report(void);

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 100;
	unsigned long n_strlen = 0, n_memcmp = 0;
	const char *words[] = { "pear", "apple", "fig" };
	long sum = 0;

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
