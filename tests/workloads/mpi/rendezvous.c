/* Large messages, which MPI libraries send by rendezvous (the send waits for its receive).
 * Ranks 0 and 1 only; other ranks just finish.
 *
 * Phase 1, ITERS times: rank 0 computes COMPUTE_MS and sends 1 MiB with MPI_Send to rank 1,
 * which computes twice as long before its MPI_Recv.
 * Phase 2, ITERS times: rank 1 posts an MPI_Irecv of 1 MiB, computes COMPUTE_MS and waits;
 * rank 0 sends it with MPI_Isend, computes COMPUTE_MS / 2 and waits; then rank 0 sends 4
 * bytes with MPI_Ssend, which waits for its receive too, to rank 1's MPI_Recv.
 * Probe phase, once per PROBE_BYTES argument: rank 0 sends that many bytes with MPI_Isend and
 * tests it for up to 1 s while rank 1 sits in a barrier without the receive posted (its
 * library runs, so an eager message is delivered); a send that did not complete waited for
 * its receive. Rank 0 prints `LBF-PROBE bytes=N waited=0|1`, then both meet in the barrier
 * and rank 1 receives.
 * Usage: rendezvous ITERS COMPUTE_MS [PROBE_BYTES...] */
#include "lbf_check.h"

#define BIG (1 << 20)

/* Rank 0's probe of one size: whether the send waited for the receive. */
static int probe(char *buf, int bytes) {
    MPI_Request r;
    int done = 0;
    MPI_Isend(buf, bytes, MPI_BYTE, 1, 9, MPI_COMM_WORLD, &r);
    lbf_count_send(bytes);
    int64_t until = work_clock_ns(CLOCK_MONOTONIC) + 1000000000;
    while (!done && work_clock_ns(CLOCK_MONOTONIC) < until) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);
    lbf_colls++;
    if (!done) MPI_Wait(&r, MPI_STATUS_IGNORE);
    return !done;
}

int main(int argc, char **argv) {
    lbf_init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char *buf = calloc(BIG, 1);
    for (int i = 0; i < lbf_iters && rank < 2; i++) {
        if (rank == 0) {
            lbf_compute(lbf_compute_ms);
            MPI_Send(buf, BIG, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            lbf_count_send(BIG);
        } else {
            lbf_compute(2 * lbf_compute_ms);
            MPI_Recv(buf, BIG, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            lbf_count_recv(BIG);
        }
    }
    for (int i = 0; i < lbf_iters && rank < 2; i++) {
        MPI_Request r;
        int one = 1;
        if (rank == 0) {
            MPI_Isend(buf, BIG, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &r);
            lbf_count_send(BIG);
            lbf_compute(lbf_compute_ms / 2);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
            MPI_Ssend(&one, 1, MPI_INT, 1, 3, MPI_COMM_WORLD);
            lbf_count_send(sizeof one);
        } else {
            MPI_Irecv(buf, BIG, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &r);
            lbf_compute(lbf_compute_ms);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
            lbf_count_recv(BIG);
            MPI_Recv(&one, 1, MPI_INT, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            lbf_count_recv(sizeof one);
        }
    }
    for (int a = 3; a < argc; a++) {
        int bytes = atoi(argv[a]);
        if (rank == 0) {
            int waited = probe(buf, bytes);
            printf("LBF-PROBE bytes=%d waited=%d\n", bytes, waited);
        } else {
            MPI_Barrier(MPI_COMM_WORLD);
            lbf_colls++;
            if (rank == 1) {
                MPI_Recv(buf, bytes, MPI_BYTE, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                lbf_count_recv(bytes);
            }
        }
    }
    free(buf);
    return lbf_finish();
}
