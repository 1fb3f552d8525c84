/* A minimal remote shell for "hosts" that are network namespaces of one machine, so that an
 * MPI launcher (Open MPI's plm_rsh_agent) can start its daemons on another host without ssh.
 *
 *   rsh serve SOCKET    run on the remote host (inside its namespace): accepts connections
 *                       on the UNIX socket SOCKET, and for each runs the command line it
 *                       receives with `sh -c`, its standard output and error going back.
 *   rsh HOST ARGS...    the agent mpirun calls: sends ARGS, joined by spaces as ssh does, to
 *                       $LBF_RSH_DIR/HOST.sock and relays the output until the command ends.
 *
 * The remote command is a child of the server, not of the launcher: on a real cluster the
 * remote processes are not descendants of mpirun either, which is what a per-host tracer
 * (one lbf-node per host, following its processes' descendants) relies on. The server reaps
 * each command as it ends, so that its CPU time (and that of what it waited for) counts in
 * the server's own children's time, which the tests read to tell their own work from other
 * work on the machine. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static int address(const char *path, struct sockaddr_un *sa) {
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa->sun_path) {
        fprintf(stderr, "rsh: socket path too long: %s\n", path);
        return -1;
    }
    strcpy(sa->sun_path, path);
    return 0;
}

/* Reaps every command that has ended. */
static void reap(int sig) {
    (void)sig;
    int saved = errno;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

static int serve(const char *path) {
    struct sockaddr_un sa;
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0 || address(path, &sa) < 0) return 1;
    unlink(path);
    if (bind(s, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(s, 16) < 0) {
        perror("rsh: listening");
        return 1;
    }
    struct sigaction sa_chld;
    memset(&sa_chld, 0, sizeof sa_chld);
    sa_chld.sa_handler = reap;
    sa_chld.sa_flags = SA_RESTART;
    sigaction(SIGCHLD, &sa_chld, NULL);
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0) continue;
        if (fork() == 0) {
            close(s);
            static char cmd[65536];
            size_t n = 0;
            while (n < sizeof cmd - 1 && read(c, cmd + n, 1) == 1 && cmd[n] != '\n') n++;
            cmd[n] = 0;
            dup2(c, 1);
            dup2(c, 2);
            int devnull = open("/dev/null", 0);
            dup2(devnull, 0);
            close(c);
            signal(SIGCHLD, SIG_DFL);
            execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
            _exit(127);
        }
        close(c);
    }
}

static int client(const char *host, int argc, char **argv) {
    const char *dir = getenv("LBF_RSH_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.sock", dir ? dir : ".", host);
    struct sockaddr_un sa;
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0 || address(path, &sa) < 0) return 255;
    if (connect(s, (struct sockaddr *)&sa, sizeof sa) < 0) {
        fprintf(stderr, "rsh: no host %s (%s): ", host, path);
        perror("");
        return 255;
    }
    for (int i = 0; i < argc; i++) {
        if (write(s, argv[i], strlen(argv[i])) < 0 || write(s, i + 1 < argc ? " " : "\n", 1) < 0)
            return 255;
    }
    char buf[4096];
    ssize_t r;
    while ((r = read(s, buf, sizeof buf)) > 0)
        if (write(1, buf, (size_t)r) < 0) break;
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "serve") == 0) return serve(argv[2]);
    if (argc >= 3) return client(argv[1], argc - 2, argv + 2);
    fprintf(stderr, "usage: rsh serve SOCKET | rsh HOST COMMAND...\n");
    return 2;
}
