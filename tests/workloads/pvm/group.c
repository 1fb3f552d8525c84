/* PVM 3 group calls: the master spawns WORKERS copies of this program; every task joins the
 * group "lbf" and meets the others at a barrier; then for ITERS rounds the master broadcasts
 * the round number to the group (pvm_bcast), each worker computes COMPUTE_MS x (1 + its
 * instance number % 2) and answers the master; a last barrier ends the run. Needs a running
 * pvmd whose hostfile's `ep=` lists this program's directory (the group server pvmgs is
 * started by PVM). Every task prints an LBF-CHECK line like master_worker's, plus colls (the
 * barriers it entered).
 *
 * Usage: group WORKERS ITERS COMPUTE_MS   (link with -lgpvm3 -lpvm3) */
#include <stdint.h>
#include <stdio.h> /* before pvm3.h, which declares pvm_catchout(FILE *) */
#include <pvm3.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "../work.h"

enum { TAG_ROUND = 1, TAG_RESULT = 2, MAX_WORKERS = 16 };
static char GROUP[] = "lbf"; /* not const: PVM 3 takes char * */

static long long sends, send_bytes, recvs, recv_bytes, colls;
static int64_t work_ns, wall_start;

/* Burns `ms` milliseconds of this thread's CPU time (see ../work.h). */
static void compute(double ms) { work_ns += work_burn(ms); }

static void barrier(int count) {
    pvm_barrier(GROUP, count);
    colls++;
}

/* Leaves PVM, then prints this task's LBF-CHECK line: the CPU time includes pvm_exit
 * (which waits for the output of children). */
static void finish(const char *role) {
    int tid = pvm_mytid();
    pvm_lvgroup(GROUP);
    pvm_exit();
    int64_t cpu = work_clock_ns(CLOCK_PROCESS_CPUTIME_ID), wall = work_clock_ns(CLOCK_MONOTONIC) - wall_start;
    printf("LBF-CHECK pid=%d tid=%d role=%s sends=%lld send_bytes=%lld recvs=%lld "
           "recv_bytes=%lld colls=%lld cpu_ns=%lld work_ns=%lld wall_ns=%lld\n",
           (int)getpid(), tid, role, sends, send_bytes, recvs, recv_bytes, colls,
           (long long)cpu, (long long)work_ns, (long long)wall);
    fflush(stdout);
}

int main(int argc, char **argv) {
    wall_start = work_clock_ns(CLOCK_MONOTONIC);
    int me = pvm_mytid();
    if (me < 0 || argc < 4) {
        fprintf(stderr, "usage: group WORKERS ITERS COMPUTE_MS (with a running pvmd)\n");
        return 2;
    }
    int workers = atoi(argv[1]), iters = atoi(argv[2]);
    double ms = atof(argv[3]);
    if (workers > MAX_WORKERS) workers = MAX_WORKERS;
    int parent = pvm_parent();
    if (parent == PvmNoParent) {
        int tids[MAX_WORKERS];
        pvm_catchout(stdout);
        pvm_joingroup(GROUP);
        if (pvm_spawn(argv[0], argv + 1, PvmTaskDefault, "", workers, tids) != workers) {
            fprintf(stderr, "pvm_spawn failed\n");
            pvm_exit();
            return 2;
        }
        barrier(workers + 1);
        for (int round = 0; round < iters; round++) {
            pvm_initsend(PvmDataRaw);
            pvm_pkint(&round, 1, 1);
            pvm_bcast(GROUP, TAG_ROUND);
            sends += workers;
            send_bytes += (long long)workers * sizeof(int);
            for (int w = 0; w < workers; w++) {
                int buf = pvm_recv(-1, TAG_RESULT), bytes, tag, from;
                pvm_bufinfo(buf, &bytes, &tag, &from);
                recvs++;
                recv_bytes += bytes;
            }
        }
        barrier(workers + 1);
        finish("master");
    } else {
        int inst = pvm_joingroup(GROUP);
        barrier(workers + 1);
        for (int round = 0; round < iters; round++) {
            int buf = pvm_recv(parent, TAG_ROUND), bytes, tag, from, r;
            pvm_bufinfo(buf, &bytes, &tag, &from);
            pvm_upkint(&r, 1, 1);
            recvs++;
            recv_bytes += bytes;
            compute(ms * (1 + inst % 2));
            double result[2] = {r, inst};
            pvm_initsend(PvmDataRaw);
            pvm_pkdouble(result, 2, 1);
            pvm_send(parent, TAG_RESULT);
            sends++;
            send_bytes += sizeof result;
        }
        barrier(workers + 1);
        finish("worker");
    }
    return 0;
}
