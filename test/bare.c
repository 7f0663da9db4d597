/*
 * bare.c - a program with nothing to probe once stripped: no libc, so no PLT stubs, and its one
 * function is the entry point. Build: cc -nostdlib -static -s -o bare test/bare.c
 */
void _start(void)
{
	__asm__ volatile("mov $60, %eax; xor %edi, %edi; syscall");
}
