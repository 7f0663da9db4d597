/*
 * ids.c - prints the ids it runs with and where main is mapped, for `utrace record -u USER`
 * and `--no-randomize-addr`: "uid N gid N groups G1,G2,..." then "main at 0x...".
 */
#include <stdio.h>
#include <sys/types.h>
#include <unistd.h>

int main(void)
{
	gid_t groups[256];
	int count = getgroups(256, groups);

	printf("uid %u gid %u groups ", (unsigned)getuid(), (unsigned)getgid());
	for (int i = 0; i < count; i++)
		printf(i ? ",%u" : "%u", (unsigned)groups[i]);
	printf("\nmain at %p\n", (void *)main);
	return 0;
}
