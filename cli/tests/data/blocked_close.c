/* A blocked call holds the socket, not the descriptor number.
 *
 * blocked_close PORT: listens on PORT; blocked_peer connects twice per
 * round (X, then Y).
 *
 * Round 1 (recv): thread B blocks in recv(x); the main thread closes x and
 * accepts Y, which gets x's number again; the peer answers "go" on Y with
 * "from-Y", then sends "from-X" on X. Linux: close does not end B's call
 * (it holds the file); B reads "from-X", the main thread "from-Y".
 *
 * Round 2 (send): thread B blocks in send(x, 8 MiB) (the peer does not
 * read X yet); the main thread closes x and accepts Y onto x's number,
 * sends "go"; the peer then reads X to its end and reports the count on
 * Y. Linux: B's send completes on X; Y carries none of it.
 *
 * Prints one line per check and exits 0 when every check holds.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define BIG (8 << 20)

static int failures;

static void check(int ok, const char *what, const char *detail) {
    printf("%s %s: %s\n", ok ? "ok" : "FAIL", what, detail);
    fflush(stdout);
    if (!ok)
        failures++;
}

static void timeouts(int fd, int secs) {
    struct timeval tv = {.tv_sec = secs};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

struct call {
    int fd;
    ssize_t n;
    int err;
    char buf[64];
};

static void *blocked_recv(void *arg) {
    struct call *c = arg;
    c->n = recv(c->fd, c->buf, sizeof c->buf - 1, 0);
    c->err = c->n < 0 ? errno : 0;
    if (c->n > 0)
        c->buf[c->n] = 0;
    return NULL;
}

static void *blocked_send(void *arg) {
    struct call *c = arg;
    char *big = malloc(BIG);
    if (!big) {
        c->n = -1;
        c->err = ENOMEM;
        return NULL;
    }
    memset(big, 'X', BIG);
    c->n = send(c->fd, big, BIG, MSG_NOSIGNAL);
    c->err = c->n < 0 ? errno : 0;
    free(big);
    return NULL;
}

/* Reads from fd until `len` bytes or a line end; the count read. */
static ssize_t read_line(int fd, char *buf, size_t len) {
    size_t got = 0;
    while (got + 1 < len) {
        ssize_t n = recv(fd, buf + got, 1, 0);
        if (n <= 0)
            break;
        got += n;
        if (buf[got - 1] == '\n')
            break;
    }
    buf[got] = 0;
    return got;
}

static int accept_one(int l) {
    int fd = accept(l, NULL, NULL);
    if (fd < 0) {
        perror("accept");
        exit(2);
    }
    timeouts(fd, 8);
    return fd;
}

static void round_recv(int l) {
    char detail[256];
    struct call b = {.fd = accept_one(l)};
    int x = b.fd;
    pthread_t t;
    pthread_create(&t, NULL, blocked_recv, &b);
    usleep(300000);
    close(x);
    int y = accept_one(l);
    snprintf(detail, sizeof detail, "closed %d, accepted %d", x, y);
    check(y == x, "recv round: the new connection reuses the number", detail);
    send(y, "go", 2, 0);
    /* Time for a blocked call that follows the number to take Y's bytes. */
    usleep(300000);
    char buf[64];
    ssize_t n = read_line(y, buf, sizeof buf);
    snprintf(detail, sizeof detail, "%zd bytes: %s", n, buf);
    check(n == 7 && strcmp(buf, "from-Y\n") == 0, "recv round: Y's bytes go to Y's reader", detail);
    pthread_join(t, NULL);
    snprintf(detail, sizeof detail, "recv returned %zd (errno %d): %s", b.n, b.err,
             b.n > 0 ? b.buf : "");
    check(b.n == 7 && strcmp(b.buf, "from-X\n") == 0,
          "recv round: the blocked recv reads its own connection", detail);
    close(y);
}

static void round_send(int l) {
    char detail[256];
    struct call b = {.fd = accept_one(l)};
    int x = b.fd;
    pthread_t t;
    pthread_create(&t, NULL, blocked_send, &b);
    usleep(300000);
    close(x);
    int y = accept_one(l);
    snprintf(detail, sizeof detail, "closed %d, accepted %d", x, y);
    check(y == x, "send round: the new connection reuses the number", detail);
    send(y, "go", 2, 0);
    pthread_join(t, NULL);
    snprintf(detail, sizeof detail, "send returned %zd (errno %d)", b.n, b.err);
    check(b.n == BIG, "send round: the blocked send completes on its connection", detail);
    char buf[64];
    ssize_t n = read_line(y, buf, sizeof buf);
    char want[32];
    snprintf(want, sizeof want, "x=%d\n", BIG);
    snprintf(detail, sizeof detail, "%zd bytes: %s", n, buf);
    check(strcmp(buf, want) == 0, "send round: the peer got every byte on X", detail);
    close(y);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: blocked_close PORT\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int l = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 16) < 0) {
        perror("bind/listen");
        return 2;
    }
    printf("listening\n");
    round_recv(l);
    round_send(l);
    close(l);
    printf(failures ? "FAILED\n" : "PASSED\n");
    return failures ? 1 : 0;
}
