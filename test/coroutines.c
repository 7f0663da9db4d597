/*
 * coroutines.c - two coroutines on stacks of their own (getcontext,
 * makecontext, swapcontext) passing control to each other, and the scheduler
 * they end into.
 *
 * Usage: coroutines [ROUNDS]     (1..10000, default 5)
 *
 * main calls schedule(ROUNDS), which makes ping and pong, each on a stack it
 * allocates, with uc_link back to its own context, and switches to ping. Each
 * round, ping calls work(0) (one leaf()), then pass_to(pong), which
 * swapcontexts to pong; pong calls work(1) (two leaf()s), then pass_to(ping).
 * After ROUNDS rounds ping returns, and its uc_link resumes schedule, which
 * calls between() and switches to pong, still waiting in its last pass_to:
 * pong returns the same way, and schedule calls between() again and returns.
 * Prints the order the rounds ran in (`P` for ping, `p` for pong) and the
 * "calls" lines (see test/README.md); exit code 1 if the order or a switch
 * went wrong, 2 on a bad argument.
 *
 * Expected counts (ROUNDS = R): main, schedule, ping and pong 1 each, work and
 * pass_to 2R each, leaf 3R, make_coroutine, between, getcontext@plt and
 * makecontext@plt 2 each, swapcontext@plt 2R + 2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#define COUNTED __attribute__((noipa))
#define STACK_SIZE (64 * 1024)
#define MAX_ROUNDS 10000

static unsigned long n_main, n_schedule, n_make_coroutine, n_ping, n_pong,
    n_work, n_leaf, n_pass_to, n_between, n_getcontext, n_makecontext,
    n_swapcontext;

static ucontext_t scheduler, ping_context, pong_context;
static char order[2 * MAX_ROUNDS + 1];
static unsigned long turns;
static volatile unsigned long sink;
static int failed;

COUNTED void leaf(unsigned long value)
{
	n_leaf++;
	sink += value;
}

COUNTED void work(int who)
{
	n_work++;
	order[turns++] = who ? 'p' : 'P';
	for (int i = 0; i <= who; i++)
		leaf(turns);
}

/* Leaves `from` for `to`; returns when something switches back to `from`. */
COUNTED void pass_to(ucontext_t *from, ucontext_t *to)
{
	n_pass_to++;
	n_swapcontext++;
	if (swapcontext(from, to) != 0)
		failed = 1;
}

COUNTED void ping(int rounds)
{
	n_ping++;
	for (int round = 0; round < rounds; round++) {
		work(0);
		pass_to(&ping_context, &pong_context);
	}
}

COUNTED void pong(int rounds)
{
	n_pong++;
	for (int round = 0; round < rounds; round++) {
		work(1);
		pass_to(&pong_context, &ping_context);
	}
}

COUNTED void between(void)
{
	n_between++;
	sink ^= turns;
}

/* A context that runs `body(rounds)` on a stack of its own, then resumes the scheduler. */
COUNTED void make_coroutine(ucontext_t *context, void (*body)(int), int rounds)
{
	n_make_coroutine++;
	n_getcontext++;
	if (getcontext(context) != 0) {
		perror("getcontext");
		exit(1);
	}
	context->uc_stack.ss_sp = malloc(STACK_SIZE);
	context->uc_stack.ss_size = STACK_SIZE;
	context->uc_link = &scheduler;
	if (!context->uc_stack.ss_sp) {
		perror("malloc");
		exit(1);
	}
	n_makecontext++;
	makecontext(context, (void (*)(void))body, 1, rounds);
}

COUNTED void schedule(int rounds)
{
	n_schedule++;
	make_coroutine(&ping_context, ping, rounds);
	make_coroutine(&pong_context, pong, rounds);
	/* Back here when ping has returned... */
	n_swapcontext++;
	if (swapcontext(&scheduler, &ping_context) != 0)
		failed = 1;
	between();
	/* ... and when pong has. */
	n_swapcontext++;
	if (swapcontext(&scheduler, &pong_context) != 0)
		failed = 1;
	between();
}

int main(int argc, char **argv)
{
	n_main++;
	int rounds = 5;
	if (argc > 1) {
		char *end;
		long value = strtol(argv[1], &end, 10);
		if (*end || value < 1 || value > MAX_ROUNDS) {
			fprintf(stderr, "usage: coroutines [ROUNDS]   (1..%d)\n", MAX_ROUNDS);
			return 2;
		}
		rounds = (int)value;
	}
	schedule(rounds);
	for (unsigned long turn = 0; turn < turns; turn++)
		if (order[turn] != (turn % 2 ? 'p' : 'P'))
			failed = 1;
	if (turns != 2 * (unsigned long)rounds)
		failed = 1;
	printf("order %s\n", order);
	printf("calls %lu main\n", n_main);
	printf("calls %lu schedule\n", n_schedule);
	printf("calls %lu make_coroutine\n", n_make_coroutine);
	printf("calls %lu ping\n", n_ping);
	printf("calls %lu pong\n", n_pong);
	printf("calls %lu work\n", n_work);
	printf("calls %lu leaf\n", n_leaf);
	printf("calls %lu pass_to\n", n_pass_to);
	printf("calls %lu between\n", n_between);
	printf("calls %lu getcontext@plt\n", n_getcontext);
	printf("calls %lu makecontext@plt\n", n_makecontext);
	printf("calls %lu swapcontext@plt\n", n_swapcontext);
	return failed;
}
