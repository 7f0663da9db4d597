/*
 * pltleak.c - PLT calls into library functions that are also called without the program's
 * PLT: by libc itself (strdup calls malloc and strlen inside libc) and by the program through a
 * function pointer (in a PIE, a pointer to malloc holds libc's malloc, not the stub). A
 * `name@plt` count is the calls through that stub only, whatever probe utrace puts where
 * (built with -fno-builtin, so every call below stays a call).
 *
 * Usage: pltleak N    (N rounds; prints "calls <count> <name>" for each PLT call it counts)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 100;
	/* volatile: the compiler may not turn the calls through it back into direct ones. */
	void *(*volatile allocate)(size_t) = malloc;
	unsigned long n_malloc = 0, n_free = 0, n_strdup = 0, n_strlen = 0, n_getspecific = 0,
		      n_getenv = 0;
	pthread_key_t key;
	size_t length = 0;

	if (pthread_key_create(&key, NULL) != 0)
		return 1;
	for (long i = 0; i < rounds; i++) {
		char *block = malloc(32 + i % 16);
		n_malloc++;
		char *copy = strdup("a string libc measures and copies");
		n_strdup++;
		length += strlen(copy);
		n_strlen++;
		char *other = allocate(16);
		if (pthread_getspecific(key) == NULL)
			length++;
		n_getspecific++;
		if (getenv("PLTLEAK_UNSET") == NULL)
			length++;
		n_getenv++;
		free(block);
		free(copy);
		free(other);
		n_free += 3;
	}
	printf("length %zu\n", length);
	printf("calls %lu malloc@plt\n", n_malloc);
	printf("calls %lu free@plt\n", n_free);
	printf("calls %lu strdup@plt\n", n_strdup);
	printf("calls %lu strlen@plt\n", n_strlen);
	printf("calls %lu pthread_getspecific@plt\n", n_getspecific);
	printf("calls %lu getenv@plt\n", n_getenv);
	return 0;
}
