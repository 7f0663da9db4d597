// A C++ method whose `this` and argument utrace captures (-A 'Counter::bump*@arg1/p,arg2'):
// prints the line utrace's replay must show for each call.
#include <cstdio>

struct Counter {
	long total = 0;
	__attribute__((noinline)) long bump(long by);
};

long Counter::bump(long by)
{
	total += by;
	return total;
}

int main()
{
	const long steps[] = {3, -7, 40};
	Counter counter;
	for (long by : steps) {
		long total = counter.bump(by);
		std::printf("  Counter::bump(long)(%p, %ld) = %ld;\n", static_cast<void *>(&counter),
			    by, total);
	}
	return 0;
}
