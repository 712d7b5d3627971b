/* urgent_peer ADDRESS PORT: twice, connects, waits for "go", sends "abc",
 * the urgent byte "!" (MSG_OOB) and "def", and waits for the end. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static int dial(const char *addr, int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, addr, &a.sin_addr);
    for (int i = 0; i < 200; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
            struct timeval tv = {.tv_sec = 15};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            return fd;
        }
        close(fd);
        usleep(50000);
    }
    return -1;
}

int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    for (int round = 0; round < 2; round++) {
        int fd = dial(argv[1], atoi(argv[2]));
        char go[2];
        if (fd < 0 || recv(fd, go, 2, MSG_WAITALL) != 2) {
            fprintf(stderr, "round %d: no go\n", round);
            return 1;
        }
        if (send(fd, "abc", 3, 0) != 3 || send(fd, "!", 1, MSG_OOB) != 1 ||
            send(fd, "def", 3, 0) != 3) {
            perror("send");
            return 1;
        }
        char b[16];
        while (recv(fd, b, sizeof b, 0) > 0)
            ;
        close(fd);
    }
    printf("PASSED\n");
    return 0;
}
