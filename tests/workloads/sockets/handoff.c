/* A socket handed over, and bytes moved by the kernel: after the fork, the server makes a UNIX
 * stream socketpair and hands one end to the client over their control socket (SCM_RIGHTS, with
 * one byte of data). Then, ROUNDS times, the server computes COMPUTE_MS and sends a file of
 * BLOCK bytes through its end, alternately with sendfile() and with splice() through a pipe; the
 * client reads the block on a copy of the received descriptor made by fcntl(F_DUPFD), computes
 * COMPUTE_MS/2 and answers 64 bytes on a copy made by dup2(); the server reads the answer.
 *
 * Counts: every sendfile() and splice() into the socket is a send of what it returned.
 *
 * Usage: handoff ROUNDS COMPUTE_MS */
#include "sock_check.h" /* first: it defines _GNU_SOURCE (splice) */

#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/wait.h>

enum { BLOCK = 16384, ANSWER = 64 };

/* Sends the descriptor `fd` over `ctl` with one byte of data. */
static void hand_over(int ctl, int fd) {
    char byte = 'h';
    struct iovec iov = {&byte, 1};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = control.buf,
                        .msg_controllen = sizeof control.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (sendmsg(ctl, &mh, 0) != 1) sc_die("sendmsg");
    sc_sends++;
    sc_send_bytes++;
}

/* The descriptor handed over on `ctl`. */
static int take_over(int ctl) {
    char byte;
    struct iovec iov = {&byte, 1};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = sizeof control.buf};
    if (recvmsg(ctl, &mh, 0) != 1) sc_die("recvmsg");
    sc_recvs++;
    sc_recv_bytes++;
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    if (!c || c->cmsg_type != SCM_RIGHTS) sc_die("no descriptor handed over");
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

/* Sends the BLOCK bytes of `file` through `sock` with sendfile(). */
static void by_sendfile(int sock, int file) {
    off_t at = 0;
    while (at < BLOCK) {
        ssize_t k = sendfile(sock, file, &at, BLOCK - at);
        if (k <= 0) sc_die("sendfile");
        sc_sends++;
        sc_send_bytes += k;
    }
}

/* Sends the BLOCK bytes of `file` through `sock` with splice() through the pipe `p`. */
static void by_splice(int sock, int file, int p[2]) {
    loff_t at = 0;
    while (at < BLOCK) {
        ssize_t in = splice(file, &at, p[1], NULL, BLOCK - at, 0);
        if (in <= 0) sc_die("splice from the file");
        while (in > 0) {
            ssize_t k = splice(p[0], NULL, sock, NULL, in, 0);
            if (k <= 0) sc_die("splice into the socket");
            sc_sends++;
            sc_send_bytes += k;
            in -= k;
        }
    }
}

static void server(int ctl, int rounds, double ms) {
    int pair[2], p[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) < 0) sc_die("socketpair");
    hand_over(ctl, pair[1]);
    close(pair[1]);
    char path[] = "/tmp/lbf-handoff-XXXXXX";
    int file = mkstemp(path);
    if (file < 0) sc_die("mkstemp");
    unlink(path);
    static char block[BLOCK];
    memset(block, 'f', sizeof block);
    if (write(file, block, sizeof block) != BLOCK) sc_die("write");
    if (pipe(p) < 0) sc_die("pipe");
    char answer[ANSWER];
    for (int i = 0; i < rounds; i++) {
        sc_compute(ms);
        if (i % 2)
            by_splice(pair[0], file, p);
        else
            by_sendfile(pair[0], file);
        if (!sc_recv(pair[0], answer, sizeof answer)) sc_die("end of stream");
    }
}

static void client(int ctl, int rounds, double ms) {
    int handed = take_over(ctl);
    int reads = fcntl(handed, F_DUPFD, 20);
    if (reads < 0) sc_die("fcntl");
    close(handed);
    int writes = dup2(reads, 31);
    if (writes < 0) sc_die("dup2");
    static char block[BLOCK];
    char answer[ANSWER];
    memset(answer, 'a', sizeof answer);
    for (int i = 0; i < rounds; i++) {
        if (!sc_recv(reads, block, sizeof block)) sc_die("end of stream");
        sc_compute(ms / 2);
        sc_send(writes, answer, sizeof answer, 0);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: handoff ROUNDS COMPUTE_MS\n");
        return 2;
    }
    int rounds = atoi(argv[1]);
    double ms = atof(argv[2]);
    int ctl[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, ctl) < 0) sc_die("socketpair");
    sc_start();
    if (fork() != 0) {
        close(ctl[1]);
        server(ctl[0], rounds, ms);
        sc_finish("server");
        int status;
        wait(&status);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    }
    sc_start();
    close(ctl[0]);
    client(ctl[1], rounds, ms);
    sc_finish("client");
    return 0;
}
