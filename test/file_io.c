/* file_io: write_all writes N bytes to a file one write() at a time, read_all reads M of them
 * back one read() at a time, for the kernel functions of `record -k 'vfs_write,vfs_read'`. The
 * file is a memfd: on a stacked filesystem (overlayfs, as /tmp is in the test guests) each
 * write() would pass through the kernel's write path twice.
 * `file_io N M` (0..100000 each). With FILE_IO_WAIT=1 it first prints "ready" and waits for
 * SIGUSR1, so that a recorder can attach (-p). Prints the counts (see test/README.md). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "wait_for_usr1.h"

static _Atomic unsigned long n_main, n_write_all, n_read_all, n_writes, n_reads;

__attribute__((noipa)) void write_all(int fd, long n) {
    n_write_all++;
    for (long i = 0; i < n; i++)
        if (write(fd, "x", 1) == 1) n_writes++;
}

__attribute__((noipa)) void read_all(int fd, long m) {
    n_read_all++;
    char byte;
    for (long i = 0; i < m; i++)
        if (read(fd, &byte, 1) == 1) n_reads++;
}

int main(int argc, char **argv) {
    n_main++;
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 10;
    long m = argc > 2 ? strtol(argv[2], NULL, 10) : 5;
    if (n < 0 || n > 100000 || m < 0 || m > n) {
        fprintf(stderr, "file_io: N must be 0..100000 and M 0..N\n");
        return 2;
    }
    if (getenv("FILE_IO_WAIT")) wait_for_usr1();
    int fd = memfd_create("file_io", 0);
    if (fd < 0) {
        perror("file_io: memfd_create");
        return 1;
    }
    write_all(fd, n);
    lseek(fd, 0, SEEK_SET);
    read_all(fd, m);
    close(fd);
    printf("calls %lu main\n", n_main);
    printf("calls %lu write_all\n", n_write_all);
    printf("calls %lu read_all\n", n_read_all);
    printf("writes %lu\nreads %lu\n", n_writes, n_reads);
    return 0;
}
