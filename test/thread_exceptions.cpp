// thread_exceptions.cpp - C++ program for utrace: two threads that throw
// through traced frames at the same time, each catching its own exceptions.
// Traced, this program must behave exactly as untraced.
//
// Usage: thread_exceptions [R]   (R throws per thread, 1..10000, default 200)
//
// Each thread throws R times, through 5 to 150 traced `pass` frames (the depth
// cycles with the round), and catches in catch_through.
//
// Expected counts for R rounds:
//   main 1   worker(int, int) 2   catch_through(int) 2R   thrower() 2R
//   pass(int) the sum of the depths of both threads (main checks it)
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#define COUNTED __attribute__((noipa))

namespace counts {
std::atomic<unsigned long> main_, worker, catch_through, thrower, pass;

inline void bump(std::atomic<unsigned long> &c)
{
    c.fetch_add(1, std::memory_order_relaxed);
}
} // namespace counts

static std::atomic<unsigned long> caught;

COUNTED void thrower()
{
    counts::bump(counts::thrower);
    throw std::runtime_error("boom");
}

// n frames of pass, then the thrower.
COUNTED int pass(int n)
{
    counts::bump(counts::pass);
    if (n <= 1)
        thrower();
    else
        pass(n - 1);
    // Not reached; keeps the calls above from being tail calls.
    return n;
}

COUNTED void catch_through(int frames)
{
    counts::bump(counts::catch_through);
    try {
        pass(frames);
    } catch (const std::runtime_error &) {
        caught.fetch_add(1, std::memory_order_relaxed);
    }
}

// Depth of round `round` of thread `which`: 5..150, the two threads out of step.
static int depth(int which, int round)
{
    return 5 + (round * 37 + which * 71) % 146;
}

COUNTED void worker(int which, int rounds)
{
    counts::bump(counts::worker);
    for (int round = 0; round < rounds; round++)
        catch_through(depth(which, round));
}

int main(int argc, char **argv)
{
    counts::bump(counts::main_);
    int rounds = argc > 1 ? std::atoi(argv[1]) : 200;
    if (rounds < 1 || rounds > 10000) {
        std::fprintf(stderr, "usage: thread_exceptions [R]  (1..10000)\n");
        return 2;
    }
    unsigned long frames = 0;
    for (int which = 0; which < 2; which++)
        for (int round = 0; round < rounds; round++)
            frames += depth(which, round);
    std::thread first(worker, 0, rounds), second(worker, 1, rounds);
    first.join();
    second.join();
    if (caught != 2ul * rounds || counts::pass != frames) {
        std::fprintf(stderr, "caught %lu of %lu\n", caught.load(), 2ul * rounds);
        return 1;
    }
    std::printf("calls %lu main\n", counts::main_.load());
    std::printf("calls %lu worker(int, int)\n", counts::worker.load());
    std::printf("calls %lu catch_through(int)\n", counts::catch_through.load());
    std::printf("calls %lu thrower()\n", counts::thrower.load());
    std::printf("calls %lu pass(int)\n", counts::pass.load());
    return 0;
}
