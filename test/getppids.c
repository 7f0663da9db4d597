/* getppids: ask_parent makes N getppid system calls, each with the syscall instruction itself
 * (no C library call to probe, no cache to answer it), so the kernel function behind getppid
 * is its direct child under `record -k`: tests/kernel_functions.rs checks that the kernel
 * probes' cost is taken out of both. `getppids N` (0..1000000). Prints the counts (see
 * test/README.md). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>

static unsigned long n_main, n_ask_parent, n_getppid;

static inline long getppid_syscall(void) {
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"((long)SYS_getppid) : "rcx", "r11", "memory");
    return ret;
}

__attribute__((noipa)) void ask_parent(long n) {
    n_ask_parent++;
    for (long i = 0; i < n; i++)
        if (getppid_syscall() > 0) n_getppid++;
}

int main(int argc, char **argv) {
    n_main++;
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 10;
    if (n < 0 || n > 1000000) {
        fprintf(stderr, "getppids: N must be 0..1000000\n");
        return 2;
    }
    ask_parent(n);
    printf("calls %lu main\n", n_main);
    printf("calls %lu ask_parent\n", n_ask_parent);
    printf("getppid %lu\n", n_getppid);
    return 0;
}
