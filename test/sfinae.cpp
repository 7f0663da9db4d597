// sfinae.cpp - C++ program for utrace: names whose return type holds an expression.
//
// Usage: sfinae [N]     (N values, 1..100000, default 1000)
//
// Function templates chosen by std::enable_if in their return type, as libstdc++'s own
// std::__relocate_a_1 and std::__fill_a1 are, carry that expression in their mangled name
// (`...enable_if<std::is_integral<T>::value, T>::type`): utrace must show them as c++filt
// prints them. The program doubles N integers and N doubles with them, keeping the results in
// a std::vector<long> and a std::vector<double> that grow one element at a time, fills a
// std::vector<int> of N elements with std::fill, checks the sums and prints one
// "calls <count> <name>" line per counted function. Built with -fno-inline (as the tests do),
// libstdc++'s templates std::__relocate_a_1 (vector growth) and std::__fill_a1 (std::fill)
// are functions of the program too.
//
// Expected counts:
//   main 1
//   std::enable_if<std::is_integral<long>::value, long>::type twice<long>(long)   N
//   std::enable_if<std::is_floating_point<double>::value, double>::type twice<double>(double)   N
//   std::enable_if<std::is_integral<int>::value, void>::type
//       fill_with<int>(std::vector<int, std::allocator<int> >&, int)              1
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

#define COUNTED __attribute__((noipa))

namespace counts {
std::atomic<unsigned long> main_, twice_long, twice_double, fill_with_int;

inline void bump(std::atomic<unsigned long> &c)
{
    c.fetch_add(1, std::memory_order_relaxed);
}
} // namespace counts

template <typename T>
COUNTED typename std::enable_if<std::is_integral<T>::value, T>::type twice(T value)
{
    counts::bump(counts::twice_long);
    return value * 2;
}

template <typename T>
COUNTED typename std::enable_if<std::is_floating_point<T>::value, T>::type twice(T value)
{
    counts::bump(counts::twice_double);
    return value * 2.0;
}

template <typename T>
COUNTED typename std::enable_if<std::is_integral<T>::value, void>::type
fill_with(std::vector<T> &values, T value)
{
    counts::bump(counts::fill_with_int);
    std::fill(values.begin(), values.end(), value);
}

int main(int argc, char **argv)
{
    counts::bump(counts::main_);
    long n = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 1000;
    if (n < 1 || n > 100000) {
        std::fprintf(stderr, "usage: sfinae [N]   (1 <= N <= 100000)\n");
        return 2;
    }
    std::vector<long> longs;
    std::vector<double> doubles;
    for (long i = 0; i < n; i++) {
        longs.push_back(twice(i));
        doubles.push_back(twice(static_cast<double>(i)));
    }
    std::vector<int> ints(n);
    fill_with(ints, 3);
    long long_sum = 0, int_sum = 0;
    double double_sum = 0;
    for (long i = 0; i < n; i++) {
        long_sum += longs[i];
        double_sum += doubles[i];
        int_sum += ints[i];
    }
    std::printf("sums %ld %.1f %ld\n", long_sum, double_sum, int_sum);
    std::printf("calls %lu main\n", counts::main_.load());
    std::printf("calls %lu std::enable_if<std::is_integral<long>::value, long>::type twice<long>(long)\n",
                counts::twice_long.load());
    std::printf("calls %lu std::enable_if<std::is_floating_point<double>::value, double>::type "
                "twice<double>(double)\n",
                counts::twice_double.load());
    std::printf("calls %lu std::enable_if<std::is_integral<int>::value, void>::type "
                "fill_with<int>(std::vector<int, std::allocator<int> >&, int)\n",
                counts::fill_with_int.load());
    return 0;
}
