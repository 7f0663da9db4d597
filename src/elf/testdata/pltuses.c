/* PLT stubs used in different ways (built as a PIE with -O2 -fno-builtin): getenv@plt is only
 * called; labs@plt is also the target of a tail jump (a sibling call, `jmp labs@plt`), so a call
 * into labs with the return address of tail_labs's caller goes through the stub too. */
#include <stdlib.h>

__attribute__((noinline)) long tail_labs(long x)
{
	return labs(x);
}

int main(int argc, char **argv)
{
	(void)argv;
	return (getenv("PLTUSES") != NULL) + (int)labs(argc) + (int)tail_labs(-argc);
}
