/*
 * libspacer.c - the second library reopen.c opens (built by the tests with -shared -fPIC): it
 * takes the place libcount.so left, so that libcount.so comes back elsewhere. spacer_step is
 * called by the program, which counts its calls itself.
 */
#define COUNTED __attribute__((noipa))

COUNTED long spacer_step(long x)
{
	return x * 7 + 1;
}
