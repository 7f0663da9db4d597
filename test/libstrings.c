/*
 * libstrings.c - a shared library (built by the tests with -shared -fPIC -fno-builtin) whose PLT
 * calls into libc are probed where they land under `--nest-lib libstrings*`: strlen and memcmp
 * (ifuncs: their implementations), pthread_mutex_lock and pthread_mutex_unlock (plain
 * functions), and memset through a tail jump (`jmp memset@plt`), which keeps its stub. The
 * program that uses it (usestrings.c) calls strlen and memcmp through its own PLT as well, and
 * libc calls the same implementations inside printf: each stub's count is its own calls only.
 *
 * lib_strings_report() prints "calls <count> libstrings.so:<name>" for each.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static unsigned long n_strlen, n_memcmp, n_lock, n_unlock, n_memset;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* A tail call: gcc -O2 leaves `jmp memset@plt`. */
__attribute__((noipa)) static void *clear(void *buffer, size_t size)
{
	n_memset++;
	return memset(buffer, 0, size);
}

long lib_strings(const char *text, long rounds)
{
	char copy[64];
	long sum = 0;

	for (long i = 0; i < rounds; i++) {
		pthread_mutex_lock(&lock);
		n_lock++;
		sum += (long)strlen(text);
		n_strlen++;
		if (i % 3 == 0) {
			sum += memcmp(text, "pear", 4) == 0;
			n_memcmp++;
		}
		pthread_mutex_unlock(&lock);
		n_unlock++;
		clear(copy, sizeof(copy));
		sum += copy[i % sizeof(copy)];
	}
	return sum;
}

void lib_strings_report(void)
{
	printf("calls %lu libstrings.so:strlen@plt\n", n_strlen);
	printf("calls %lu libstrings.so:memcmp@plt\n", n_memcmp);
	printf("calls %lu libstrings.so:pthread_mutex_lock@plt\n", n_lock);
	printf("calls %lu libstrings.so:pthread_mutex_unlock@plt\n", n_unlock);
	printf("calls %lu libstrings.so:memset@plt\n", n_memset);
}
