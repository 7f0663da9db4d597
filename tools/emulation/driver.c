/* tools/emulation/driver.c: calls one function of insns.S N times in a tight loop and prints
 * the nanoseconds per call (CLOCK_MONOTONIC around the loop), for tools/emulation_table.sh.
 *
 *   driver NAME N    ns per call of NAME, on standard output
 *   driver --list    the names, one a line, in the table's order
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define INSNS(X)                                                                               \
    X(push_rbp) X(push_rbx) X(push_r12) X(push_imm8) X(nop) X(xchg_ax_ax) X(nopl_3) X(nopl_4)  \
    X(nopl_5) X(nopw_6) X(nopw_10) X(cs_nopw_10) X(lea_nop) X(endbr64) X(jmp_rel8) X(jmp_rel32) X(call_rel32) X(je_rel8)           \
    X(je_rel32) X(ret) X(mov_rdi_rax) X(mov_load) X(lea) X(sub_rsp) X(xor_eax) X(mov_imm32)    \
    X(test_rsi) X(cmp_imm8) X(movabs) X(mov_fs) X(lock_add)

typedef void insn_fn(long *cell, long zero);
#define DECLARE(name) extern insn_fn name;
INSNS(DECLARE)

static const struct {
    const char *name;
    insn_fn *fn;
} table[] = {
#define ENTRY(name) {#name, name},
    INSNS(ENTRY)
};

int main(int argc, char **argv) {
    size_t count = sizeof table / sizeof table[0];
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < count; i++)
            puts(table[i].name);
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: %s NAME N | --list\n", argv[0]);
        return 2;
    }
    insn_fn *volatile fn = NULL;
    for (size_t i = 0; i < count; i++)
        if (strcmp(argv[1], table[i].name) == 0)
            fn = table[i].fn;
    if (fn == NULL) {
        fprintf(stderr, "%s: no function %s\n", argv[0], argv[1]);
        return 2;
    }
    long n = atol(argv[2]);
    static long cell;
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long i = 0; i < n; i++)
        fn(&cell, 0);
    clock_gettime(CLOCK_MONOTONIC, &end);
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    printf("%.1f\n", n > 0 ? ns / n : 0.0);
    return 0;
}
