/* paths: `target` reached by three call paths with known counts, for the stacks and call graph
 * reports. `paths [SCALE]` (1..1000, default 1): main→a→target 10·SCALE times,
 * main→b→c→target 20·SCALE times, main→target 5·SCALE times. Prints the counts (see
 * test/README.md). */
#include <stdio.h>
#include <stdlib.h>

static _Atomic unsigned long n_main, n_a, n_b, n_c, n_target;
static volatile unsigned long sink;

__attribute__((noipa)) void target(unsigned long x) {
    n_target++;
    sink += x;
}

__attribute__((noipa)) void a(unsigned long x) {
    n_a++;
    target(x);
}

__attribute__((noipa)) void c(unsigned long x) {
    n_c++;
    target(x * 3);
}

__attribute__((noipa)) void b(unsigned long x) {
    n_b++;
    c(x + 1);
}

int main(int argc, char **argv) {
    n_main++;
    long scale = argc > 1 ? strtol(argv[1], NULL, 10) : 1;
    if (scale < 1 || scale > 1000) {
        fprintf(stderr, "paths: SCALE must be 1..1000\n");
        return 2;
    }
    for (long i = 0; i < 10 * scale; i++) a(i);
    for (long i = 0; i < 20 * scale; i++) b(i);
    for (long i = 0; i < 5 * scale; i++) target(i);
    printf("sink %lu\n", sink);
    printf("calls %lu main\n", n_main);
    printf("calls %lu a\n", n_a);
    printf("calls %lu b\n", n_b);
    printf("calls %lu c\n", n_c);
    printf("calls %lu target\n", n_target);
    return 0;
}
