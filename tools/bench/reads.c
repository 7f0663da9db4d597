/* reads: N read()s of one byte from /dev/zero, timed by the program itself, for the cost of a
 * traced kernel function a call (tools/bench/kernels.sh: untraced, then under
 * `record -f main -k vfs_read`). `reads [N]` (default 20000). Prints
 * `reads: calls=N ns_per_call=X`. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 20000;
    int fd = open("/dev/zero", O_RDONLY);
    if (fd < 0 || n < 1) {
        perror("reads: /dev/zero");
        return 1;
    }
    char byte;
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long i = 0; i < n; i++)
        if (read(fd, &byte, 1) != 1) return 1;
    clock_gettime(CLOCK_MONOTONIC, &end);
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    printf("reads: calls=%ld ns_per_call=%.1f\n", n, ns / n);
    return 0;
}
