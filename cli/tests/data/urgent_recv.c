/* urgent_recv PORT: reads what urgent_peer sends with MSG_OOB, as Linux
 * (tcp_stdurg off) serves it.
 * Connection 1: "abc", urgent "!", "def". In-band reads give "abc" then
 * "def" (never "!"); recv(MSG_OOB) gives "!" once, then EINVAL.
 * Connection 2, SO_OOBINLINE: the same bytes all in-band ("abc!def");
 * recv(MSG_OOB) is EINVAL.
 * Prints one line per check; exits 0 when every check holds. */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static int failures;

static void check(int ok, const char *what, ssize_t n, const char *got) {
    printf("%s %s: %zd (errno %d) %s\n", ok ? "ok" : "FAIL", what, n, n < 0 ? errno : 0,
           n > 0 ? got : "");
    if (!ok)
        failures++;
}

static int accept_one(int l) {
    int fd = accept(l, NULL, NULL);
    if (fd < 0) {
        perror("accept");
        exit(2);
    }
    struct timeval tv = {.tv_sec = 8};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static ssize_t get(int fd, char *buf, size_t len, int flags) {
    ssize_t n = recv(fd, buf, len - 1, flags);
    buf[n > 0 ? n : 0] = 0;
    return n;
}

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    int l = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 4) < 0)
        return 2;
    printf("listening\n");
    char buf[64];
    ssize_t n;

    int c = accept_one(l);
    send(c, "go", 2, 0);
    usleep(500000); /* everything has arrived */
    n = get(c, buf, sizeof buf, 0);
    check(n == 3 && !strcmp(buf, "abc"), "in-band read stops before the urgent byte", n, buf);
    n = get(c, buf, sizeof buf, MSG_OOB);
    check(n == 1 && buf[0] == '!', "recv(MSG_OOB) gives the urgent byte", n, buf);
    n = get(c, buf, sizeof buf, MSG_OOB);
    check(n < 0 && errno == EINVAL, "recv(MSG_OOB) again: EINVAL", n, buf);
    n = get(c, buf, sizeof buf, 0);
    check(n == 3 && !strcmp(buf, "def"), "in-band read after the mark skips it", n, buf);
    close(c);

    c = accept_one(l);
    setsockopt(c, SOL_SOCKET, SO_OOBINLINE, &one, sizeof one);
    send(c, "go", 2, 0);
    usleep(500000);
    n = get(c, buf, sizeof buf, MSG_OOB);
    check(n < 0 && errno == EINVAL, "SO_OOBINLINE: recv(MSG_OOB) is EINVAL", n, buf);
    char all[16] = {0};
    size_t got = 0;
    while (got < 7 && (n = recv(c, all + got, sizeof all - 1 - got, 0)) > 0)
        got += n;
    check(got == 7 && !strcmp(all, "abc!def"), "SO_OOBINLINE: the urgent byte in-band", got, all);
    close(c);
    close(l);
    printf(failures ? "FAILED\n" : "PASSED\n");
    return failures ? 1 : 0;
}
