/* writer: `emit` calls write() on /dev/null a known number of times, for the kernel stacks of
 * `record -E syscalls --stack sys_write`. `writer [N]` (1..100000, default 25): N calls of emit,
 * one write() each. Prints the counts (see test/README.md). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static _Atomic unsigned long n_main, n_emit, n_writes;

__attribute__((noipa)) void emit(int fd, unsigned long i) {
    n_emit++;
    char byte = (char)i;
    if (write(fd, &byte, 1) == 1) n_writes++;
}

int main(int argc, char **argv) {
    n_main++;
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 25;
    if (n < 1 || n > 100000) {
        fprintf(stderr, "writer: N must be 1..100000\n");
        return 2;
    }
    int fd = open("/dev/null", O_WRONLY);
    if (fd < 0) {
        perror("writer: /dev/null");
        return 1;
    }
    for (long i = 0; i < n; i++) emit(fd, (unsigned long)i);
    close(fd);
    printf("calls %lu main\n", n_main);
    printf("calls %lu emit\n", n_emit);
    printf("writes %lu\n", n_writes);
    return 0;
}
