// A C++ method defined outside its class: its DWARF definition names its declaration in the
// class through DW_AT_specification, where `this` and the types are.
#include <cstdio>

class Counter {
  public:
    int bump(int by);
    int count = 0;
};

int Counter::bump(int by) {
    count += by;
    return count;
}

// Returned through a hidden pointer: a destructor makes the class not trivially copyable.
struct Owned {
    long value;
    ~Owned() { std::printf("%ld\n", value); }
};

__attribute__((noinline)) Owned make(long value) { return Owned{value}; }
__attribute__((noinline)) void reset(Counter &counter) { counter.count = 0; }

int main(int argc, char **) {
    Counter counter;
    counter.bump(argc);
    reset(counter);
    Owned owned = make(argc);
    return counter.bump(2) + (int)owned.value;
}
