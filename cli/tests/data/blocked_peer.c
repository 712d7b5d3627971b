/* The Linux peer of blocked_close: blocked_peer ADDRESS PORT.
 *
 * Round 1: connects X and Y; on "go" from Y sends "from-Y\n" on Y, waits
 * 500 ms, sends "from-X\n" on X; then reads both to their ends (nothing
 * else may come).
 * Round 2: connects X and Y; on "go" from Y reads X to its end (every
 * byte 'X'), sends "x=COUNT\n" on Y and reads Y to its end (nothing else
 * may come).
 *
 * Prints what it saw; exits 0 when every check holds.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static int failures;

static void check(int ok, const char *what, long value) {
    printf("%s %s: %ld\n", ok ? "ok" : "FAIL", what, value);
    fflush(stdout);
    if (!ok)
        failures++;
}

static int dial(const char *addr, int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, addr, &a.sin_addr);
    for (int i = 0; i < 200; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
            struct timeval tv = {.tv_sec = 15};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            return fd;
        }
        close(fd);
        usleep(50000);
    }
    fprintf(stderr, "could not connect to %s:%d\n", addr, port);
    exit(2);
}

/* Reads fd to its end; the count, and how many bytes were not `only`. */
static long drain(int fd, char only, long *other) {
    char buf[65536];
    long total = 0;
    *other = 0;
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0)
            return n < 0 ? -errno : total;
        for (ssize_t i = 0; i < n; i++)
            *other += buf[i] != only;
        total += n;
    }
}

static void expect_go(int y) {
    char go[2];
    ssize_t n = recv(y, go, 2, MSG_WAITALL);
    check(n == 2 && memcmp(go, "go", 2) == 0, "\"go\" first on Y (bytes)", n);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: blocked_peer ADDRESS PORT\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int port = atoi(argv[2]);
    long other = 0, n;

    int x = dial(argv[1], port);
    int y = dial(argv[1], port);
    expect_go(y);
    send(y, "from-Y\n", 7, 0);
    usleep(500000);
    send(x, "from-X\n", 7, 0);
    n = drain(y, 0, &other);
    check(n == 0, "round 1: bytes after \"go\" on Y", n);
    n = drain(x, 0, &other);
    check(n == 0, "round 1: bytes the program sent on X", n);
    close(x);
    close(y);

    x = dial(argv[1], port);
    y = dial(argv[1], port);
    expect_go(y);
    long count = drain(x, 'X', &other);
    check(count == 8 << 20, "round 2: bytes on X", count);
    check(other == 0, "round 2: bytes on X that are not 'X'", other);
    char line[32];
    int len = snprintf(line, sizeof line, "x=%ld\n", count);
    send(y, line, len, 0);
    n = drain(y, 0, &other);
    check(n == 0, "round 2: bytes after \"go\" on Y", n);
    close(x);
    close(y);
    printf(failures ? "FAILED\n" : "PASSED\n");
    return failures ? 1 : 0;
}
