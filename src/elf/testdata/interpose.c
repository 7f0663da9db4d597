/*
 * interpose.c - a shared library that defines cos, for the binding tests: a program linked with
 * it before -lm has its cos calls bound here, to the first library in load order that defines
 * the symbol, not to libm.
 */
#include <math.h>

double cos(double x)
{
	return 1.0 - x * x / 2.0;
}

double interpose_only(double x)
{
	return x;
}
