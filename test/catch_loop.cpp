// catch_loop.cpp - C++ program for utrace: the plainest try/catch loop. Each
// round calls thrower, which throws; the loop catches it and calls work. In the
// call tree, work and the catch's own calls (__cxa_begin_catch, __cxa_end_catch)
// belong to main, not to the thrower the exception left.
//
// Usage: catch_loop [R]     (R rounds, 1..1000, default 3)
//
// Expected counts for R rounds: main 1, thrower(int) R, work(int) R.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#define COUNTED __attribute__((noipa))

namespace counts {
std::atomic<unsigned long> main_, thrower, work;
}

static long total;

COUNTED void thrower(int round)
{
    counts::thrower.fetch_add(1, std::memory_order_relaxed);
    throw std::runtime_error(round % 2 ? "odd" : "even");
}

COUNTED void work(int round)
{
    counts::work.fetch_add(1, std::memory_order_relaxed);
    total += round;
}

int main(int argc, char **argv)
{
    counts::main_.fetch_add(1, std::memory_order_relaxed);
    int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
    if (rounds < 1 || rounds > 1000) {
        std::fprintf(stderr, "usage: catch_loop [ROUNDS 1..1000]\n");
        return 2;
    }
    for (int round = 0; round < rounds; round++) {
        try {
            thrower(round);
        } catch (...) {
        }
        work(round);
    }
    std::printf("total %ld\n", total);
    std::printf("calls %lu main\n", counts::main_.load());
    std::printf("calls %lu thrower(int)\n", counts::thrower.load());
    std::printf("calls %lu work(int)\n", counts::work.load());
    return 0;
}
