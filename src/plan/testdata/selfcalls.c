/* Test fixture for src/plan: a shared library (compiled by the tests with -shared -fPIC, never
 * checked in as a binary) whose exported functions call each other through its own PLT, as
 * semantic interposition asks: outer calls inner (inner@plt) and the ifunc chosen (chosen@plt).
 * Built with -DMAIN instead, the program that calls outer through its PLT. */
#ifdef MAIN
int outer(int x);

int main(int argc, char **argv)
{
	(void)argv;
	return outer(argc) & 1;
}
#else
__attribute__((noipa)) int inner(int x) { return x * 3 + 1; }

static int chosen_generic(int x) { return x + 2; }

static int (*resolve_chosen(void))(int) { return chosen_generic; }

int chosen(int) __attribute__((ifunc("resolve_chosen")));

__attribute__((noipa)) int outer(int x) { return inner(x) + chosen(x); }
#endif
