/* echo_server PORT COUNT: echoes COUNT connections, one after the other,
 * each until its end; prints "listening" once it listens. */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: echo_server PORT COUNT\n");
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
    for (int i = 0; i < atoi(argv[2]); i++) {
        int c = accept(l, NULL, NULL);
        if (c < 0) {
            perror("accept");
            return 1;
        }
        char buf[4096];
        ssize_t n;
        while ((n = recv(c, buf, sizeof buf, 0)) > 0)
            if (send(c, buf, n, 0) != n) {
                perror("send");
                return 1;
            }
        close(c);
    }
    printf("served %s\n", argv[2]);
    return 0;
}
