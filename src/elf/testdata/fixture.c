/* Test fixture for src/elf: compiled by the tests (never checked in as a binary).
 * It has libc calls through the PLT (qsort, puts, getpid, strtol, fprintf, abort), a static
 * function, a global function with a weak alias, a global variable, and a function whose
 * unlikely branch GCC splits into a `.cold` fragment at -O2. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int global_counter;

static int compare_ints(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

__attribute__((noinline)) static int sort_and_sum(int *v, int n)
{
    qsort(v, n, sizeof *v, compare_ints);
    int sum = 0;
    for (int i = 0; i < n; i++)
        sum += v[i];
    return sum;
}

__attribute__((cold, noinline)) void report_failure(const char *what)
{
    fprintf(stderr, "failed: %s\n", what);
}

/* The unlikely branch calls a cold function and never returns: GCC moves it to
 * `checked_parse.cold`, which is jumped into, never called. */
__attribute__((noinline)) int checked_parse(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (__builtin_expect(*end != '\0', 0)) {
        report_failure(s);
        puts("bad number");
        abort();
    }
    return (int)v;
}

int fixture_plain(int x) { return x + global_counter; }
int fixture_alias(int x) __attribute__((weak, alias("fixture_plain")));

int fixture_main(int argc, char **argv)
{
    int v[] = {3, 1, 2};
    global_counter = (int)getpid() & 1;
    int n = argc > 1 ? checked_parse(argv[1]) : 0;
    puts("fixture");
    return sort_and_sum(v, 3) + n + fixture_alias(0);
}

#ifndef FIXTURE_LIBRARY
int main(int argc, char **argv) { return fixture_main(argc, argv); }
#endif
