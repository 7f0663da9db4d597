// The benchmark's start-up measure (tools/bench.sh): a C++ hello-world that prints when its main
// began, CLOCK_REALTIME in ns, so the time from launching `utrace record` to the program's first
// line of its own can be told from the time it takes untraced.
#include <ctime>
#include <iostream>

int main()
{
	timespec now{};
	clock_gettime(CLOCK_REALTIME, &now);
	std::cout << "hello: main at " << now.tv_sec * 1000000000LL + now.tv_nsec << "\n";
	return 0;
}
