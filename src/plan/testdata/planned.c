/* Test fixture for src/plan: compiled by the tests (never checked in as a binary), never run.
 * Its functions differ in how their exits are seen: leaf makes no call, caller calls leaf, jumps
 * calls _setjmp (which saves its return address). Its PLT calls differ in where they can be
 * probed: malloc lands on an emulated site in libc, and is also jumped to (tail_malloc: that
 * jump is probed too), calloc is jumped to where thunk_calloc's own probe sits, labs is also
 * jumped to (tail_labs) but has no emulated site, strlen is an ifunc, realpath has two
 * versions, add_one is the program's own ifunc. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static jmp_buf context;

__attribute__((noipa)) int leaf(int x) { return x * 3 + 1; }

__attribute__((noipa)) int caller(int x) { return leaf(x) + leaf(x + 1); }

__attribute__((noipa)) long tail_labs(long x) { return labs(x); }

static int tail_calls;

/* The store keeps the function's probe at its entry, away from the jump. */
__attribute__((noipa)) void *tail_malloc(size_t size)
{
    tail_calls++;
    return malloc(size);
}

/* Its probe moves onto the jump, where the kernel emulates the instruction. */
__attribute__((noipa)) void *thunk_calloc(size_t count, size_t size) { return calloc(count, size); }

__attribute__((noipa)) int jumps(int x)
{
    if (setjmp(context) == 0)
        longjmp(context, x | 1);
    return x;
}

static int add_one_generic(int x) { return x + 1; }

static int (*resolve_add_one(void))(int) { return add_one_generic; }

int add_one(int) __attribute__((ifunc("resolve_add_one")));

int main(int argc, char **argv)
{
    char *copy = malloc(16);
    char *resolved = realpath(argv[0], NULL);
    long n = labs(argc) + tail_labs(-argc) + (long)strlen(argv[0]);
    n += caller(argc) + jumps(argc) + add_one(argc);
    free(copy);
    free(resolved);
    free(tail_malloc(8));
    free(thunk_calloc(2, 8));
    printf("%ld\n", n);
    return 0;
}
