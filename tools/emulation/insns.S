/* Candidate first instructions for tools/emulation_table.sh: one function per instruction, each
 * starting with exactly that instruction and doing nothing harmful after it. Every function is
 * called as f(cell, 0): %rdi points to a writable 8-byte cell, %rsi is 0. The flags at entry are
 * whatever the caller left, so every conditional jump lands on the same instruction whether it
 * is taken or not. Bytes are spelled out where the assembler could pick another encoding. */

	.text

#define FUNCTION(name) \
	.globl name; .type name, @function; .p2align 4; name:
#define END(name) .size name, . - name

FUNCTION(push_rbp)	push %rbp; pop %rbp; ret;			END(push_rbp)
FUNCTION(push_rbx)	push %rbx; pop %rbx; ret;			END(push_rbx)
FUNCTION(push_r12)	push %r12; pop %r12; ret;			END(push_r12)
FUNCTION(push_imm8)	.byte 0x6a, 0x00; add $8, %rsp; ret;		END(push_imm8)
FUNCTION(nop)		.byte 0x90; ret;				END(nop)
FUNCTION(xchg_ax_ax)	.byte 0x66, 0x90; ret;				END(xchg_ax_ax)
FUNCTION(nopl_3)	.byte 0x0f, 0x1f, 0x00; ret;			END(nopl_3)
FUNCTION(nopl_4)	.byte 0x0f, 0x1f, 0x40, 0x00; ret;		END(nopl_4)
FUNCTION(nopl_5)	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00; ret;	END(nopl_5)
FUNCTION(nopw_6)	.byte 0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00; ret;	END(nopw_6)
/* two operand-size prefixes: GCC's padding between functions */
FUNCTION(nopw_10)	.byte 0x66, 0x66, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0; ret;	END(nopw_10)
/* with a CS override, which the kernel refuses */
FUNCTION(cs_nopw_10)	.byte 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0; ret; END(cs_nopw_10)
/* a nop by effect, not by opcode */
FUNCTION(lea_nop)	.byte 0x48, 0x8d, 0x76, 0x00; ret;		END(lea_nop)
FUNCTION(endbr64)	.byte 0xf3, 0x0f, 0x1e, 0xfa; ret;		END(endbr64)
FUNCTION(jmp_rel8)	.byte 0xeb, 0x00; ret;				END(jmp_rel8)
FUNCTION(jmp_rel32)	.byte 0xe9; .long 0; ret;			END(jmp_rel32)
/* call the ret after the next one, which returns to the next one, which returns */
FUNCTION(call_rel32)	.byte 0xe8; .long 1; ret; ret;			END(call_rel32)
FUNCTION(je_rel8)	.byte 0x74, 0x00; ret;				END(je_rel8)
FUNCTION(je_rel32)	.byte 0x0f, 0x84; .long 0; ret;			END(je_rel32)
FUNCTION(ret)		ret;						END(ret)
FUNCTION(mov_rdi_rax)	mov %rdi, %rax; ret;				END(mov_rdi_rax)
FUNCTION(mov_load)	mov (%rdi), %rax; ret;				END(mov_load)
FUNCTION(lea)		lea 8(%rdi), %rax; ret;				END(lea)
FUNCTION(sub_rsp)	sub $8, %rsp; add $8, %rsp; ret;		END(sub_rsp)
FUNCTION(xor_eax)	xor %eax, %eax; ret;				END(xor_eax)
FUNCTION(mov_imm32)	mov $1, %eax; ret;				END(mov_imm32)
FUNCTION(test_rsi)	test %rsi, %rsi; ret;				END(test_rsi)
FUNCTION(cmp_imm8)	cmp $1, %rdi; ret;				END(cmp_imm8)
FUNCTION(movabs)	movabs $0x1122334455667788, %rax; ret;		END(movabs)
/* the stack protector's canary, in every process with glibc's TLS */
FUNCTION(mov_fs)	mov %fs:0x28, %rax; ret;			END(mov_fs)
FUNCTION(lock_add)	lock addq $1, (%rdi); ret;			END(lock_add)

	.section .note.GNU-stack, "", @progbits
