/*
 * uselib.c - calls into libcount.so (linked with -lcount and an $ORIGIN runpath by the tests):
 * lib_outer(10) five times, so 5 lib_outer, 50 lib_inner and 50 lib_static calls.
 */
#include <stdio.h>

int lib_outer(int n);
void lib_report(void);

int main(void)
{
	long total = 0;

	for (int i = 0; i < 5; i++)
		total += lib_outer(10);
	printf("total %ld\n", total);
	lib_report();
	printf("calls 5 lib_outer@plt\n");
	return 0;
}
