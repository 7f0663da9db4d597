/* USDT probes (<sys/sdt.h>, systemtap-sdt-dev): `myapp:tick` with a semaphore, passing (i, 2i),
 * hit only when a tracer listens (MYAPP_TICK_ENABLED()); `myapp:done` fired whether or not anyone listens, passing the
 * count and a constant. Prints what it did:
 *   calls <count> <name>   for its counted functions
 *   ticks <count>          how many times tick fired (0 when nobody listened)
 * Usage: usdt [TICKS] */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

/* The semaphores the notes name (with _SDT_HAS_SEMAPHORES every probe has one): the kernel
 * counts the tracers that listen into it. Only tick's is checked; done fires always. */
unsigned short myapp_tick_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short myapp_done_semaphore __attribute__((unused)) __attribute__((section(".probes")));
#define MYAPP_TICK_ENABLED() __builtin_expect(myapp_tick_semaphore, 0)

static _Atomic unsigned long run_calls;
static unsigned long fired;

__attribute__((noinline)) void run(int ticks)
{
	atomic_fetch_add_explicit(&run_calls, 1, memory_order_relaxed);
	for (int i = 1; i <= ticks; i++) {
		if (MYAPP_TICK_ENABLED()) {
			fired++;
			STAP_PROBE2(myapp, tick, i, 2 * i);
		}
	}
	STAP_PROBE2(myapp, done, ticks, -7);
}

int main(int argc, char **argv)
{
	int ticks = argc > 1 ? atoi(argv[1]) : 5;

	run(ticks);
	printf("calls %lu run\n", run_calls);
	printf("ticks %lu\n", fired);
	return 0;
}
