/*
 * bare.c - a program with nothing to probe once stripped: no libc, so no PLT stubs, and its one
 * function is the entry point. Build: cc -nostdlib -static -s -o bare test/bare.c (-DSPIN: it
 * runs until killed)
 */
void _start(void)
{
#ifdef SPIN
	/* Built with -DSPIN, it runs until killed: a process to attach to. */
	for (;;)
		__asm__ volatile("pause");
#endif
	__asm__ volatile("mov $60, %eax; xor %edi, %edi; syscall");
}
