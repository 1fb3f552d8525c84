/* Shared helpers of lbf's socket test workloads: a CPU-exact busy loop, counted send/receive
 * wrappers, endpoint parsing (TCP over IPv4/IPv6 or a UNIX socket path) and the LBF-CHECK line
 * that integration tests compare a capture against.
 *
 * Endpoints: `tcp:HOST:PORT` (HOST an IPv4 address, or an IPv6 one in brackets) or
 * `unix:PATH` (a stream socket).
 *
 * LBF-CHECK fields: pid, role, sends (send calls that moved bytes), send_bytes, recvs (receive
 * calls that returned bytes), recv_bytes; cpu_ns is the process's CPU time at exit
 * (CLOCK_PROCESS_CPUTIME_ID), work_ns the CPU spent in the busy loop, wall_ns the
 * CLOCK_MONOTONIC time from start to exit. */
#ifndef SOCK_CHECK_H
#define SOCK_CHECK_H

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include "../work.h"
#include <unistd.h>

static long long sc_sends, sc_send_bytes, sc_recvs, sc_recv_bytes;
static int64_t sc_work_ns, sc_wall_start;

static inline void sc_die(const char *what) {
    fprintf(stderr, "%s: %s\n", what, strerror(errno));
    exit(2);
}

/* Burns `ms` milliseconds of this thread's CPU time (see ../work.h). */
static inline void sc_compute(double ms) { sc_work_ns += work_burn(ms); }

static inline void sc_start(void) { sc_wall_start = work_clock_ns(CLOCK_MONOTONIC); }

/* An address for `endpoint`; returns its length. */
static inline socklen_t sc_address(const char *endpoint, struct sockaddr_storage *ss) {
    memset(ss, 0, sizeof *ss);
    if (strncmp(endpoint, "unix:", 5) == 0) {
        struct sockaddr_un *un = (struct sockaddr_un *)ss;
        un->sun_family = AF_UNIX;
        snprintf(un->sun_path, sizeof un->sun_path, "%s", endpoint + 5);
        return sizeof *un;
    }
    if (strncmp(endpoint, "tcp:", 4) != 0) {
        fprintf(stderr, "bad endpoint %s (tcp:HOST:PORT or unix:PATH)\n", endpoint);
        exit(2);
    }
    char host[128];
    snprintf(host, sizeof host, "%s", endpoint + 4);
    char *colon = strrchr(host, ':');
    if (!colon) {
        fprintf(stderr, "bad endpoint %s: no port\n", endpoint);
        exit(2);
    }
    *colon = 0;
    int port = atoi(colon + 1);
    if (host[0] == '[') {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
        host[strlen(host) - 1] = 0;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
        if (inet_pton(AF_INET6, host + 1, &in6->sin6_addr) != 1) sc_die("inet_pton");
        return sizeof *in6;
    }
    struct sockaddr_in *in = (struct sockaddr_in *)ss;
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    if (inet_pton(AF_INET, host, &in->sin_addr) != 1) sc_die("inet_pton");
    return sizeof *in;
}

static inline void sc_nodelay(int fd, int family) {
    int one = 1;
    if (family != AF_UNIX) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* A listening stream socket on `endpoint`. */
static inline int sc_listen(const char *endpoint) {
    struct sockaddr_storage ss;
    socklen_t len = sc_address(endpoint, &ss);
    if (ss.ss_family == AF_UNIX) unlink(((struct sockaddr_un *)&ss)->sun_path);
    int fd = socket(ss.ss_family, SOCK_STREAM, 0);
    if (fd < 0) sc_die("socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, len) < 0) sc_die("bind");
    if (listen(fd, 16) < 0) sc_die("listen");
    return fd;
}

static inline int sc_accept(int lfd) {
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) sc_die("accept");
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &len);
    sc_nodelay(fd, ss.ss_family);
    return fd;
}

/* Connects to `endpoint`, retrying for up to 10 s while the server starts. */
static inline int sc_connect(const char *endpoint) {
    struct sockaddr_storage ss;
    socklen_t len = sc_address(endpoint, &ss);
    for (int attempt = 0; attempt < 1000; attempt++) {
        int fd = socket(ss.ss_family, SOCK_STREAM, 0);
        if (fd < 0) sc_die("socket");
        if (connect(fd, (struct sockaddr *)&ss, len) == 0) {
            sc_nodelay(fd, ss.ss_family);
            return fd;
        }
        close(fd);
        usleep(10000);
    }
    sc_die("connect");
    return -1;
}

/* Sends all of `buf` with one send() call per `chunk` bytes (0: one call), counting calls. */
static inline void sc_send(int fd, const void *buf, size_t n, size_t chunk) {
    const char *p = buf;
    while (n > 0) {
        size_t want = chunk && chunk < n ? chunk : n;
        ssize_t k = send(fd, p, want, 0);
        if (k <= 0) sc_die("send");
        sc_sends++;
        sc_send_bytes += k;
        p += k;
        n -= (size_t)k;
    }
}

/* Receives exactly `n` bytes, with as many read() calls as it takes, counting calls; returns 0
 * at end of stream before any byte. */
static inline int sc_recv(int fd, void *buf, size_t n) {
    char *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, p + got, n - got);
        if (k < 0) sc_die("read");
        if (k == 0) {
            if (got == 0) return 0;
            fprintf(stderr, "stream ended inside a message\n");
            exit(2);
        }
        sc_recvs++;
        sc_recv_bytes += k;
        got += (size_t)k;
    }
    return 1;
}

/* Prints this process's LBF-CHECK line. */
static inline void sc_finish(const char *role) {
    int64_t wall = work_clock_ns(CLOCK_MONOTONIC) - sc_wall_start;
    int64_t cpu = work_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    printf("LBF-CHECK pid=%d role=%s sends=%lld send_bytes=%lld recvs=%lld recv_bytes=%lld "
           "cpu_ns=%lld work_ns=%lld wall_ns=%lld\n",
           (int)getpid(), role, sc_sends, sc_send_bytes, sc_recvs, sc_recv_bytes,
           (long long)cpu, (long long)sc_work_ns, (long long)wall);
    fflush(stdout);
}

#endif
