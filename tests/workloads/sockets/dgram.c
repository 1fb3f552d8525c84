/* Datagram ping-pong: a client sends ROUNDS requests, computing COMPUTE_MS before each, and a
 * server answers each with 512 bytes after COMPUTE_MS/2 of work.
 *
 * udp:  UDP; the server, bound to the wildcard address and port PORT, answers each
 *       recvfrom() alternately with a sendto() and a sendmsg() naming the sender. The client
 *       sends its 64-byte requests to 127.0.0.1:PORT alternately with send() on a connected
 *       socket and with sendmsg() naming the address on an unconnected one, and takes each
 *       answer with recv() on the socket that asked.
 * unix: a UNIX datagram socketpair; each round the client sends its request as VECTOR
 *       datagrams of 16 bytes with sendmmsg() and the server takes them with recvmmsg()
 *       (more than a record of lbf holds); answers use sendmsg()/recvmsg().
 *
 * Usage: dgram udp PORT ROUNDS COMPUTE_MS | dgram unix ROUNDS COMPUTE_MS */
#include "sock_check.h" /* first: it defines _GNU_SOURCE (sendmmsg, recvmmsg) */

#include <sys/wait.h>

enum { REQUEST = 64, REPLY = 512, VECTOR = 100, PIECE = 16 };

static void dsend(int fd, const void *buf, size_t n) {
    ssize_t k = send(fd, buf, n, 0);
    if (k != (ssize_t)n) sc_die("send");
    sc_sends++;
    sc_send_bytes += k;
}

static void drecv(int fd, void *buf, size_t n) {
    ssize_t k = recv(fd, buf, n, 0);
    if (k <= 0) sc_die("recv");
    sc_recvs++;
    sc_recv_bytes += k;
}

/* Sends `n` bytes to `to` with sendmsg() naming the address. */
static void dsend_to(int fd, const void *buf, size_t n, struct sockaddr_in *to) {
    struct iovec iov = {(void *)buf, n};
    struct msghdr mh = {.msg_name = to, .msg_namelen = sizeof *to, .msg_iov = &iov, .msg_iovlen = 1};
    ssize_t k = sendmsg(fd, &mh, 0);
    if (k != (ssize_t)n) sc_die("sendmsg");
    sc_sends++;
    sc_send_bytes += k;
}

static void udp_server(int fd, int rounds, double ms) {
    char req[REQUEST], reply[REPLY];
    memset(reply, 'r', sizeof reply);
    for (int i = 0; i < rounds; i++) {
        struct sockaddr_in peer;
        socklen_t len = sizeof peer;
        ssize_t k = recvfrom(fd, req, sizeof req, 0, (struct sockaddr *)&peer, &len);
        if (k <= 0) sc_die("recvfrom");
        sc_recvs++;
        sc_recv_bytes += k;
        sc_compute(ms / 2);
        if (i % 2) {
            dsend_to(fd, reply, sizeof reply, &peer);
            continue;
        }
        k = sendto(fd, reply, sizeof reply, 0, (struct sockaddr *)&peer, len);
        if (k != REPLY) sc_die("sendto");
        sc_sends++;
        sc_send_bytes += k;
    }
}

static void udp_client(int port, int rounds, double ms) {
    int conn = socket(AF_INET, SOCK_DGRAM, 0), loose = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (connect(conn, (struct sockaddr *)&to, sizeof to) < 0) sc_die("connect");
    char req[REQUEST], reply[REPLY];
    memset(req, 'q', sizeof req);
    for (int i = 0; i < rounds; i++) {
        sc_compute(ms);
        if (i % 2) {
            dsend_to(loose, req, sizeof req, &to);
            drecv(loose, reply, sizeof reply);
        } else {
            dsend(conn, req, sizeof req);
            drecv(conn, reply, sizeof reply);
        }
    }
}

/* The VECTOR datagrams of PIECE bytes at `buf`, as messages of sendmmsg()/recvmmsg(). */
static void vector(char *buf, struct iovec *iov, struct mmsghdr *msgs) {
    memset(msgs, 0, VECTOR * sizeof *msgs);
    for (int m = 0; m < VECTOR; m++) {
        iov[m] = (struct iovec){buf + m * PIECE, PIECE};
        msgs[m].msg_hdr.msg_iov = &iov[m];
        msgs[m].msg_hdr.msg_iovlen = 1;
    }
}

static void unix_server(int fd, int rounds, double ms) {
    static char in[VECTOR * PIECE];
    static struct iovec iov[VECTOR];
    static struct mmsghdr msgs[VECTOR];
    char reply[REPLY];
    memset(reply, 'r', sizeof reply);
    for (int i = 0; i < rounds; i++) {
        vector(in, iov, msgs);
        int got = 0;
        while (got < VECTOR) {
            int n = recvmmsg(fd, msgs + got, VECTOR - got, 0, NULL);
            if (n <= 0) sc_die("recvmmsg");
            for (int m = got; m < got + n; m++) {
                sc_recvs++;
                sc_recv_bytes += msgs[m].msg_len;
            }
            got += n;
        }
        sc_compute(ms / 2);
        struct iovec out = {reply, sizeof reply};
        struct msghdr mh = {.msg_iov = &out, .msg_iovlen = 1};
        ssize_t k = sendmsg(fd, &mh, 0);
        if (k != REPLY) sc_die("sendmsg");
        sc_sends++;
        sc_send_bytes += k;
    }
}

static void unix_client(int fd, int rounds, double ms) {
    static char out[VECTOR * PIECE];
    static struct iovec iov[VECTOR];
    static struct mmsghdr msgs[VECTOR];
    char reply[REPLY];
    memset(out, 'q', sizeof out);
    for (int i = 0; i < rounds; i++) {
        sc_compute(ms);
        vector(out, iov, msgs);
        int sent = 0;
        while (sent < VECTOR) {
            int n = sendmmsg(fd, msgs + sent, VECTOR - sent, 0);
            if (n <= 0) sc_die("sendmmsg");
            for (int m = sent; m < sent + n; m++) {
                sc_sends++;
                sc_send_bytes += msgs[m].msg_len;
            }
            sent += n;
        }
        struct iovec in = {reply, sizeof reply};
        struct msghdr mh = {.msg_iov = &in, .msg_iovlen = 1};
        ssize_t k = recvmsg(fd, &mh, 0);
        if (k <= 0) sc_die("recvmsg");
        sc_recvs++;
        sc_recv_bytes += k;
    }
}

int main(int argc, char **argv) {
    sc_start();
    int server_side, fds[2] = {-1, -1};
    int udp = argc == 5 && strcmp(argv[1], "udp") == 0;
    if (!udp && !(argc == 4 && strcmp(argv[1], "unix") == 0)) {
        fprintf(stderr, "usage: dgram udp PORT ROUNDS COMPUTE_MS | dgram unix ROUNDS COMPUTE_MS\n");
        return 2;
    }
    int rounds = atoi(argv[udp ? 3 : 2]);
    double ms = atof(argv[udp ? 4 : 3]);
    if (udp) {
        /* Bound before the client exists, so that no request is lost. */
        fds[0] = socket(AF_INET, SOCK_DGRAM, 0);
        struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
        at.sin_addr.s_addr = htonl(INADDR_ANY);
        if (bind(fds[0], (struct sockaddr *)&at, sizeof at) < 0) sc_die("bind");
    } else if (socketpair(AF_UNIX, SOCK_DGRAM, 0, fds) < 0) {
        sc_die("socketpair");
    }
    server_side = fork() != 0;
    if (server_side) {
        if (!udp) close(fds[1]);
        if (udp)
            udp_server(fds[0], rounds, ms);
        else
            unix_server(fds[0], rounds, ms);
        sc_finish("server");
        int status;
        wait(&status);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    }
    sc_start();
    sc_sends = sc_send_bytes = sc_recvs = sc_recv_bytes = 0;
    sc_work_ns = 0;
    if (udp) {
        close(fds[0]);
        udp_client(atoi(argv[2]), rounds, ms);
    } else {
        close(fds[0]);
        unix_client(fds[1], rounds, ms);
    }
    sc_finish("client");
    return 0;
}
