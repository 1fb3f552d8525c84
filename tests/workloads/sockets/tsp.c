/* A TSP-like branch-and-bound master/worker over TCP (the paper's TSP experiment, by sockets).
 * The master owns TASKS subproblems (tour prefixes) and the best bound so far; workers ask for
 * work, explore a subproblem (CPU: 1-3 x COMPUTE_MS, by the task's number) and report the best
 * tour they found, which may tighten the bound the master sends with the next tasks. The
 * master waits for requests with select(). Every exchange is a fixed-size message; a task
 * number of -1 tells a worker to stop.
 *
 * Usage: tsp master ENDPOINT WORKERS TASKS COMPUTE_MS
 *        tsp worker ENDPOINT
 *        tsp all ENDPOINT WORKERS TASKS COMPUTE_MS   (forks the master and the workers) */
#include <sys/select.h>
#include <sys/wait.h>

#include "sock_check.h"

enum { MAX_WORKERS = 8 };

struct task {
    int32_t number, bound;
    double compute_ms;
    int32_t prefix[8];
};

struct result {
    int32_t number, tour_cost;
};

/* The cost of the best tour below subproblem `n`: a fixed pseudo-random number. */
static int32_t explore(const struct task *t) {
    sc_compute(t->compute_ms * (1 + t->number % 3));
    return 1000 + (t->number * 7919) % 500;
}

static void master(const char *endpoint, int workers, int tasks, double ms) {
    sc_start();
    int lfd = sc_listen(endpoint);
    int fds[MAX_WORKERS];
    for (int i = 0; i < workers; i++) fds[i] = sc_accept(lfd);
    close(lfd);
    int next = 0, bound = 1 << 30, stopped = 0;
    while (stopped < workers) {
        fd_set set;
        FD_ZERO(&set);
        int maxfd = 0;
        for (int i = 0; i < workers; i++) {
            if (fds[i] < 0) continue;
            FD_SET(fds[i], &set);
            if (fds[i] > maxfd) maxfd = fds[i];
        }
        if (select(maxfd + 1, &set, NULL, NULL, NULL) < 0) sc_die("select");
        for (int i = 0; i < workers; i++) {
            if (fds[i] < 0 || !FD_ISSET(fds[i], &set)) continue;
            struct result r;
            sc_recv(fds[i], &r, sizeof r);
            if (r.number >= 0 && r.tour_cost < bound) bound = r.tour_cost;
            struct task t = {next < tasks ? next : -1, bound, ms, {0}};
            for (int k = 0; k < 8; k++) t.prefix[k] = (next + k) % 9;
            sc_send(fds[i], &t, sizeof t, 0);
            if (next < tasks) {
                next++;
            } else {
                close(fds[i]);
                fds[i] = -1;
                stopped++;
            }
        }
    }
    printf("best tour %d\n", bound);
    sc_finish("master");
}

static void worker(const char *endpoint) {
    sc_start();
    int fd = sc_connect(endpoint);
    struct result r = {-1, 0};
    for (;;) {
        sc_send(fd, &r, sizeof r, 0);
        struct task t;
        sc_recv(fd, &t, sizeof t);
        if (t.number < 0) break;
        r.number = t.number;
        r.tour_cost = explore(&t);
    }
    close(fd);
    sc_finish("worker");
}

int main(int argc, char **argv) {
    if (argc == 6 && strcmp(argv[1], "master") == 0) {
        master(argv[2], atoi(argv[3]), atoi(argv[4]), atof(argv[5]));
    } else if (argc == 3 && strcmp(argv[1], "worker") == 0) {
        worker(argv[2]);
    } else if (argc == 6 && strcmp(argv[1], "all") == 0) {
        int workers = atoi(argv[3]);
        if (fork() == 0) {
            master(argv[2], workers, atoi(argv[4]), atof(argv[5]));
            return 0;
        }
        for (int i = 0; i < workers; i++) {
            if (fork() == 0) {
                worker(argv[2]);
                return 0;
            }
        }
        int status, failed = 0;
        while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status);
        return failed;
    } else {
        fprintf(stderr, "usage: tsp master ENDPOINT WORKERS TASKS COMPUTE_MS | tsp worker "
                        "ENDPOINT | tsp all ENDPOINT WORKERS TASKS COMPUTE_MS\n");
        return 2;
    }
    return 0;
}
