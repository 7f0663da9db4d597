/*
 * wait_for_usr1.h - for test programs a recorder attaches to (-p): wait_for_usr1() prints
 * "ready" and returns once SIGUSR1 has come, so that the recorder attaches before the program
 * calls what the test counts. Included by the programs that use it.
 */
#ifndef WAIT_FOR_USR1_H
#define WAIT_FOR_USR1_H

#include <signal.h>
#include <stdio.h>

static volatile sig_atomic_t usr1_came;

static void on_usr1(int sig)
{
	(void)sig;
	usr1_came = 1;
}

/* Prints "ready" and waits for SIGUSR1, with the signal mask as it was. */
static void wait_for_usr1(void)
{
	sigset_t usr1, old;

	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	sigprocmask(SIG_BLOCK, &usr1, &old);
	signal(SIGUSR1, on_usr1);
	printf("ready\n");
	fflush(stdout);
	while (!usr1_came)
		sigsuspend(&old);
	sigprocmask(SIG_SETMASK, &old, NULL);
}

#endif
