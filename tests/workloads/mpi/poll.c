/* Progress loops, as real codes write them: every rank polls for seconds on its own core.
 *
 * ITERS rounds between ranks 0 and 1 (other ranks only join the barriers). In each round both
 * ranks post an MPI_Irecv from the other, then poll it with MPI_Test until COMPUTE_MS of wall
 * time have passed; then each sends its 8-byte message with MPI_Send and keeps polling until
 * the other's message is in. Then the same with MPI_Iprobe followed by MPI_Recv, then with
 * MPI_Testany, MPI_Testall and MPI_Testsome over a pair of requests. Each rank prints
 * `LBF-PROBE rank=R polls=N unsuccessful=U`: its poll calls and how many of them found
 * nothing (what the kernel side is to coalesce).
 * Usage: poll ITERS COMPUTE_MS */
#include "lbf_check.h"

static long long polls, unsuccessful;

/* Counts one poll call and whether it found nothing. */
static int counted(int flag) {
    polls++;
    if (!flag) unsuccessful++;
    return flag;
}

/* Polls until the wall clock passes `until`, then sends 8 bytes to `peer` once, with `poll`
 * deciding when the receive is done. */
#define POLL_UNTIL_DONE(poll)                                                        \
    do {                                                                             \
        int sent = 0, done = 0;                                                      \
        while (!done || !sent) {                                                     \
            if (!done) done = counted(poll);                                         \
            if (!sent && work_clock_ns(CLOCK_MONOTONIC) >= until) {                  \
                MPI_Send(&out, 1, MPI_LONG_LONG, peer, tag, MPI_COMM_WORLD);         \
                lbf_count_send(8);                                                   \
                sent = 1;                                                            \
            }                                                                        \
        }                                                                            \
    } while (0)

int main(int argc, char **argv) {
    lbf_init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int64_t poll_ns = (int64_t)(lbf_compute_ms * 1e6);
    long long out = rank, in[2];
    for (int it = 0; it < lbf_iters; it++) {
        MPI_Barrier(MPI_COMM_WORLD);
        lbf_colls++;
        if (rank > 1) continue;
        int peer = 1 - rank, tag = it, flag;
        int64_t until = work_clock_ns(CLOCK_MONOTONIC) + poll_ns;
        MPI_Request req[2];
        MPI_Status st;

        /* MPI_Test on one receive. */
        MPI_Irecv(&in[0], 1, MPI_LONG_LONG, peer, tag, MPI_COMM_WORLD, &req[0]);
        POLL_UNTIL_DONE((MPI_Test(&req[0], &flag, &st), flag));
        lbf_count_recv(8);

        /* MPI_Iprobe, then the receive. */
        until = work_clock_ns(CLOCK_MONOTONIC) + poll_ns / 4;
        tag += 1000;
        {
            int sent = 0, found = 0;
            while (!found || !sent) {
                if (!found) found = counted((MPI_Iprobe(peer, tag, MPI_COMM_WORLD, &flag, &st), flag));
                if (!sent && work_clock_ns(CLOCK_MONOTONIC) >= until) {
                    MPI_Send(&out, 1, MPI_LONG_LONG, peer, tag, MPI_COMM_WORLD);
                    lbf_count_send(8);
                    sent = 1;
                }
            }
        }
        MPI_Recv(&in[0], 1, MPI_LONG_LONG, peer, tag, MPI_COMM_WORLD, &st);
        lbf_count_recv(8);

        /* MPI_Testany, MPI_Testall and MPI_Testsome on two receives from the peer, of which
         * the second is answered only after the first. */
        for (int kind = 0; kind < 3; kind++) {
            tag += 1000;
            MPI_Irecv(&in[0], 1, MPI_LONG_LONG, peer, tag, MPI_COMM_WORLD, &req[0]);
            MPI_Irecv(&in[1], 1, MPI_LONG_LONG, peer, tag + 1, MPI_COMM_WORLD, &req[1]);
            until = work_clock_ns(CLOCK_MONOTONIC) + poll_ns / 4;
            int left = 2, sent = 0;
            while (left > 0 || sent < 2) {
                if (left > 0) {
                    int index, outcount, indices[2];
                    if (kind == 0) {
                        MPI_Testany(2, req, &index, &flag, MPI_STATUS_IGNORE);
                        if (counted(flag)) left--;
                    } else if (kind == 1) {
                        MPI_Testall(2, req, &flag, MPI_STATUSES_IGNORE);
                        if (counted(flag)) left = 0;
                    } else {
                        MPI_Testsome(2, req, &outcount, indices, MPI_STATUSES_IGNORE);
                        if (counted(outcount != 0 && outcount != MPI_UNDEFINED))
                            left -= outcount;
                    }
                }
                if (sent < 2 && work_clock_ns(CLOCK_MONOTONIC) >= until) {
                    MPI_Send(&out, 1, MPI_LONG_LONG, peer, tag + sent, MPI_COMM_WORLD);
                    lbf_count_send(8);
                    sent++;
                }
            }
            lbf_count_recv(8);
            lbf_count_recv(8);
        }
    }
    printf("LBF-PROBE rank=%d polls=%lld unsuccessful=%lld\n", rank, polls, unsuccessful);
    return lbf_finish();
}
