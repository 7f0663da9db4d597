/* Functions whose DWARF prototypes src/elf/prototypes.rs reads: each kind of parameter and
 * return value it shows, and the kinds that leave a function out. Built at test time with
 * -O0 and with -O2 -fno-inline. */
#include <stdarg.h>
#include <stddef.h>

enum color { RED, GREEN, BLUE };
struct pair { long first, second; };
struct big { long values[4]; };
typedef const char *name_t;

int add(int a, int b) { return a + b; }
long neg(long x) { return -x; }
unsigned char u8(unsigned char c) { return c + 1; }
const char *greet(const char *who) { return who + 1; }
void *mem(void *p, unsigned long n) { return (char *)p + n; }
enum color paint(enum color c) { return c == RED ? BLUE : RED; }

volatile int side_effect;
void nothing(void) { side_effect++; }

int many(int a, int b, int c, int d, int e, int f, int g, long h) {
    return a + b + c + d + e + f + g + (int)h;
}

double half(double x) { return x / 2; }

int sum(int n, ...) {
    va_list args;
    va_start(args, n);
    int total = 0;
    for (int i = 0; i < n; i++)
        total += va_arg(args, int);
    va_end(args);
    return total;
}

struct pair byval(struct pair p) {
    struct pair swapped = {p.second, p.first};
    return swapped;
}

int named(name_t name) { return name[0]; }
_Bool flag(_Bool on) { return !on; }
char letter(char c) { return c + 1; }

/* Returned in registers: the function stays, its return value is not shown. */
struct pair make_pair(long first) {
    struct pair made = {first, first + 1};
    return made;
}
float third(int n) { return n / 3.0f; }

/* Returned through a hidden pointer in %rdi: the parameters move up one register. */
struct big make_big(long first) {
    struct big made = {{first, first, first, first}};
    return made;
}

/* Inlined where it is called directly, and also emitted out of line for its address: the
 * out-of-line copy's DWARF names its type through DW_AT_abstract_origin. */
static inline __attribute__((always_inline)) short twice(short x) { return x * 2; }
short (*volatile twice_pointer)(short) = twice;

#ifdef CLONES
/* GCC clones these with other parameters (`.constprop`: a constant folded in; `.isra`: a
 * pointer replaced by what it points to), whose DWARF still names the original prototype. */
struct four { long a, b, c, d; };
__attribute__((noinline)) static long scale(long x, long factor) { return x * factor; }
__attribute__((noinline)) static long second(struct four *p, long k) { return p->b + k; }
long clones(struct four *p) { return scale(p->a, 7) + scale(p->c, 7) + second(p, p->d) + second(p + 1, 5); }
#endif

int main(int argc, char **argv) {
    (void)argv;
    return add(argc, 1) + (int)neg(2) + u8(3) + greet("x")[0] + (mem(NULL, 0) != NULL) +
           paint(GREEN) + letter('a') + many(1, 2, 3, 4, 5, 6, 7, 8) + (int)half(4) + sum(2, 1, 2) +
           (int)byval((struct pair){1, 2}).first + named("n") + flag(0) +
           (int)make_pair(1).first + (int)third(3) + (int)make_big(1).values[0] + twice(2) +
           twice_pointer(3) + (nothing(), 0);
}
