/*
 * reopen.c - opens a library, closes it and opens it again at another address, for
 * `utrace record --nest-lib 'libcount*' --nest-lib 'libspacer*'`.
 *
 * Usage: reopen PATH-OF-libcount.so PATH-OF-libspacer.so [fork]
 *
 * 1. opens libcount.so, calls lib_outer(10) 3 times, closes it (and checks it is gone);
 * 2. opens libspacer.so (which takes the place libcount.so left), calls spacer_step 4 times;
 * 3. opens libcount.so again (checks it is at another address), calls lib_outer(10) 5 times;
 * 4. closes libspacer.so and opens it again, calls spacer_step 6 times;
 * 5. with "fork": forks a child that calls lib_outer(10) 2 times and spacer_step 3 times, prints
 *    its counts as "child calls <count> <name>" and exits; waits for it;
 * 6. closes both.
 *
 * Counts: 8 lib_outer, 80 lib_inner, 80 lib_static (the library's own counts, added up
 * over both opens), 10 spacer_step. Exit code 0; 3 when a library stayed mapped after dlclose
 * or came back at the same address (then the run tests nothing).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct counted {
	void *handle;
	int (*outer)(int);
	void (*counts)(unsigned long[3]);
};

static void *open_library(const char *path)
{
	void *handle = dlopen(path, RTLD_NOW);

	if (!handle) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		exit(1);
	}
	return handle;
}

static void *symbol(void *handle, const char *name)
{
	void *address = dlsym(handle, name);

	if (!address) {
		fprintf(stderr, "dlsym %s: %s\n", name, dlerror());
		exit(1);
	}
	return address;
}

static struct counted open_counted(const char *path)
{
	struct counted counted;

	counted.handle = open_library(path);
	counted.outer = (int (*)(int))symbol(counted.handle, "lib_outer");
	counted.counts = (void (*)(unsigned long[3]))symbol(counted.handle, "lib_counts");
	return counted;
}

/* Adds the library's counts to the program's before it goes (a reload starts them at 0). */
static void add_counts(struct counted *counted, unsigned long totals[3])
{
	unsigned long counts[3];

	counted->counts(counts);
	for (int i = 0; i < 3; i++)
		totals[i] += counts[i];
}

static void close_library(void *handle, const char *path)
{
	dlclose(handle);
	if (dlopen(path, RTLD_NOW | RTLD_NOLOAD)) {
		fprintf(stderr, "%s is still loaded after dlclose\n", path);
		exit(3);
	}
}

static long spacer_steps(void *spacer, int n, unsigned long *calls)
{
	long (*step)(long) = (long (*)(long))symbol(spacer, "spacer_step");
	long sum = 0;

	for (int i = 0; i < n; i++)
		sum += step(i);
	*calls += n;
	return sum;
}

/* In a child: calls into both libraries, where the parent has them now, and says how often. */
static void child_calls(struct counted *counted, void *spacer)
{
	unsigned long before[3] = { 0 }, after[3] = { 0 }, steps = 0;

	add_counts(counted, before);
	for (int i = 0; i < 2; i++)
		counted->outer(10);
	add_counts(counted, after);
	spacer_steps(spacer, 3, &steps);
	printf("child calls %lu lib_outer\n", after[0] - before[0]);
	printf("child calls %lu lib_inner\n", after[1] - before[1]);
	printf("child calls %lu lib_static\n", after[2] - before[2]);
	printf("child calls %lu spacer_step\n", steps);
	fflush(stdout);
	_exit(0);
}

int main(int argc, char **argv)
{
	unsigned long totals[3] = { 0 }, spacer_calls = 0;
	struct counted counted;
	void *spacer, *first_outer;
	long sum = 0;

	if (argc != 3 && !(argc == 4 && strcmp(argv[3], "fork") == 0)) {
		fprintf(stderr, "usage: reopen PATH-OF-libcount.so PATH-OF-libspacer.so [fork]\n");
		return 2;
	}
	counted = open_counted(argv[1]);
	for (int i = 0; i < 3; i++)
		sum += counted.outer(10);
	add_counts(&counted, totals);
	first_outer = (void *)counted.outer;
	close_library(counted.handle, argv[1]);

	spacer = open_library(argv[2]);
	sum += spacer_steps(spacer, 4, &spacer_calls);

	counted = open_counted(argv[1]);
	if ((void *)counted.outer == first_outer) {
		fprintf(stderr, "%s came back at the same address\n", argv[1]);
		return 3;
	}
	for (int i = 0; i < 5; i++)
		sum += counted.outer(10);
	add_counts(&counted, totals);

	close_library(spacer, argv[2]);
	spacer = open_library(argv[2]);
	sum += spacer_steps(spacer, 6, &spacer_calls);
	if (argc == 4) {
		pid_t child = fork();

		if (child == 0)
			child_calls(&counted, spacer);
		if (child < 0 || waitpid(child, NULL, 0) != child) {
			perror("fork");
			return 1;
		}
	}
	dlclose(spacer);
	dlclose(counted.handle);

	printf("sum %ld\n", sum);
	printf("calls %lu lib_outer\n", totals[0]);
	printf("calls %lu lib_inner\n", totals[1]);
	printf("calls %lu lib_static\n", totals[2]);
	printf("calls %lu spacer_step\n", spacer_calls);
	return 0;
}
