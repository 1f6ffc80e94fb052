# codemode exec helper (x86_64 Linux, no libc): the one place where a command's confinement
# is applied, between the host's posix_spawn/vfork and the command's execve.
#
# argv: helper CGROUP_FD RULESET_FD SECCOMP_FD CWD PATH ARGV0 [ARGS...]
#   Each *_FD is a decimal file descriptor or "-" (none). RULESET_FD and SECCOMP_FD are both
#   given (confined) or both "-" (unconfined, full-access); one without the other is refused.
#
# Steps, in this order; every failure writes one line to fd 2 that starts with the marker and
# exits 126 before the command runs (fail closed):
#   1. join the command's cgroup: write "0" to CGROUP_FD (its cgroup.procs), unless "-"
#   2. chdir(CWD) unless CWD is empty
#   confined only:
#   3. drop every capability from the bounding set (PR_CAPBSET_DROP up to the first EINVAL);
#      without CAP_SETPCAP (EPERM) that is accepted only when neither uid nor euid is 0
#      (root would get the bounding set back at execve)
#   4. clear the ambient set   5. no_new_privs
#   6. capset(): effective, permitted, inheritable all empty
#   7. landlock_restrict_self(RULESET_FD, 0)
#   8. seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_SPEC_ALLOW) with the BPF program
#      read from SECCOMP_FD. SPEC_ALLOW: without it the kernel also turns on its speculation
#      mitigations for the filtered task, which protect that task from others (not the host
#      from it) and made a CPU-bound confined command ~35% slower (bench/bench_sandbox.py)
#   always:
#   9. close_range(3, ~0U, 0): the command gets fds 0-2 only (ruleset, filter, cgroup file,
#      this helper's memfd and anything else inherited are closed)
#  10. execve(PATH, &argv[6], envp); on failure a line naming PATH, exit 127
#
# Regenerate the bytes embedded in _exec_helper_code.py with scripts/build_exec_helper.py;
# CI runs it with --check and fails when they differ from this file.
    .text
    .globl _start
_start:
    mov    %rsp, %rbp                # rbp: argc, argv[], NULL, envp[] (the initial stack)
    mov    (%rbp), %rbx              # rbx = argc
    cmp    $7, %rbx
    jb     bad_args
    mov    16(%rbp), %rsi            # argv[1] = cgroup fd
    call   parse_fd
    mov    %eax, %r12d
    mov    24(%rbp), %rsi            # argv[2] = ruleset fd
    call   parse_fd
    mov    %eax, %r13d
    mov    32(%rbp), %rsi            # argv[3] = seccomp fd
    call   parse_fd
    mov    %eax, %r15d
    cmp    $-1, %r13d                # confined needs both, unconfined neither
    sete   %al
    cmp    $-1, %r15d
    sete   %cl
    cmp    %al, %cl
    jne    bad_args

    cmp    $-1, %r12d                # 1. cgroup
    je     cgroup_done
    mov    $1, %eax                  # write(cgroup fd, "0", 1)
    mov    %r12d, %edi
    lea    msg_zero(%rip), %rsi
    mov    $1, %edx
    syscall
    lea    what_cgroup(%rip), %r14
    cmp    $1, %rax
    jne    failed
cgroup_done:
    mov    40(%rbp), %rdi            # 2. cwd = argv[4]
    cmpb   $0, (%rdi)
    je     cwd_done
    mov    $80, %eax                 # chdir(cwd)
    syscall
    test   %rax, %rax
    jnz    chdir_failed
cwd_done:
    cmp    $-1, %r13d
    je     confined_done

    xor    %r9d, %r9d                # 3. r9 = capability number
    lea    what_capbset(%rip), %r14
capbset_loop:
    mov    $157, %eax                # prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    mov    $24, %edi
    mov    %r9, %rsi
    xor    %edx, %edx
    xor    %r10d, %r10d
    xor    %r8d, %r8d
    syscall
    test   %rax, %rax
    jnz    capbset_stop
    inc    %r9d
    cmp    $64, %r9d
    jb     capbset_loop
    jmp    capbset_done
capbset_stop:
    cmp    $-22, %rax                # EINVAL: past the last capability this kernel knows
    je     capbset_done
    cmp    $-1, %rax                 # EPERM: no CAP_SETPCAP; fine only if not root
    jne    failed
    mov    $102, %eax                # getuid()
    syscall
    test   %rax, %rax
    jz     capbset_root
    mov    $107, %eax                # geteuid()
    syscall
    test   %rax, %rax
    jnz    capbset_done
capbset_root:
    mov    $-1, %rax                 # report EPERM
    jmp    failed
capbset_done:
    mov    $157, %eax                # 4. prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    mov    $47, %edi
    mov    $4, %esi
    xor    %edx, %edx
    xor    %r10d, %r10d
    xor    %r8d, %r8d
    syscall
    lea    what_ambient(%rip), %r14
    test   %rax, %rax
    jnz    failed
    mov    $157, %eax                # 5. prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    mov    $38, %edi
    mov    $1, %esi
    xor    %edx, %edx
    xor    %r10d, %r10d
    xor    %r8d, %r8d
    syscall
    lea    what_prctl(%rip), %r14
    test   %rax, %rax
    jnz    failed
    sub    $32, %rsp                 # 6. capset(&header, &data[2]), all sets empty
    movl   $0x20080522, (%rsp)       # _LINUX_CAPABILITY_VERSION_3
    movl   $0, 4(%rsp)               # pid 0: this process
    xor    %eax, %eax
    mov    %rax, 8(%rsp)             # data[0..1] = {effective, permitted, inheritable} x 2
    mov    %rax, 16(%rsp)
    mov    %rax, 24(%rsp)
    mov    $126, %eax
    mov    %rsp, %rdi
    lea    8(%rsp), %rsi
    syscall
    add    $32, %rsp
    lea    what_capset(%rip), %r14
    test   %rax, %rax
    jnz    failed
    mov    $446, %eax                # 7. landlock_restrict_self(ruleset fd, 0)
    mov    %r13d, %edi
    xor    %esi, %esi
    syscall
    lea    what_restrict(%rip), %r14
    test   %rax, %rax
    jnz    failed
    sub    $32784, %rsp              # 8. struct sock_fprog (16 bytes), then 32 KiB of filter
    mov    $17, %eax                 # pread64(seccomp fd, buffer, 32768, 0)
    mov    %r15d, %edi
    lea    16(%rsp), %rsi
    mov    $32768, %edx
    xor    %r10d, %r10d
    syscall
    lea    what_filter(%rip), %r14
    test   %rax, %rax
    js     failed
    jz     filter_bad
    test   $7, %al                   # whole 8-byte instructions only
    jnz    filter_bad
    shr    $3, %rax
    mov    %ax, (%rsp)               # fprog.len
    lea    16(%rsp), %rcx
    mov    %rcx, 8(%rsp)             # fprog.filter
    mov    $317, %eax                # seccomp(SECCOMP_SET_MODE_FILTER, SPEC_ALLOW, &fprog)
    mov    $1, %edi
    mov    $4, %esi                  # SECCOMP_FILTER_FLAG_SPEC_ALLOW (see below)
    mov    %rsp, %rdx
    syscall
    lea    what_seccomp(%rip), %r14
    test   %rax, %rax
    jnz    failed
    add    $32784, %rsp
confined_done:
    mov    $436, %eax                # 9. close_range(3, ~0U, 0)
    mov    $3, %edi
    mov    $-1, %esi
    xor    %edx, %edx
    syscall
    mov    48(%rbp), %rdi            # 10. path = argv[5]
    lea    56(%rbp), %rsi            # argv + 6
    lea    16(%rbp,%rbx,8), %rdx     # envp
    mov    $59, %eax                 # execve
    syscall
    lea    msg_exec(%rip), %rsi      # "codemode sandbox: cannot execute "
    call   putstr
    mov    48(%rbp), %rsi
    call   putstr
    lea    msg_nl(%rip), %rsi
    call   putstr
    mov    $127, %edi
    jmp    exit

filter_bad:
    mov    $-22, %rax                # an empty or partial program: EINVAL
    jmp    failed

chdir_failed:
    lea    msg_chdir(%rip), %rsi     # "codemode sandbox: cannot change to directory "
    call   putstr
    mov    40(%rbp), %rsi
    call   putstr
    lea    msg_nl(%rip), %rsi
    call   putstr
    mov    $126, %edi
    jmp    exit

# eax = decimal value of the NUL-terminated string at rsi, or -1 for "-"; jumps to bad_args
# when it is neither.
parse_fd:
    xor    %edx, %edx
    movzbl (%rsi), %eax
    test   %eax, %eax
    jz     bad_args
    cmp    $45, %eax                 # "-"
    jne    1f
    cmpb   $0, 1(%rsi)
    jne    bad_args
    mov    $-1, %eax
    ret
1:  movzbl (%rsi), %eax
    test   %eax, %eax
    jz     2f
    sub    $48, %eax
    cmp    $9, %eax
    ja     bad_args
    imul   $10, %edx, %edx
    add    %eax, %edx
    inc    %rsi
    jmp    1b
2:  mov    %edx, %eax
    ret

bad_args:
    lea    what_args(%rip), %r14
    mov    $-22, %rax                # report EINVAL
failed:                              # rax = -errno, r14 = what failed
    neg    %rax
    mov    %rax, %r15
    lea    msg_marker(%rip), %rsi
    call   putstr
    mov    %r14, %rsi
    call   putstr
    lea    msg_errno(%rip), %rsi
    call   putstr
    sub    $32, %rsp                 # digits of r15, built backwards on the stack
    lea    31(%rsp), %rsi
    movb   $0, (%rsi)
    mov    %r15, %rax
    mov    $10, %ecx
3:  xor    %edx, %edx
    div    %rcx
    add    $48, %dl
    dec    %rsi
    mov    %dl, (%rsi)
    test   %rax, %rax
    jnz    3b
    call   putstr
    add    $32, %rsp
    lea    msg_tail(%rip), %rsi
    call   putstr
    mov    $126, %edi
exit:
    mov    $231, %eax                # exit_group
    syscall

# write(2, rsi, strlen(rsi))
putstr:
    mov    %rsi, %rdx
4:  cmpb   $0, (%rdx)
    je     5f
    inc    %rdx
    jmp    4b
5:  sub    %rsi, %rdx
    mov    $1, %eax
    mov    $2, %edi
    syscall
    ret

msg_marker:    .asciz "codemode sandbox: confining the command: "
what_cgroup:   .asciz "joining its cgroup"
what_capbset:  .asciz "dropping the capability bounding set"
what_ambient:  .asciz "clearing the ambient capabilities"
what_prctl:    .asciz "prctl(PR_SET_NO_NEW_PRIVS)"
what_capset:   .asciz "dropping every capability (capset)"
what_restrict: .asciz "landlock_restrict_self"
what_filter:   .asciz "reading the seccomp filter"
what_seccomp:  .asciz "installing the seccomp filter"
what_args:     .asciz "reading the exec helper's arguments"
msg_errno:     .asciz " failed with errno "
msg_tail:      .asciz "; the command was not run.\n"
msg_exec:      .asciz "codemode sandbox: cannot execute "
msg_chdir:     .asciz "codemode sandbox: cannot change to directory "
msg_zero:      .asciz "0"
msg_nl:        .asciz "\n"
