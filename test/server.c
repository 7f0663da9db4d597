/*
 * server.c - a long-running program for attaching with `utrace record -p`.
 *
 * Usage: server [title]
 *
 * Prints "ready" once both threads run, then calls tick() in the main thread and work() in a
 * second thread, each about every 200 us, until SIGTERM. Each SIGUSR1 makes it print
 * "alive <ticks>" (it still answers); SIGTERM makes it print its counts ("calls <count> <name>",
 * see README.md) and exit 0. With `title`, it first rewrites its command line into one string,
 * "NAME 127.0.0.1:16399", as redis does.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define COUNTED __attribute__((noipa))

static _Atomic unsigned long n_tick, n_work;
static volatile sig_atomic_t stop, answer;

COUNTED void tick(void)
{
	atomic_fetch_add_explicit(&n_tick, 1, memory_order_relaxed);
}

COUNTED void work(void)
{
	atomic_fetch_add_explicit(&n_work, 1, memory_order_relaxed);
}

static void *worker(void *arg)
{
	(void)arg;
	while (!stop) {
		work();
		usleep(200);
	}
	return NULL;
}

static void on_signal(int signal)
{
	if (signal == SIGTERM)
		stop = 1;
	else
		answer = 1;
}

/*
 * Rewrites the command line in place, as redis and nginx do (setproctitle): one string with
 * spaces, "NAME 127.0.0.1:16399", NAME the file name it was started as, in the room its own
 * arguments took.
 */
static void set_title(int argc, char **argv)
{
	char *end = argv[argc - 1] + strlen(argv[argc - 1]);
	const char *slash = strrchr(argv[0], '/');
	char title[256];
	size_t room = (size_t)(end - argv[0]);

	snprintf(title, sizeof(title), "%s 127.0.0.1:16399", slash ? slash + 1 : argv[0]);
	memset(argv[0], 0, room);
	memcpy(argv[0], title, strlen(title) < room ? strlen(title) : room);
}

int main(int argc, char **argv)
{
	struct sigaction action;
	pthread_t thread;

	if (argc > 1 && strcmp(argv[1], "title") == 0)
		set_title(argc, argv);

	memset(&action, 0, sizeof(action));
	action.sa_handler = on_signal;
	sigaction(SIGTERM, &action, NULL);
	sigaction(SIGUSR1, &action, NULL);
	if (pthread_create(&thread, NULL, worker, NULL) != 0)
		return 1;
	printf("ready\n");
	fflush(stdout);
	while (!stop) {
		tick();
		if (answer) {
			answer = 0;
			printf("alive %lu\n", atomic_load(&n_tick));
			fflush(stdout);
		}
		usleep(200);
	}
	pthread_join(thread, NULL);
	printf("calls %lu tick\n", atomic_load(&n_tick));
	printf("calls %lu work\n", atomic_load(&n_work));
	return 0;
}
