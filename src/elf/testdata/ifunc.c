/* Test fixture for src/elf: a GNU ifunc called from the same file, which the linker reaches
 * through a PLT stub filled by an R_X86_64_IRELATIVE relocation. */
#include <stdio.h>

static int add_one_generic(int x) { return x + 1; }

static int (*resolve_add_one(void))(int) { return add_one_generic; }

int add_one(int) __attribute__((ifunc("resolve_add_one")));

int main(int argc, char **argv)
{
    (void)argv;
    printf("%d\n", add_one(argc));
    return 0;
}
