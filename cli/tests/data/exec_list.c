/* A connection used, then the program execs itself with execl, execlp or
 * execle (the C library's variadic exec functions), the socket without
 * FD_CLOEXEC: the new image goes on with the connection.
 *
 *   exec_list MODE ADDR PORT      connect to the ECHO peer, echo "hello",
 *                                 then MODE into the second image
 *   (second image) exec_list after FD MODE a b c d
 *                                 echo "again" on FD, print "ok MODE"
 *
 * Eight list arguments: four travel on the stack on x86-64. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

extern char **environ;

static int echo(int fd, const char *msg) {
    size_t len = strlen(msg), got = 0;
    char buf[64];
    if (write(fd, msg, len) != (ssize_t)len) {
        perror("write");
        return -1;
    }
    while (got < len) {
        ssize_t n = read(fd, buf + got, len - got);
        if (n <= 0) {
            perror("read");
            return -1;
        }
        got += (size_t)n;
    }
    if (memcmp(buf, msg, len) != 0) {
        fprintf(stderr, "the echo differs\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 8 && strcmp(argv[1], "after") == 0) {
        if (strcmp(argv[4], "a") || strcmp(argv[5], "b") || strcmp(argv[6], "c") ||
            strcmp(argv[7], "d")) {
            fprintf(stderr, "the arguments came wrong\n");
            return 1;
        }
        if (echo(atoi(argv[2]), "again\n") != 0)
            return 1;
        printf("ok %s\n", argv[3]);
        return 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: exec_list execl|execlp|execle ADDR PORT\n");
        return 2;
    }
    const char *mode = argv[1];
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
    inet_pton(AF_INET, argv[2], &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        perror("connect");
        return 1;
    }
    if (write(fd, "ECHO\n", 5) != 5 || echo(fd, "hello\n") != 0)
        return 1;
    char fds[16];
    snprintf(fds, sizeof fds, "%d", fd);
    fflush(stdout);
    if (strcmp(mode, "execl") == 0)
        execl(argv[0], argv[0], "after", fds, mode, "a", "b", "c", "d", (char *)NULL);
    else if (strcmp(mode, "execlp") == 0)
        execlp(argv[0], argv[0], "after", fds, mode, "a", "b", "c", "d", (char *)NULL);
    else if (strcmp(mode, "execle") == 0)
        execle(argv[0], argv[0], "after", fds, mode, "a", "b", "c", "d", (char *)NULL, environ);
    perror(mode);
    return 1;
}
