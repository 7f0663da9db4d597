/* Calls whose arguments and return values utrace captures (-A, -R). The program prints, for each
 * call, the line utrace's replay must show for it ("add(2, 3) = 5;"), and for the recursive fib,
 * the whole tree of its calls, so a test compares the two line by line. Every string argument is
 * in memory the program has written (a page the kernel has mapped), and every function uses what
 * it is given, so the compiler keeps both. */
#include <stdio.h>
#include <string.h>

__attribute__((noinline)) long add(long a, long b)
{
	return a + b;
}

__attribute__((noinline)) long many(long a1, long a2, long a3, long a4, long a5, long a6,
				    long a7, long a8)
{
	return a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8;
}

static char reply[32];

/* Returns "hello, " and the length of `who`, or "nobody" for NULL. */
__attribute__((noinline)) const char *greet(const char *who)
{
	if (!who)
		snprintf(reply, sizeof(reply), "nobody");
	else
		snprintf(reply, sizeof(reply), "hello, %zu", strlen(who));
	return reply;
}

__attribute__((noinline)) unsigned long narrow(unsigned long value)
{
	return value * 3;
}

/* Each call of fib: its argument, depth, and (once it returns) its result and whether it made a
 * call, in the order the calls started. */
static struct {
	long n, result;
	int depth, parent;
} calls[64];
static int call_count, current = -1;

__attribute__((noinline)) long fib(long n)
{
	int me = call_count++, parent = current;
	long result;

	calls[me].n = n;
	calls[me].parent = parent;
	calls[me].depth = parent < 0 ? 0 : calls[parent].depth + 1;
	current = me;
	result = n < 2 ? n : fib(n - 1) + fib(n - 2);
	current = parent;
	calls[me].result = result;
	return result;
}

/* Prints the tree of call `me` and its children as utrace's replay shows it (indented two spaces
 * a level, from the level of fib's caller plus one). */
static void print_tree(int me, int base)
{
	int indent = 2 * (base + calls[me].depth), child, leaf = 1;

	for (child = me + 1; child < call_count; child++)
		if (calls[child].parent == me)
			leaf = 0;
	if (leaf) {
		printf("%*sfib(%ld) = %ld;\n", indent, "", calls[me].n, calls[me].result);
		return;
	}
	printf("%*sfib(%ld) {\n", indent, "", calls[me].n);
	for (child = me + 1; child < call_count; child++)
		if (calls[child].parent == me)
			print_tree(child, base);
	printf("%*s} = %ld; /* fib */\n", indent, "", calls[me].result);
}

int main(void)
{
	char world[] = "world\n\"quoted\"";
	char long_name[101];
	long result;

	memset(long_name, 'x', 100);
	long_name[100] = 0;
	printf("  add(2, 3) = %ld;\n", add(2, 3));
	printf("  add(-5, %ld) = %ld;\n", 1L << 40, add(-5, 1L << 40));
	result = many(1, -2, 3, -4, 5, -6, 7, -8000000000L);
	printf("  many(1, -2, 3, -4, 5, -6, 7, -8000000000) = %ld;\n", result);
	printf("  greet(\"world\\n\\\"quoted\\\"\") = \"%s\";\n", greet(world));
	printf("  greet((null)) = \"%s\";\n", greet(NULL));
	printf("  greet(\"%.64s\"...) = \"%s\";\n", long_name, greet(long_name));
	result = narrow(0x1234567890abUL);
	printf("  narrow(%lu, 0x%x) = 0x%x;\n", 0x1234567890abUL & 0xff,
	       (unsigned)(0x1234567890abUL & 0xffffffff), (unsigned)(result & 0xffffffff));
	fib(5);
	print_tree(0, 1);
	return 0;
}
