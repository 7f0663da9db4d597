// throws.cpp - the benchmark's C++ program that throws: each round calls
// round_trip, which calls pass twice and thrower, which throws; round_trip
// catches. Prints the wall time per round. With THROWS_WAIT=1 it first prints
// "ready" and waits for SIGUSR1 (for utrace record -p to attach).
//
// Usage: throws ROUNDS
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <pthread.h>
#include <stdexcept>

#define TRACED __attribute__((noipa))

static long total;

TRACED void thrower(int round)
{
    throw std::runtime_error(round % 2 ? "odd" : "even");
}

TRACED int pass(int n, int round)
{
    if (n == 0)
        thrower(round);
    else
        pass(n - 1, round);
    return n;
}

TRACED void round_trip(int round)
{
    try {
        pass(2, round);
    } catch (const std::exception &e) {
        total += e.what()[0];
    }
}

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? std::atol(argv[1]) : 1000;
    const char *wait = std::getenv("THROWS_WAIT");
    if (wait && wait[0] == '1') {
        sigset_t usr1;
        sigemptyset(&usr1);
        sigaddset(&usr1, SIGUSR1);
        pthread_sigmask(SIG_BLOCK, &usr1, nullptr);
        std::printf("ready\n");
        std::fflush(stdout);
        int signal = 0;
        sigwait(&usr1, &signal);
    }
    auto start = std::chrono::steady_clock::now();
    for (long round = 0; round < rounds; round++)
        round_trip(round);
    auto ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    std::printf("throws: rounds=%ld ns_per_round=%.1f total=%ld\n", rounds, ns / rounds, total);
    return 0;
}
