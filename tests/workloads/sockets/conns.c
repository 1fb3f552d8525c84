/* Many short connections, as an HTTP-like server sees them: a client makes CONNS connections one
 * after another, computing COMPUTE_MS before each, each carrying a 16-byte greeting from the
 * server (sent once it accepted: over UNIX sockets lbf can name a client's connection only
 * then), one 64-byte request and a 512-byte reply; the server polls its
 * listening socket and its open connections, answers each request, and closes a connection
 * once the client has closed it. The client closes a connection once it is LIFETIME_MS old or
 * MAX_OPEN are open, so that many are open at once and each lives long enough for lbf to
 * identify its socket (it does so when it decodes the accept or connect, within milliseconds).
 *
 * Counts: every read() and send() that moved bytes (a read returning 0, the end of a
 * connection, is none).
 *
 * Usage: conns all ENDPOINT CONNS LIFETIME_MS COMPUTE_MS   (forks the client; the server stays)
 * ENDPOINT is tcp:HOST:PORT or unix:PATH (see sock_check.h). */
#include <poll.h>
#include <sys/wait.h>

#include "sock_check.h"

enum { GREETING = 16, REQUEST = 64, REPLY = 512, MAX_OPEN = 400 };

static void server(const char *endpoint, int conns) {
    int lfd = sc_listen(endpoint);
    /* pfd[0]: the listening socket, then the open connections; got[i]: request bytes read. */
    static struct pollfd pfd[MAX_OPEN + 2];
    static int got[MAX_OPEN + 2];
    int open = 1, accepted = 0, done = 0;
    pfd[0].fd = lfd;
    pfd[0].events = POLLIN;
    char greeting[GREETING], reply[REPLY], request[REQUEST];
    memset(greeting, 'g', sizeof greeting);
    memset(reply, 'r', sizeof reply);
    while (done < conns) {
        if (poll(pfd, open, -1) < 0) sc_die("poll");
        for (int i = open - 1; i >= 1; i--) {
            if (!(pfd[i].revents & (POLLIN | POLLHUP))) continue;
            ssize_t k = read(pfd[i].fd, request, sizeof request);
            if (k < 0) sc_die("read");
            if (k == 0) { /* the client closed */
                close(pfd[i].fd);
                done++;
                pfd[i] = pfd[--open];
                got[i] = got[open];
                continue;
            }
            sc_recvs++;
            sc_recv_bytes += k;
            got[i] += (int)k;
            if (got[i] > REQUEST) sc_die("a request too long");
            if (got[i] == REQUEST) sc_send(pfd[i].fd, reply, sizeof reply, 0);
        }
        if ((pfd[0].revents & POLLIN) && accepted < conns) {
            if (open == MAX_OPEN + 2) sc_die("too many open connections");
            pfd[open].fd = sc_accept(lfd);
            sc_send(pfd[open].fd, greeting, sizeof greeting, 0);
            pfd[open].events = POLLIN;
            got[open++] = 0;
            if (++accepted == conns) pfd[0].fd = -1; /* poll ignores it from now on */
        }
    }
    close(lfd);
    if (strncmp(endpoint, "unix:", 5) == 0) unlink(endpoint + 5);
}

static void client(const char *endpoint, int conns, double lifetime_ms, double ms) {
    static int fds[MAX_OPEN];
    static int64_t opened[MAX_OPEN];
    int first = 0, open = 0; /* a ring of the open connections, oldest first */
    char greeting[GREETING], request[REQUEST], reply[REPLY];
    memset(request, 'q', sizeof request);
    for (int i = 0; i < conns; i++) {
        int64_t now = work_clock_ns(CLOCK_MONOTONIC);
        while (open > 0 && (open == MAX_OPEN || now - opened[first] >= (int64_t)(lifetime_ms * 1e6))) {
            close(fds[first]);
            first = (first + 1) % MAX_OPEN;
            open--;
        }
        sc_compute(ms);
        int fd = sc_connect(endpoint);
        if (!sc_recv(fd, greeting, sizeof greeting)) sc_die("the server closed early");
        sc_send(fd, request, sizeof request, 0);
        if (!sc_recv(fd, reply, sizeof reply)) sc_die("the server closed early");
        int at = (first + open++) % MAX_OPEN;
        fds[at] = fd;
        opened[at] = now;
    }
    /* The last ones live as long too. */
    usleep((useconds_t)(lifetime_ms * 1000));
    for (; open > 0; open--, first = (first + 1) % MAX_OPEN) close(fds[first]);
}

int main(int argc, char **argv) {
    if (argc != 6 || strcmp(argv[1], "all") != 0) {
        fprintf(stderr, "usage: conns all ENDPOINT CONNS LIFETIME_MS COMPUTE_MS\n");
        return 2;
    }
    const char *endpoint = argv[2];
    int conns = atoi(argv[3]);
    double lifetime_ms = atof(argv[4]), ms = atof(argv[5]);
    sc_start();
    if (fork() == 0) {
        sc_start();
        client(endpoint, conns, lifetime_ms, ms);
        sc_finish("client");
        return 0;
    }
    server(endpoint, conns);
    sc_finish("server");
    int status;
    wait(&status);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
