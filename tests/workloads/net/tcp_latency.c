/* An independent TCP latency measurement, to check lbf-node calibrate against: a ping-pong of
 * 1-byte messages written separately from lbf (blocking sockets, TCP_NODELAY, one byte each
 * way). The client prints "LATENCY <one-way seconds>", half the median of ROUNDS round trips
 * after 100 warm-up ones.
 * Usage: tcp_latency server PORT | tcp_latency client HOST PORT ROUNDS */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void fail(const char *what) {
    perror(what);
    exit(1);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void one(int fd, char *c, int out) {
    if (out ? write(fd, c, 1) != 1 : read(fd, c, 1) != 1)
        fail(out ? "write" : "read");
}

int main(int argc, char **argv) {
    int yes = 1;
    struct sockaddr_in a = {.sin_family = AF_INET};
    char c = 'x';
    if (argc == 3 && !strcmp(argv[1], "server")) {
        int l = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
        a.sin_port = htons(atoi(argv[2]));
        if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1))
            fail("bind");
        int fd = accept(l, NULL, NULL);
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
        while (read(fd, &c, 1) == 1)
            one(fd, &c, 1);
        return 0;
    }
    if (argc != 5 || strcmp(argv[1], "client")) {
        fprintf(stderr, "usage: tcp_latency server PORT | tcp_latency client HOST PORT ROUNDS\n");
        return 2;
    }
    int rounds = atoi(argv[4]);
    double *t = calloc(rounds, sizeof *t);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_port = htons(atoi(argv[3]));
    inet_pton(AF_INET, argv[2], &a.sin_addr);
    for (int tries = 0; connect(fd, (struct sockaddr *)&a, sizeof a); tries++) {
        if (tries == 100)
            fail("connect");
        usleep(20000);
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    for (int i = -100; i < rounds; i++) {
        double s = now();
        one(fd, &c, 1);
        one(fd, &c, 0);
        if (i >= 0)
            t[i] = now() - s;
    }
    qsort(t, rounds, sizeof *t, by_value);
    printf("LATENCY %.9e\n", t[rounds / 2] / 2);
    return 0;
}
