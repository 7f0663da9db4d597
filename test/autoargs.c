/* Calls libc's open, read, malloc and close through the PLT, for -a/--auto-args: prints the line
 * utrace's replay must show for each. argv[1] is a file with at least 4 bytes. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	char buffer[4];
	int fd, closed;
	ssize_t got;
	void *block;

	if (argc < 2)
		return 2;
	fd = open(argv[1], O_RDONLY);
	printf("  open@plt(\"%s\", 0x0) = %d;\n", argv[1], fd);
	got = read(fd, buffer, sizeof(buffer));
	printf("  read@plt(%d, %p, 4) = %zd;\n", fd, (void *)buffer, got);
	block = malloc(24);
	printf("  malloc@plt(24) = %p;\n", block);
	closed = close(fd);
	printf("  close@plt(%d) = %d;\n", fd, closed);
	free(block);
	return 0;
}
