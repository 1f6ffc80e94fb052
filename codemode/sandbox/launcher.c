/* codemode's launcher: the one place where a command's confinement is applied, between the
 * host's posix_spawn (or the background supervisor's) and the command's execve.
 *
 * Built by setup.py into codemode/sandbox/codemode-launcher (a static executable where the C
 * library allows it); the host copies it into a sealed memfd before first use (_launcher.py),
 * so a command that writes the installed file cannot change what later commands run through.
 *
 * argv: launcher [KEY=VALUE ...] -- PATH ARGV0 [ARGS...]
 *   cgroup=FD    an open cgroup.procs the launcher joins by writing "0" (repeatable, up to 4:
 *                the command's cgroup v2 and, on a hybrid host, its cgroup v1 pids twin)
 *   ruleset=FD   a Landlock ruleset          } both given (confined) or neither (full-access);
 *   seccomp=FD   a seccomp BPF program       } one without the other is refused
 *   shm=FD       a new mount namespace in which the directory FD (O_PATH, the session's own,
 *                inside its disk quota) is bind-mounted on /dev/shm, nosuid and nodev
 *   net=FD       a new network namespace with loopback only, in which the launcher listens on
 *                127.0.0.1:3128 (the host's filtering proxy, codemode/network) and hands that
 *                listening socket and a pidfd of itself to the host over FD, a unix socket
 *                (SCM_RIGHTS); the host's proxy accepts on it until the command exits
 *   cwd=DIR      the directory to change to (default: the caller's)
 *
 * Steps, in this order; every failure writes one line to fd 2 that starts with the marker
 * ("codemode sandbox: confining the command: ") and exits 126 before the command runs:
 *   1. join each cgroup
 *   2. shm and net: unshare(CLONE_NEWNS and/or CLONE_NEWNET) (as root; otherwise with
 *      CLONE_NEWUSER and an identity map); shm: make every mount a slave (nothing mounted here
 *      reaches the host), bind the directory; net: bring up lo, listen, hand the socket over
 *   3. chdir(cwd)
 *   confined only:
 *   4. drop every capability from the bounding set (PR_CAPBSET_DROP up to the first EINVAL);
 *      without CAP_SETPCAP (EPERM) that is accepted only when neither uid nor euid is 0
 *   5. clear the ambient set   6. no_new_privs   7. capset(): every set empty
 *   8. landlock_restrict_self(ruleset)
 *   9. seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_SPEC_ALLOW) with the program read
 *      from the seccomp fd. SPEC_ALLOW: the speculation mitigations it would turn on protect the
 *      filtered task from others, not the host from it, and cost a CPU-bound command ~35%
 *   always:
 *  10. close every fd from 3 up (close_range)
 *  11. execve(PATH, ARGV, envp); on failure a line naming PATH, exit 127
 *
 * Only system calls and the C library's thin wrappers: no allocation, no stdio.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446 /* the same number on every architecture */
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SECCOMP_FILTER_FLAG_SPEC_ALLOW
#define SECCOMP_FILTER_FLAG_SPEC_ALLOW (1UL << 2)
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

#define MARKER "codemode sandbox: confining the command: "
#define EXIT_REFUSED 126
#define EXIT_NOT_FOUND 127
#define MAX_CGROUPS 4
#define MAX_FILTER 32768 /* BPF_MAXINSNS instructions of 8 bytes */
#define PROXY_PORT 3128  /* codemode.network.PROXY_PORT */

extern char **environ;

static void put(const char *text) {
    size_t left = strlen(text);
    while (left > 0) {
        ssize_t n = write(2, text, left);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) continue;
            return;
        }
        text += n;
        left -= (size_t)n;
    }
}

/* One line naming the step that failed and its errno, then exit 126: nothing ran. */
static void refuse(const char *what, int err) {
    char digits[24];
    char *p = digits + sizeof(digits) - 1;
    unsigned value = (unsigned)err;
    *p = '\0';
    do {
        *--p = (char)('0' + value % 10);
        value /= 10;
    } while (value != 0);
    put(MARKER);
    put(what);
    put(" failed with errno ");
    put(p);
    put("; the command was not run.\n");
    _exit(EXIT_REFUSED);
}

/* A decimal fd; anything else refuses the arguments. */
static int parse_fd(const char *text) {
    long value = 0;
    if (*text == '\0') refuse("reading the launcher's arguments", EINVAL);
    for (; *text != '\0'; text++) {
        if (*text < '0' || *text > '9' || value > 0x7fffffff / 10)
            refuse("reading the launcher's arguments", EINVAL);
        value = value * 10 + (*text - '0');
    }
    return (int)value;
}

static const char *starts(const char *word, const char *key) {
    size_t n = strlen(key);
    return strncmp(word, key, n) == 0 ? word + n : NULL;
}

static void write_file(const char *path, const char *text, const char *what) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) refuse(what, errno);
    ssize_t n = write(fd, text, strlen(text));
    if (n != (ssize_t)strlen(text)) refuse(what, n < 0 ? errno : EIO);
    close(fd);
}

/* "%u %u 1\n" for an identity map of one id. */
static void id_map(char *out, unsigned id) {
    char digits[16];
    char *p = digits + sizeof(digits) - 1;
    *p = '\0';
    do {
        *--p = (char)('0' + id % 10);
        id /= 10;
    } while (id != 0);
    strcpy(out, p);
    strcat(out, " ");
    strcat(out, p);
    strcat(out, " 1\n");
}

/* "/proc/self/fd/N" for an fd. */
static void fd_path(char *out, int fd) {
    char digits[16];
    char *p = digits + sizeof(digits) - 1;
    unsigned value = (unsigned)fd;
    *p = '\0';
    do {
        *--p = (char)('0' + value % 10);
        value /= 10;
    } while (value != 0);
    strcpy(out, "/proc/self/fd/");
    strcat(out, p);
}

/* Step 2: the namespaces of this process alone (CLONE_NEWNS and/or CLONE_NEWNET); a user
 * other than root needs a user namespace of its own too, with an identity map. */
static void unshare_namespaces(int flags) {
    int net = (flags & CLONE_NEWNET) != 0;
    if (geteuid() == 0) {
        if (unshare(flags) == 0) return;
        refuse(net ? "making the command a network namespace of its own (a network allowlist needs one)"
                   : "unsharing the mount namespace",
               errno);
    }
    uid_t uid = geteuid();
    gid_t gid = getegid();
    char map[48];
    if (unshare(CLONE_NEWUSER | flags) != 0)
        refuse(net ? "making the command user and network namespaces of its own (a network allowlist "
                     "needs them; unprivileged user namespaces)"
                   : "unsharing the user and mount namespaces (unprivileged user namespaces)",
               errno);
    write_file("/proc/self/setgroups", "deny", "writing /proc/self/setgroups");
    id_map(map, (unsigned)uid);
    write_file("/proc/self/uid_map", map, "writing /proc/self/uid_map");
    id_map(map, (unsigned)gid);
    write_file("/proc/self/gid_map", map, "writing /proc/self/gid_map");
}

/* Before unsharing: the path and inode of the session's /dev/shm directory (its fd). */
static void find_shm(int dir, char *path, size_t size, struct stat *given) {
    char link[40];
    fd_path(link, dir);
    ssize_t n = readlink(link, path, size - 1);
    if (n <= 0 || fstat(dir, given) != 0) refuse("finding the session's /dev/shm directory", errno);
    path[n] = '\0';
}

/* In the new mount namespace, the session's directory on /dev/shm. A bind mount's source must
 * be a mount of the caller's own namespace, and the fd was opened in the host's: the directory
 * is looked up again by its path in the new namespace (no link followed in its last component)
 * and must be the very inode the host opened. */
static void private_shm(const char *path, const struct stat *given) {
    char link[40];
    struct stat found;
    if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0)
        refuse("making the mounts private to the command", errno);
    int again = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (again < 0 || fstat(again, &found) != 0) refuse("opening the session's /dev/shm directory", errno);
    if (found.st_dev != given->st_dev || found.st_ino != given->st_ino)
        refuse("opening the session's /dev/shm directory (it was replaced)", EXDEV);
    fd_path(link, again);
    if (mount(link, "/dev/shm", NULL, MS_BIND, NULL) != 0) refuse("mounting the private /dev/shm", errno);
    if (mount(NULL, "/dev/shm", NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL) != 0)
        refuse("remounting the private /dev/shm nosuid,nodev", errno);
    close(again);
}

/* In the new network namespace: loopback up, a listener on 127.0.0.1:PROXY_PORT, and that
 * listener with a pidfd of this process (the command's, after execve) sent to the host over
 * the channel. The command connects; the host's proxy accepts. */
static void proxy_listener(int channel) {
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    strcpy(ifr.ifr_name, "lo");
    int probe = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (probe < 0 || ioctl(probe, SIOCGIFFLAGS, &ifr) != 0) refuse("reading the loopback interface", errno);
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(probe, SIOCSIFFLAGS, &ifr) != 0) refuse("bringing up the loopback interface", errno);
    close(probe);
    struct sockaddr_in address;
    memset(&address, 0, sizeof(address));
    address.sin_family = AF_INET;
    address.sin_port = htons(PROXY_PORT);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0 || bind(listener, (struct sockaddr *)&address, sizeof(address)) != 0 ||
        listen(listener, 128) != 0)
        refuse("listening for the network proxy", errno);
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (pidfd < 0) refuse("pidfd_open (Linux 5.3 or later)", errno);
    int fds[2] = {listener, pidfd};
    char byte = 'n';
    struct iovec iov = {&byte, 1};
    union {
        char buffer[CMSG_SPACE(sizeof(fds))];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof(control));
    struct msghdr message;
    memset(&message, 0, sizeof(message));
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    message.msg_control = control.buffer;
    message.msg_controllen = sizeof(control.buffer);
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(fds));
    memcpy(CMSG_DATA(header), fds, sizeof(fds));
    ssize_t sent;
    do {
        sent = sendmsg(channel, &message, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    if (sent != 1) refuse("handing the proxy's listening socket to the host", sent < 0 ? errno : EIO);
    close(listener);
    close(pidfd);
    close(channel);
}

/* Step 4: empty the bounding set; EPERM (no CAP_SETPCAP) is fine only for a non-root user. */
static void drop_bounding_set(void) {
    for (int cap = 0; cap < 64; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0) continue;
        if (errno == EINVAL) return; /* past the last capability this kernel knows */
        if (errno == EPERM && getuid() != 0 && geteuid() != 0) return;
        refuse("dropping the capability bounding set", errno);
    }
}

static void drop_capabilities(void) {
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof(data));
    drop_bounding_set();
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
        refuse("clearing the ambient capabilities", errno);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) refuse("prctl(PR_SET_NO_NEW_PRIVS)", errno);
    if (syscall(SYS_capset, &header, data) != 0) refuse("dropping every capability (capset)", errno);
}

static void install_filter(int fd) {
    static struct sock_filter program[MAX_FILTER / sizeof(struct sock_filter)];
    ssize_t n = pread(fd, program, sizeof(program), 0);
    if (n < 0) refuse("reading the seccomp filter", errno);
    if (n == 0 || n % (ssize_t)sizeof(struct sock_filter) != 0) refuse("reading the seccomp filter", EINVAL);
    struct sock_fprog fprog = {(unsigned short)(n / (ssize_t)sizeof(struct sock_filter)), program};
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_SPEC_ALLOW, &fprog) != 0)
        refuse("installing the seccomp filter", errno);
}

int main(int argc, char **argv) {
    int cgroups[MAX_CGROUPS];
    int ncgroups = 0, ruleset = -1, seccomp = -1, shm = -1, net = -1, i = 1;
    const char *cwd = NULL, *value;

    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if ((value = starts(argv[i], "cgroup=")) != NULL && ncgroups < MAX_CGROUPS)
            cgroups[ncgroups++] = parse_fd(value);
        else if ((value = starts(argv[i], "ruleset=")) != NULL && ruleset < 0)
            ruleset = parse_fd(value);
        else if ((value = starts(argv[i], "seccomp=")) != NULL && seccomp < 0)
            seccomp = parse_fd(value);
        else if ((value = starts(argv[i], "shm=")) != NULL && shm < 0)
            shm = parse_fd(value);
        else if ((value = starts(argv[i], "net=")) != NULL && net < 0)
            net = parse_fd(value);
        else if ((value = starts(argv[i], "cwd=")) != NULL && cwd == NULL)
            cwd = value;
        else
            refuse("reading the launcher's arguments", EINVAL);
    }
    /* "--", PATH and ARGV0 at least; the confinement needs both of its fds or neither. */
    if (i + 2 >= argc || (ruleset < 0) != (seccomp < 0)) refuse("reading the launcher's arguments", EINVAL);
    const char *path = argv[i + 1];
    char **command = argv + i + 2;

    for (int c = 0; c < ncgroups; c++) {
        if (write(cgroups[c], "0", 1) != 1) refuse("joining its cgroup", errno);
    }
    if (shm >= 0 || net >= 0) {
        char shm_path[4096];
        struct stat shm_stat;
        if (shm >= 0) find_shm(shm, shm_path, sizeof(shm_path), &shm_stat);
        unshare_namespaces((shm >= 0 ? CLONE_NEWNS : 0) | (net >= 0 ? CLONE_NEWNET : 0));
        if (shm >= 0) private_shm(shm_path, &shm_stat);
        if (net >= 0) proxy_listener(net);
    }
    if (cwd != NULL && cwd[0] != '\0' && chdir(cwd) != 0) {
        put("codemode sandbox: cannot change to directory ");
        put(cwd);
        put("\n");
        _exit(EXIT_REFUSED);
    }
    if (ruleset >= 0) {
        drop_capabilities();
        if (syscall(SYS_landlock_restrict_self, ruleset, 0) != 0) refuse("landlock_restrict_self", errno);
        install_filter(seccomp);
    }
    if (syscall(SYS_close_range, 3, ~0U, 0) != 0) refuse("closing inherited fds (close_range)", errno);
    execve(path, command, environ);
    put("codemode sandbox: cannot execute ");
    put(path);
    put("\n");
    _exit(EXIT_NOT_FOUND);
}
