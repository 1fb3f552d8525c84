/* A PVM 3 master/worker: the master spawns WORKERS copies of this program, hands out
 * 4*WORKERS*ITERS tasks (one int each) with pvm_send, collects results with pvm_recv from any
 * worker (sender from pvm_bufinfo) and sends the next task or a stop; workers compute 1-3 x
 * COMPUTE_MS per task and answer with 1-4 doubles. With ROUTE=direct, messages go task to
 * task (PvmRouteDirect) instead of through pvmd (any other ROUTE: through pvmd). With HOST,
 * the workers are spawned on that host of the virtual machine (PvmTaskHost), else where PVM
 * chooses. Needs a running pvmd whose hostfile's `ep=` lists this program's directory.
 *
 * Every task prints an LBF-CHECK line (the workers' through the master, pvm_catchout): pid, tid, role, sends, send_bytes (packed payload),
 * recvs, recv_bytes, cpu_ns (CLOCK_PROCESS_CPUTIME_ID at the end), work_ns, wall_ns.
 *
 * Usage: master_worker WORKERS ITERS COMPUTE_MS [ROUTE [HOST]] */
#include <stdint.h>
#include <stdio.h> /* before pvm3.h, which declares pvm_catchout(FILE *) */
#include <pvm3.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../work.h"

enum { TAG_TASK = 1, TAG_STOP = 2, TAG_RESULT = 3, MAX_WORKERS = 16 };

static long long sends, send_bytes, recvs, recv_bytes;
static int64_t work_ns, wall_start;

/* Burns `ms` milliseconds of this thread's CPU time (see ../work.h). */
/* Out of line, under its own name, so that `lbf-trace --procedure compute` finds it. */
__attribute__((noinline, noclone)) static void compute(double ms) { work_ns += work_burn(ms); }

/* Receives a message (tag -1: any) from `from`; returns its tag, sets *sender, counts it. */
static int receive(int from, int *sender) {
    int buf = pvm_recv(from, -1);
    int bytes, tag;
    pvm_bufinfo(buf, &bytes, &tag, sender);
    recvs++;
    recv_bytes += bytes;
    return tag;
}

static void send_ints(int to, int tag, int value) {
    pvm_initsend(PvmDataRaw);
    pvm_pkint(&value, 1, 1);
    pvm_send(to, tag);
    sends++;
    send_bytes += sizeof(int);
}

/* Leaves PVM, then prints this task's LBF-CHECK line: the CPU time includes pvm_exit
 * (which waits for the output of children). */
static void finish(const char *role) {
    int tid = pvm_mytid();
    pvm_exit();
    int64_t cpu = work_clock_ns(CLOCK_PROCESS_CPUTIME_ID), wall = work_clock_ns(CLOCK_MONOTONIC) - wall_start;
    printf("LBF-CHECK pid=%d tid=%d role=%s sends=%lld send_bytes=%lld recvs=%lld "
           "recv_bytes=%lld cpu_ns=%lld work_ns=%lld wall_ns=%lld\n",
           (int)getpid(), tid, role, sends, send_bytes, recvs, recv_bytes,
           (long long)cpu, (long long)work_ns, (long long)wall);
    fflush(stdout);
}

int main(int argc, char **argv) {
    wall_start = work_clock_ns(CLOCK_MONOTONIC);
    int me = pvm_mytid();
    if (me < 0) {
        fprintf(stderr, "no pvmd: start one first\n");
        return 2;
    }
    if (argc > 4 && strcmp(argv[4], "direct") == 0) pvm_setopt(PvmRoute, PvmRouteDirect);
    int parent = pvm_parent();
    if (parent == PvmNoParent) {
        if (argc < 4) {
            fprintf(stderr, "usage: master_worker WORKERS ITERS COMPUTE_MS [ROUTE [HOST]]\n");
            pvm_exit();
            return 2;
        }
        int workers = atoi(argv[1]), iters = atoi(argv[2]);
        if (workers > MAX_WORKERS) workers = MAX_WORKERS;
        int tids[MAX_WORKERS];
        pvm_catchout(stdout); /* the workers' LBF-CHECK lines come out here */
        char *wargv[] = {argv[1], argv[2], argv[3], argc > 4 ? argv[4] : NULL, NULL};
        char *host = argc > 5 ? argv[5] : "";
        int where = argc > 5 ? PvmTaskHost : PvmTaskDefault;
        if (pvm_spawn(argv[0], wargv, where, host, workers, tids) != workers) {
            fprintf(stderr, "pvm_spawn failed\n");
            pvm_exit();
            return 2;
        }
        int tasks = 4 * workers * iters, next = 0, done = 0;
        for (int w = 0; w < workers; w++) {
            send_ints(tids[w], next < tasks ? TAG_TASK : TAG_STOP, next);
            if (next < tasks) next++;
        }
        while (done < next) {
            int sender;
            receive(-1, &sender);
            double r[4];
            pvm_upkdouble(r, 1, 1);
            done++;
            send_ints(sender, next < tasks ? TAG_TASK : TAG_STOP, next);
            if (next < tasks) next++;
        }
        finish("master");
    } else {
        double ms = atof(argv[3]);
        for (;;) {
            int sender, task;
            int tag = receive(parent, &sender);
            pvm_upkint(&task, 1, 1);
            if (tag == TAG_STOP) break;
            compute(ms * (1 + task % 3));
            double r[4] = {task, me, 0, 0};
            int n = 1 + task % 4;
            pvm_initsend(PvmDataRaw);
            pvm_pkdouble(r, n, 1);
            pvm_send(parent, TAG_RESULT);
            sends++;
            send_bytes += n * sizeof(double);
        }
        finish("worker");
    }
    return 0;
}
