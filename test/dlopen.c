/*
 * dlopen.c - loads a library at run time, for `utrace record --nest-lib`.
 *
 * Usage: dlopen PATH-OF-libcount.so
 *
 * dlopen()s the library, looks up lib_outer and lib_report, calls lib_outer(10) five times
 * straight away (the first call follows dlopen's return at once) and lets the library print
 * its own counts: 5 lib_outer, 50 lib_inner, 50 lib_static (see libcount.c).
 */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	void *library;
	int (*outer)(int);
	void (*report)(void);
	long total = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: dlopen PATH-OF-libcount.so\n");
		return 2;
	}
	library = dlopen(argv[1], RTLD_NOW);
	if (!library) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	outer = (int (*)(int))dlsym(library, "lib_outer");
	report = (void (*)(void))dlsym(library, "lib_report");
	if (!outer || !report) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		return 1;
	}
	for (int i = 0; i < 5; i++)
		total += outer(10);
	printf("total %ld\n", total);
	report();
	return 0;
}
