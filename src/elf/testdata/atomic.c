/* Functions whose first instruction is an atomic update, which the kernel cannot probe:
 * compiled with -O2 -fcf-protection=none each starts with `lock addq $1, counter(%rip)`. */

static unsigned long hits;
static unsigned long misses;
static unsigned long total;

__attribute__((noinline)) void count_hit(void) { __atomic_fetch_add(&hits, 1, __ATOMIC_RELAXED); }

__attribute__((noinline)) int count_miss(const int *value)
{
    __atomic_fetch_add(&misses, 1, __ATOMIC_RELAXED);
    return *value * 3;
}

/* Not atomic first: the probe stays at the entry. */
__attribute__((noinline)) unsigned long plain_total(unsigned long add)
{
    total += add;
    return total;
}

int main(int argc, char **argv)
{
    (void)argv;
    for (int i = 0; i < argc; i++) {
        count_hit();
    }
    int three = 3;
    return count_miss(&three) + (int)plain_total((unsigned long)argc) > 1000;
}
