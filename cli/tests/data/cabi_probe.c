/* The C ABI corners of the socket calls (exec_cabi.rs): what a C program
 * may pass that a Rust view of it must not get wrong. Each mode is one
 * check against the ECHO peer of shim_peer.py; it prints "ok MODE" and
 * exits 0, or prints "FAIL ..." and exits 1. The test runs every mode
 * natively first (the expectations are Linux's) and then under
 * `zerosplit exec`.
 *
 * Usage: cabi_probe MODE ADDR PORT
 *   select    a one-word fd_set before a PROT_NONE page; nfds > FD_SETSIZE;
 *             nfds < 0
 *   iov       overlapping iovecs (readv, recvmsg), a null iov_base,
 *             iovcnt > IOV_MAX, msg_iovlen beyond an int
 *   dup2      dup2(bad fd, socket) fails and leaves the socket working
 *   closerange close_range and closefrom, then new descriptors take the
 *             numbers
 *   fclose    fclose(fdopen(socket)), then a new socket takes the number
 *   vfork     a vfork child closes the socket; the parent's still works
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static struct sockaddr_in peer;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            printf("FAIL line %d: ", __LINE__);                                \
            printf(__VA_ARGS__);                                               \
            printf(" (errno %d %s)\n", errno, strerror(errno));                \
            fflush(stdout);                                                    \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

static int new_socket(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(s >= 0, "socket");
    return s;
}

/* Connects `s` to the peer and asks it to echo. */
static void echo_on(int s) {
    CHECK(connect(s, (struct sockaddr *)&peer, sizeof peer) == 0, "connect fd %d", s);
    CHECK(send(s, "ECHO\n", 5, MSG_NOSIGNAL) == 5, "send ECHO");
}

static int echo_socket(void) {
    int s = new_socket();
    echo_on(s);
    return s;
}

/* Waits (at most 5 s) until `n` bytes can be read from `s`. */
static void wait_bytes(int s, int n) {
    for (int i = 0; i < 500; i++) {
        int avail = 0;
        CHECK(ioctl(s, FIONREAD, &avail) == 0, "FIONREAD");
        if (avail >= n)
            return;
        struct pollfd p = {s, POLLIN, 0};
        poll(&p, 1, 10);
    }
    CHECK(0, "%d bytes did not arrive on fd %d", n, s);
}

/* Sends `msg` and reads its echo back, byte for byte. */
static void round_trip(int s, const char *msg) {
    size_t n = strlen(msg);
    CHECK(send(s, msg, n, MSG_NOSIGNAL) == (ssize_t)n, "send %s on fd %d", msg, s);
    char buf[64] = {0};
    size_t got = 0;
    for (int i = 0; i < 500 && got < n; i++) {
        struct pollfd p = {s, POLLIN, 0};
        CHECK(poll(&p, 1, 10) >= 0, "poll");
        ssize_t r = recv(s, buf + got, n - got, MSG_DONTWAIT);
        if (r > 0)
            got += r;
        else
            CHECK(r < 0 && errno == EAGAIN, "recv on fd %d: %zd", s, r);
    }
    CHECK(got == n && memcmp(buf, msg, n) == 0, "echo on fd %d: %.*s, not %s", s, (int)got, buf, msg);
}

/* A set of `words` words ending where a PROT_NONE page begins. */
static unsigned long *guarded_set(size_t words) {
    long page = sysconf(_SC_PAGESIZE);
    char *p = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED, "mmap");
    CHECK(mprotect(p + page, page, PROT_NONE) == 0, "mprotect");
    return (unsigned long *)(p + page) - words;
}

static void check_select(void) {
    int s = echo_socket();
    CHECK(s < 64, "fd %d does not fit one word", s);
    unsigned long *rd = guarded_set(1), *wr = guarded_set(1);
    unsigned long bit = 1UL << s;
    /* Nothing to read yet: a zero timeout answers at once, bit cleared. */
    struct timeval tv = {0, 0};
    int p[2];
    CHECK(pipe(p) == 0 && p[0] < 64 && p[0] > s, "pipe");
    *rd = bit | 1UL << p[0]; /* an empty pipe too: a kernel fd in the set */
    int r = select(p[0] + 1, (fd_set *)rd, NULL, NULL, &tv);
    CHECK(r == 0 && *rd == 0, "select, nothing to read: %d, set %#lx", r, *rd);
    close(p[0]);
    close(p[1]);
    *rd = bit;
    *wr = bit;
    tv = (struct timeval){2, 0};
    r = select(s + 1, (fd_set *)rd, (fd_set *)wr, NULL, &tv);
    CHECK(r == 1 && *rd == 0 && *wr == bit, "select writable: %d, %#lx %#lx", r, *rd, *wr);
    CHECK(send(s, "ping", 4, MSG_NOSIGNAL) == 4, "send ping");
    *rd = bit;
    tv = (struct timeval){5, 0};
    r = select(s + 1, (fd_set *)rd, NULL, NULL, &tv);
    CHECK(r == 1 && *rd == bit, "select readable: %d, set %#lx", r, *rd);
    /* pselect over the same one-word set. */
    *rd = bit;
    struct timespec ts = {5, 0};
    r = pselect(s + 1, (fd_set *)rd, NULL, NULL, &ts, NULL);
    CHECK(r == 1 && *rd == bit, "pselect readable: %d, set %#lx", r, *rd);
    char buf[8];
    wait_bytes(s, 4);
    CHECK(read(s, buf, 4) == 4 && memcmp(buf, "ping", 4) == 0, "read ping");
    /* nfds beyond FD_SETSIZE: Linux takes it (up to its table's size). A
     * set of 2048 bits, ours the only bit: nothing to read, then a byte. */
    unsigned long *big = guarded_set(32);
    memset(big, 0, 32 * sizeof *big);
    big[0] = bit;
    tv = (struct timeval){0, 100000};
    r = select(2048, (fd_set *)big, NULL, NULL, &tv);
    CHECK(r == 0 && big[0] == 0, "select nfds 2048, nothing to read: %d, set %#lx", r, big[0]);
    CHECK(send(s, "pong", 4, MSG_NOSIGNAL) == 4, "send pong");
    big[0] = bit;
    tv = (struct timeval){5, 0};
    r = select(2048, (fd_set *)big, NULL, NULL, &tv);
    CHECK(r == 1 && big[0] == bit, "select nfds 2048, readable: %d, set %#lx", r, big[0]);
    /* nfds < 0: EINVAL, the set untouched. */
    *rd = bit;
    tv = (struct timeval){0, 0};
    errno = 0;
    r = select(-1, (fd_set *)rd, NULL, NULL, &tv);
    CHECK(r == -1 && errno == EINVAL && *rd == bit, "select nfds -1: %d, set %#lx", r, *rd);
    close(s);
}

static void check_iov(void) {
    int s = echo_socket();
    char buf[16];
    /* readv: the later iovec overwrites the overlap. */
    CHECK(send(s, "abcdefgh", 8, MSG_NOSIGNAL) == 8, "send");
    wait_bytes(s, 8);
    memset(buf, '.', sizeof buf);
    struct iovec v[2] = {{buf, 5}, {buf + 2, 5}};
    ssize_t r = readv(s, v, 2);
    CHECK(r == 8 && memcmp(buf, "abfgh.....", 10) == 0, "overlapping readv: %zd %.10s", r, buf);
    /* recvmsg, the same. */
    CHECK(send(s, "ABCDEFGH", 8, MSG_NOSIGNAL) == 8, "send");
    wait_bytes(s, 8);
    memset(buf, '.', sizeof buf);
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = v;
    m.msg_iovlen = 2;
    r = recvmsg(s, &m, 0);
    CHECK(r == 8 && memcmp(buf, "ABFGH.....", 10) == 0, "overlapping recvmsg: %zd %.10s", r, buf);
    /* A null iov_base with a length: EFAULT, and the bytes stay. */
    CHECK(send(s, "12345678", 8, MSG_NOSIGNAL) == 8, "send");
    wait_bytes(s, 8);
    struct iovec n[2] = {{buf, 3}, {NULL, 5}};
    errno = 0;
    r = readv(s, n, 2);
    CHECK(r == -1 && errno == EFAULT, "readv with a null iov_base: %zd", r);
    m.msg_iov = n;
    errno = 0;
    r = recvmsg(s, &m, 0);
    CHECK(r == -1 && errno == EFAULT, "recvmsg with a null iov_base: %zd", r);
    errno = 0;
    r = writev(s, n, 2);
    CHECK(r == -1 && errno == EFAULT, "writev with a null iov_base: %zd", r);
    memset(buf, 0, sizeof buf);
    CHECK(read(s, buf, 8) == 8 && memcmp(buf, "12345678", 8) == 0, "the bytes after EFAULT: %.8s", buf);
    /* More iovecs than IOV_MAX: readv/writev EINVAL, recvmsg/sendmsg
     * EMSGSIZE; a count beyond an int is not cut down to a small one. */
    static struct iovec many[IOV_MAX + 1];
    for (int i = 0; i <= IOV_MAX; i++)
        many[i] = (struct iovec){buf, 1};
    CHECK(send(s, "xyz", 3, MSG_NOSIGNAL) == 3, "send");
    wait_bytes(s, 3);
    errno = 0;
    CHECK(readv(s, many, IOV_MAX + 1) == -1 && errno == EINVAL, "readv IOV_MAX+1");
    errno = 0;
    CHECK(writev(s, many, IOV_MAX + 1) == -1 && errno == EINVAL, "writev IOV_MAX+1");
    m.msg_iov = many;
    m.msg_iovlen = IOV_MAX + 1;
    errno = 0;
    CHECK(recvmsg(s, &m, 0) == -1 && errno == EMSGSIZE, "recvmsg IOV_MAX+1");
    errno = 0;
    CHECK(sendmsg(s, &m, MSG_NOSIGNAL) == -1 && errno == EMSGSIZE, "sendmsg IOV_MAX+1");
    m.msg_iovlen = ((size_t)1 << 32) + 1;
    errno = 0;
    r = recvmsg(s, &m, 0);
    CHECK(r == -1 && errno == EMSGSIZE, "recvmsg with msg_iovlen 2^32+1: %zd", r);
    errno = 0;
    r = sendmsg(s, &m, MSG_NOSIGNAL);
    CHECK(r == -1 && errno == EMSGSIZE, "sendmsg with msg_iovlen 2^32+1: %zd", r);
    /* A null iovec array. */
    m.msg_iov = NULL;
    m.msg_iovlen = 1;
    errno = 0;
    CHECK(recvmsg(s, &m, 0) == -1 && errno == EFAULT, "recvmsg with a null msg_iov");
    CHECK(read(s, buf, 3) == 3 && memcmp(buf, "xyz", 3) == 0, "the bytes after the errors");
    round_trip(s, "after");
    close(s);
}

static void check_dup2(void) {
    int s = echo_socket();
    int bad = 900;
    close(bad);
    errno = 0;
    int r = dup2(bad, s);
    CHECK(r == -1 && errno == EBADF, "dup2(closed fd, socket): %d", r);
    errno = 0;
    r = dup3(bad, s, 0);
    CHECK(r == -1 && errno == EBADF, "dup3(closed fd, socket): %d", r);
    round_trip(s, "still mine");
    close(s);
}

/* Connects a new socket, which must take number `want`, and echoes. */
static void reuse(int want, const char *msg) {
    int s = new_socket();
    CHECK(s == want, "the new socket is fd %d, not %d", s, want);
    echo_on(s);
    round_trip(s, msg);
}

static void check_closerange(void) {
    /* Both sockets before the first connect starts the stack (whose own
     * descriptors come after them). */
    int a = new_socket(), b = new_socket();
    CHECK(b == a + 1, "sockets %d and %d", a, b);
    echo_on(a);
    echo_on(b);
    round_trip(a, "a");
    round_trip(b, "b");
    CHECK(close_range(a, b, 0) == 0, "close_range(%d, %d)", a, b);
    /* Both numbers again (before a connect, which may open descriptors of
     * the shim's own), each the new socket's alone. */
    int na = new_socket(), nb = new_socket();
    CHECK(na == a && nb == b, "the new sockets are fds %d and %d, not %d and %d", na, nb, a, b);
    echo_on(na);
    echo_on(nb);
    round_trip(na, "new a");
    round_trip(nb, "new b");
    /* CLOSE_RANGE_CLOEXEC closes nothing. */
    CHECK(close_range(a, a, CLOSE_RANGE_CLOEXEC) == 0, "close_range CLOEXEC");
    round_trip(a, "a again");
    /* An invalid range closes nothing either. */
    errno = 0;
    CHECK(close_range(b, a, 0) == -1 && errno == EINVAL, "close_range(%d, %d)", b, a);
    round_trip(a, "a still");
    /* closefrom: a second descriptor of b's socket, high up, closed; a
     * pipe's end then takes its number and its bytes are its own. */
    CHECK(dup2(b, 1000) == 1000, "dup2(%d, 1000)", b);
    closefrom(1000);
    round_trip(b, "b after closefrom");
    int p[2];
    CHECK(pipe(p) == 0, "pipe");
    CHECK(fcntl(p[0], F_DUPFD, 1000) == 1000, "F_DUPFD 1000");
    CHECK(write(p[1], "x", 1) == 1, "write to the pipe");
    struct pollfd pf = {1000, POLLIN, 0};
    CHECK(poll(&pf, 1, 2000) == 1 && pf.revents == POLLIN, "the pipe at 1000 readable: %#x", pf.revents);
    char c = 0;
    CHECK(read(1000, &c, 1) == 1 && c == 'x', "read the pipe at 1000");
    close(a);
    close(b);
}

static void check_fclose(void) {
    int s = echo_socket();
    round_trip(s, "before");
    FILE *f = fdopen(s, "r+");
    CHECK(f != NULL, "fdopen");
    CHECK(fclose(f) == 0, "fclose");
    reuse(s, "after fclose");
    close(s);
}

static void check_vfork(void) {
    int s = echo_socket();
    round_trip(s, "before");
    pid_t pid = vfork();
    if (pid == 0) {
        close(s);
        _exit(0);
    }
    CHECK(pid > 0, "vfork");
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the child's exit");
    round_trip(s, "after the child");
    close(s);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: cabi_probe MODE ADDR PORT\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    peer.sin_family = AF_INET;
    peer.sin_port = htons(atoi(argv[3]));
    CHECK(inet_pton(AF_INET, argv[2], &peer.sin_addr) == 1, "address %s", argv[2]);
    const char *mode = argv[1];
    if (!strcmp(mode, "select"))
        check_select();
    else if (!strcmp(mode, "iov"))
        check_iov();
    else if (!strcmp(mode, "dup2"))
        check_dup2();
    else if (!strcmp(mode, "closerange"))
        check_closerange();
    else if (!strcmp(mode, "fclose"))
        check_fclose();
    else if (!strcmp(mode, "vfork"))
        check_vfork();
    else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("ok %s\n", mode);
    return 0;
}
