/*
 * ifuncs.c - PLT calls into libc's ifuncs (memcmp, memcpy, memmove, strlen, memset, strchr: the
 * implementation libc's resolver picked for this CPU runs), a known number of times each, while
 * libc itself calls the same implementations inside printf, qsort and strdup. A `name@plt`
 * count is the calls through that stub only, wherever utrace probes them (memcpy and memmove
 * run the same implementation, so their probes share a site). Built with -fno-builtin so every
 * call below stays a call.
 *
 * Usage: ifuncs N    (N rounds; prints "calls <count> <name>" for each PLT call it counts)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int compare_words(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 100;
	unsigned long n_memcmp = 0, n_memcpy = 0, n_memmove = 0, n_strlen = 0, n_memset = 0,
		      n_strchr = 0;
	const char *words[] = { "pear", "apple", "fig", "quince", "banana", "cherry" };
	char buffer[64], other[64];
	long checksum = 0;

	for (long i = 0; i < rounds; i++) {
		memset(buffer, 'a' + (int)(i % 26), sizeof(buffer));
		n_memset++;
		memcpy(other, buffer, sizeof(other));
		n_memcpy++;
		memmove(other + 1, other, 8);
		n_memmove++;
		memcpy(other, buffer, 9);
		n_memcpy++;
		checksum += memcmp(buffer, other, sizeof(buffer)) == 0;
		n_memcmp++;
		buffer[sizeof(buffer) - 1] = '\0';
		checksum += (long)strlen(buffer);
		n_strlen++;
		checksum += strchr(buffer, 'z') != NULL;
		n_strchr++;
		/* libc's own calls of the same implementations: strdup's strlen and memcpy, qsort's
		 * moves, printf's string handling. None goes through the program's PLT. */
		char *copy = strdup(words[i % 6]);
		qsort(words, 6, sizeof(words[0]), compare_words);
		if (i % 50 == 0)
			printf("round %ld: %s %s\n", i, copy, words[0]);
		free(copy);
	}
	printf("checksum %ld\n", checksum);
	printf("calls %lu memcmp@plt\n", n_memcmp);
	printf("calls %lu memcpy@plt\n", n_memcpy);
	printf("calls %lu memmove@plt\n", n_memmove);
	printf("calls %lu strlen@plt\n", n_strlen);
	printf("calls %lu memset@plt\n", n_memset);
	printf("calls %lu strchr@plt\n", n_strchr);
	return 0;
}
