/* A string argument on a page of .rodata nothing has read yet: a probe at greet's entry finds
 * its page not mapped, and may not fault it in. The string lies at the start of the middle 64 KiB
 * of a constant buffer of three, aligned to 64 KiB, so that no read of other constants maps it
 * with theirs (the kernel maps up to 64 KiB of the page cache around a fault). The program says
 * whether the page is mapped before the first call (the present bit of /proc/self/pagemap:
 * mincore() would say whether the file's page is in the page cache, which is another thing),
 * then prints, for each call, the line utrace's replay must show for it (indented as main's
 * callee), and the counts.
 *
 * keep() gets an address nothing maps and does not read it. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define WINDOW (64 * 1024)

static const char constants[3 * WINDOW] __attribute__((aligned(WINDOW))) = {
	[WINDOW] = 'h', 'e', 'l', 'l', 'o',
};

static _Atomic unsigned long greet_calls, keep_calls;

/* The length of `who`. */
__attribute__((noipa)) long greet(const char *who)
{
	atomic_fetch_add_explicit(&greet_calls, 1, memory_order_relaxed);
	return (long)strlen(who);
}

/* Whether `pointer` is set; never reads it. */
__attribute__((noipa)) long keep(const char *pointer)
{
	long set = pointer != NULL;

	/* The count after: a locked add as the first instruction would put the probe past it. */
	__asm__ volatile("" : "+r"(set)::"memory");
	atomic_fetch_add_explicit(&keep_calls, 1, memory_order_relaxed);
	return set;
}

/* "yes" when the page of `address` is mapped in this process, "no" when not, "unknown" when
 * /proc/self/pagemap cannot say. */
static const char *mapped(const void *address)
{
	uint64_t entry = 0;
	long page = sysconf(_SC_PAGESIZE);
	FILE *pagemap = fopen("/proc/self/pagemap", "rb");
	int read = 0;

	if (pagemap) {
		read = fseek(pagemap, (long)((uintptr_t)address / page) * 8, SEEK_SET) == 0 &&
		       fread(&entry, sizeof(entry), 1, pagemap) == 1;
		fclose(pagemap);
	}
	if (!read)
		return "unknown";
	return entry >> 63 ? "yes" : "no";
}

int main(void)
{
	const char *hello = constants + WINDOW;
	const char *nowhere = (const char *)0x1234;
	long length;

	printf("page mapped before the first call: %s\n", mapped(hello));
	length = greet(hello);
	printf("  greet(\"%s\") = %ld;\n", hello, length);
	length = greet(hello);
	printf("  greet(\"%s\") = %ld;\n", hello, length);
	length = keep(nowhere);
	printf("  keep(%p <unreadable: not mapped>) = %ld;\n", (const void *)nowhere, length);
	printf("calls %lu greet\n", greet_calls);
	printf("calls %lu keep\n", keep_calls);
	return 0;
}
