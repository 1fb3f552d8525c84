/* Shared helpers of lbf's MPI test workloads: argument parsing, a CPU-exact busy loop and the
 * per-rank LBF-CHECK line that integration tests compare a capture against.
 *
 * Every workload takes `ITERS COMPUTE_MS`: the number of iterations and the CPU milliseconds
 * each compute step burns. The counters below are bumped next to every MPI call so the program
 * reports what it really did: point-to-point messages and bytes (a Sendrecv counts as one send
 * and one receive) and collective calls.
 *
 * LBF-CHECK fields: rank, sends, send_bytes, recvs, recv_bytes, colls; cpu_ns is the main
 * thread's CPU time from process start to after MPI_Finalize (CLOCK_THREAD_CPUTIME_ID), work_ns
 * the CPU spent in the busy loop, wall_ns the CLOCK_MONOTONIC time from before MPI_Init to
 * after MPI_Finalize. */
#ifndef LBF_CHECK_H
#define LBF_CHECK_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../work.h"

static long long lbf_sends, lbf_send_bytes, lbf_recvs, lbf_recv_bytes, lbf_colls;
static int64_t lbf_work_ns, lbf_wall_start;
static int lbf_iters = 10;
static double lbf_compute_ms = 1.0;

/* Burns `ms` milliseconds of this thread's CPU time (see ../work.h). */
static void lbf_compute(double ms) { lbf_work_ns += work_burn(ms); }

/* Parses `ITERS COMPUTE_MS` (both optional) and initialises MPI. */
static void lbf_init(int *argc, char ***argv) {
    lbf_wall_start = work_clock_ns(CLOCK_MONOTONIC);
    if (*argc > 1) lbf_iters = atoi((*argv)[1]);
    if (*argc > 2) lbf_compute_ms = atof((*argv)[2]);
    MPI_Init(argc, argv);
}

static inline void lbf_count_send(long long bytes) { lbf_sends++; lbf_send_bytes += bytes; }
static inline void lbf_count_recv(long long bytes) { lbf_recvs++; lbf_recv_bytes += bytes; }


/* Finalizes MPI and prints this rank's LBF-CHECK line. */
static int lbf_finish(void) {
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Finalize();
    int64_t wall = work_clock_ns(CLOCK_MONOTONIC) - lbf_wall_start;
    int64_t cpu = work_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    printf("LBF-CHECK rank=%d sends=%lld send_bytes=%lld recvs=%lld recv_bytes=%lld colls=%lld "
           "cpu_ns=%lld work_ns=%lld wall_ns=%lld\n",
           rank, lbf_sends, lbf_send_bytes, lbf_recvs, lbf_recv_bytes, lbf_colls,
           (long long)cpu, (long long)lbf_work_ns, (long long)wall);
    fflush(stdout);
    return 0;
}

#endif
