// exceptions.cpp - C++ program for utrace: exceptions that unwind through
// traced frames. A return probe that replaces the return address on the stack
// (a uretprobe) makes the unwinder find the kernel's trampoline instead of the
// caller, and the program dies with "terminate called after throwing ...";
// traced, this program must behave exactly as untraced.
//
// Usage: exceptions [R]     (each pattern R times, 1..1000, default 3)
// With EXCEPTIONS_WAIT=1 it first prints "ready" and waits for SIGUSR1 (for a
// tracer to attach with -p).
//
// Patterns, each caught where the comment says:
//   - a throw through 1, 2 and 5 traced frames (thrower, plus 0, 1 and 4
//     `pass` frames), caught by catch_through;
//   - a throw through a frame that has a destructor to run (with_guard: the
//     unwinder runs its cleanup and resumes unwinding with _Unwind_Resume);
//   - a catch that rethrows (`throw;`), caught one frame further out;
//   - nested try blocks: an inner catch that does not match, then a catch that
//     throws a new exception from inside its handler;
//   - an exception thrown by the library: std::vector::at out of range calls
//     std::__throw_out_of_range_fmt through the PLT;
//   - a throw caught directly in main's loop;
//   - and after every pattern a normal call (after_catch), so calls that
//     follow a catch are counted too.
//
// Expected counts for R rounds (R = 3 in brackets):
//   main 1                              catch_through(int) 3R (9)
//   thrower(int) 6R (18): 3 in catch_through, 1 each in with_guard,
//     rethrower, nested
//   pass(int) 7R (21): 0 + 1 + 4 frames in catch_through, 2 in with_guard
//   with_guard(int) R   Guard::~Guard() R   rethrower() R   catch_rethrow() R
//   nested() R   catch_out_of_range() R
//   vector_at(std::vector<int, std::allocator<int> > const&, unsigned long)
//     2R (one in range, one not)
//   after_catch(int) 7R (after each of the 7 patterns)
//   __cxa_throw@plt 7R: thrower's and nested's new exception
//   __cxa_rethrow@plt R
//   std::__throw_out_of_range_fmt(char const*, ...)@plt R
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include <pthread.h>

#define COUNTED __attribute__((noipa))

namespace counts {
std::atomic<unsigned long> main_, catch_through, thrower, pass, with_guard,
    guard_dtor, rethrower, catch_rethrow, nested, vector_at, after_catch,
    catch_out_of_range, cxa_throw, cxa_rethrow, throw_out_of_range;

inline void bump(std::atomic<unsigned long> &c)
{
    c.fetch_add(1, std::memory_order_relaxed);
}
} // namespace counts

// Caught exceptions, checked at the end.
static unsigned long caught;

COUNTED void thrower(int tag)
{
    counts::bump(counts::thrower);
    counts::bump(counts::cxa_throw);
    throw std::runtime_error(tag < 0 ? "negative" : "boom");
}

// n frames of pass, then the thrower: the exception unwinds n + 1 frames.
COUNTED int pass(int n)
{
    counts::bump(counts::pass);
    if (n <= 1)
        thrower(n);
    else
        pass(n - 1);
    // Not reached; keeps the calls above from being tail calls.
    return n;
}

COUNTED int catch_through(int frames)
{
    counts::bump(counts::catch_through);
    try {
        if (frames == 1)
            thrower(frames);
        else
            pass(frames - 1);
    } catch (const std::runtime_error &) {
        caught++;
        return 1;
    }
    return 0;
}

struct Guard {
    int *cleaned;
    COUNTED ~Guard();
};

Guard::~Guard()
{
    counts::bump(counts::guard_dtor);
    (*cleaned)++;
}

static int cleanups;

// A frame with something to destroy: the unwinder stops here to run ~Guard,
// then goes on with _Unwind_Resume.
COUNTED int with_guard(int n)
{
    counts::bump(counts::with_guard);
    Guard guard{&cleanups};
    pass(n);
    return n;
}

COUNTED void rethrower()
{
    counts::bump(counts::rethrower);
    try {
        thrower(7);
    } catch (const std::runtime_error &) {
        counts::bump(counts::cxa_rethrow);
        throw;
    }
}

COUNTED int catch_rethrow()
{
    counts::bump(counts::catch_rethrow);
    try {
        rethrower();
    } catch (const std::runtime_error &) {
        caught++;
        return 1;
    }
    return 0;
}

COUNTED int nested()
{
    counts::bump(counts::nested);
    try {
        try {
            thrower(-1);
        } catch (const std::logic_error &) {
            // A runtime_error is not a logic_error: never taken.
            std::puts("nested: wrong handler");
        }
    } catch (const std::runtime_error &outer) {
        try {
            counts::bump(counts::cxa_throw);
            throw std::logic_error(outer.what());
        } catch (const std::logic_error &) {
            caught++;
            return 1;
        }
    }
    return 0;
}

// std::vector::at out of range calls std::__throw_out_of_range_fmt, in
// libstdc++, through this program's PLT.
COUNTED int vector_at(const std::vector<int> &v, unsigned long i)
{
    counts::bump(counts::vector_at);
    return v.at(i);
}

static std::vector<int> *numbers;

COUNTED int catch_out_of_range()
{
    counts::bump(counts::catch_out_of_range);
    try {
        counts::bump(counts::throw_out_of_range);
        return vector_at(*numbers, 10);
    } catch (const std::out_of_range &) {
        caught++;
        return -1;
    }
}

COUNTED int after_catch(int x)
{
    counts::bump(counts::after_catch);
    return x + 1;
}

// With EXCEPTIONS_WAIT=1: says "ready" and waits for SIGUSR1, so that a tracer can attach
// with -p before the first throw.
static void wait_when_asked()
{
    const char *wait = std::getenv("EXCEPTIONS_WAIT");
    if (!wait || wait[0] != '1')
        return;
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, nullptr);
    std::printf("ready\n");
    std::fflush(stdout);
    int signal = 0;
    sigwait(&usr1, &signal);
}

int main(int argc, char **argv)
{
    counts::bump(counts::main_);
    wait_when_asked();
    int rounds = 3;
    if (argc > 1) {
        rounds = std::atoi(argv[1]);
        if (rounds < 1 || rounds > 1000) {
            std::fprintf(stderr, "usage: exceptions [R]  (1..1000)\n");
            return 2;
        }
    }
    std::vector<int> v{1, 2, 3};
    numbers = &v;
    int total = 0;
    int in_range = 0;
    for (int r = 0; r < rounds; r++) {
        for (int frames : {1, 2, 5}) {
            total += catch_through(frames);
            total += after_catch(0);
        }
        try {
            with_guard(2);
        } catch (const std::runtime_error &) {
            caught++;
        }
        total += after_catch(0);
        total += catch_rethrow();
        total += after_catch(0);
        total += nested();
        total += after_catch(0);
        total += catch_out_of_range();
        in_range += vector_at(v, 2);
        total += after_catch(0);
    }
    std::printf("caught %lu, cleanups %d, total %d, in range %d\n", caught,
                cleanups, total, in_range);

    std::printf("calls %lu main\n", counts::main_.load());
    std::printf("calls %lu catch_through(int)\n", counts::catch_through.load());
    std::printf("calls %lu thrower(int)\n", counts::thrower.load());
    std::printf("calls %lu pass(int)\n", counts::pass.load());
    std::printf("calls %lu with_guard(int)\n", counts::with_guard.load());
    std::printf("calls %lu Guard::~Guard()\n", counts::guard_dtor.load());
    std::printf("calls %lu rethrower()\n", counts::rethrower.load());
    std::printf("calls %lu catch_rethrow()\n", counts::catch_rethrow.load());
    std::printf("calls %lu nested()\n", counts::nested.load());
    std::printf("calls %lu vector_at(std::vector<int, std::allocator<int> > "
                "const&, unsigned long)\n",
                counts::vector_at.load());
    std::printf("calls %lu catch_out_of_range()\n",
                counts::catch_out_of_range.load());
    std::printf("calls %lu after_catch(int)\n", counts::after_catch.load());
    std::printf("calls %lu __cxa_throw@plt\n", counts::cxa_throw.load());
    std::printf("calls %lu __cxa_rethrow@plt\n", counts::cxa_rethrow.load());
    std::printf("calls %lu std::__throw_out_of_range_fmt(char const*, ...)@plt\n",
                counts::throw_out_of_range.load());
    return 0;
}
