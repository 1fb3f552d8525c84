/* SPA, the Synthetic Parallel Application of Eom and Hollingsworth's procedure-LBF paper: one
 * server and three clients. Each client loops ITERS times: compute COMPUTE_MS, send a request,
 * wait for the reply. The server serves two request classes: servBusy1 (2 x COMPUTE_MS) for
 * the first client and servBusy2 (1 x COMPUTE_MS) for the other two, so the server is the
 * bottleneck. The server waits for requests with poll().
 *
 * Framing exercises the byte-stream cases: a client sends its 16-byte header and its payload
 * in one send() and the server reads them with two reads (one send, several receives); the
 * server replies with two sends (header, then payload) that the client may read with one read
 * (several sends, one receive).
 *
 * Usage: spa server ENDPOINT CLIENTS ITERS COMPUTE_MS
 *        spa client ENDPOINT ID ITERS COMPUTE_MS
 *        spa all ENDPOINT ITERS COMPUTE_MS     (forks the server and 3 clients)
 * ENDPOINT is tcp:HOST:PORT or unix:PATH (see sock_check.h).
 *
 * Built with -DMOVED=1 (or 2), servBusy1 (servBusy2) is moved from the server to the clients
 * it serves: the server answers their requests at once, and each such client runs it after
 * sending its request and before reading the reply (the procedure-LBF experiment's modified
 * builds). With -DEMPTIED=1 (or 2), that procedure does nothing (critical-path zeroing).
 *
 * Built with -DREPORT_LONG_CALLS=1, the server prints to stderr each call of a procedure whose
 * CPU time (the thread's own clock, taken around the call) exceeds its length by over 5 %. */
#include <poll.h>
#include <sys/wait.h>

#include "sock_check.h"

enum { CLIENTS = 3, MAX_CLIENTS = 8, REQ_PAYLOAD = 200, REPLY_PAYLOAD = 1000 };

struct header {
    int32_t client, class, seq, len;
};

#ifndef MOVED
#define MOVED 0
#endif
#ifndef EMPTIED
#define EMPTIED 0
#endif
#ifndef REPORT_LONG_CALLS
#define REPORT_LONG_CALLS 0
#endif

/* Kept out of line, under their own names, so that `lbf-trace --procedure` finds them. */
__attribute__((noinline, noclone)) static void servBusy1(double ms) {
    if (EMPTIED != 1) sc_compute(2 * ms);
}
__attribute__((noinline, noclone)) static void servBusy2(double ms) {
    if (EMPTIED != 2) sc_compute(ms);
}

static void server(const char *endpoint, int clients, int iters, double ms) {
    sc_start();
    int lfd = sc_listen(endpoint);
    struct pollfd pfd[MAX_CLIENTS];
    for (int i = 0; i < clients; i++) {
        pfd[i].fd = sc_accept(lfd);
        pfd[i].events = POLLIN;
    }
    close(lfd);
    int left = clients * iters, served[MAX_CLIENTS] = {0};
    char payload[REPLY_PAYLOAD];
    memset(payload, 'r', sizeof payload);
    while (left > 0) {
        if (poll(pfd, clients, -1) < 0) sc_die("poll");
        for (int i = 0; i < clients; i++) {
            if (!(pfd[i].revents & POLLIN)) continue;
            struct header h;
            char req[REQ_PAYLOAD];
            if (!sc_recv(pfd[i].fd, &h, sizeof h)) sc_die("client left early");
            sc_recv(pfd[i].fd, req, (size_t)h.len);
            if (h.class != MOVED) {
                int64_t cpu = work_clock_ns(CLOCK_THREAD_CPUTIME_ID);
                if (h.class == 1)
                    servBusy1(ms);
                else
                    servBusy2(ms);
                cpu = work_clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu;
                double length = (h.class == 1 ? 2 : 1) * ms * 1e6;
                if (REPORT_LONG_CALLS && cpu > 1.05 * length)
                    fprintf(stderr, "servBusy%d took %.3f ms of CPU for %.0f ms\n", h.class,
                            cpu / 1e6, length / 1e6);
            }
            struct header r = {h.client, h.class, h.seq, REPLY_PAYLOAD};
            sc_send(pfd[i].fd, &r, sizeof r, 0);
            sc_send(pfd[i].fd, payload, sizeof payload, 0);
            left--;
            if (++served[i] == iters) {
                close(pfd[i].fd);
                pfd[i].fd = -1; /* poll ignores it from now on */
            }
        }
    }
    if (strncmp(endpoint, "unix:", 5) == 0) unlink(endpoint + 5);
    sc_finish("server");
}

static void client(const char *endpoint, int id, int iters, double ms) {
    sc_start();
    int fd = sc_connect(endpoint);
    char buf[sizeof(struct header) + REQ_PAYLOAD];
    for (int seq = 0; seq < iters; seq++) {
        sc_compute(ms);
        struct header h = {id, id == 0 ? 1 : 2, seq, REQ_PAYLOAD};
        memcpy(buf, &h, sizeof h);
        memset(buf + sizeof h, 'q', REQ_PAYLOAD);
        sc_send(fd, buf, sizeof buf, 0);
        if (h.class == MOVED) {
            if (h.class == 1)
                servBusy1(ms);
            else
                servBusy2(ms);
        }
        char reply[sizeof(struct header) + REPLY_PAYLOAD];
        sc_recv(fd, reply, sizeof reply);
    }
    close(fd);
    sc_finish(id == 0 ? "client1" : "client2");
}

int main(int argc, char **argv) {
    if (argc == 6 && strcmp(argv[1], "server") == 0) {
        server(argv[2], atoi(argv[3]), atoi(argv[4]), atof(argv[5]));
    } else if (argc == 6 && strcmp(argv[1], "client") == 0) {
        client(argv[2], atoi(argv[3]), atoi(argv[4]), atof(argv[5]));
    } else if (argc == 5 && strcmp(argv[1], "all") == 0) {
        int iters = atoi(argv[3]);
        double ms = atof(argv[4]);
        if (fork() == 0) {
            server(argv[2], CLIENTS, iters, ms);
            return 0;
        }
        for (int id = 0; id < CLIENTS; id++) {
            if (fork() == 0) {
                client(argv[2], id, iters, ms);
                return 0;
            }
        }
        int status, failed = 0;
        while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status);
        return failed;
    } else {
        fprintf(stderr, "usage: spa server ENDPOINT CLIENTS ITERS COMPUTE_MS | "
                        "spa client ENDPOINT ID ITERS COMPUTE_MS | spa all ENDPOINT ITERS COMPUTE_MS\n");
        return 2;
    }
    return 0;
}
