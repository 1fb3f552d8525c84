/* Large messages, which MPI libraries send by rendezvous (the send waits for its receive).
 * Ranks 0 and 1 exchange the messages; other ranks only join the probes' barriers.
 *
 * Phase 1, ITERS times: rank 0 computes COMPUTE_MS and sends 1 MiB with MPI_Send to rank 1,
 * which computes twice as long before its MPI_Recv.
 * Phase 2, ITERS times: rank 1 posts an MPI_Irecv of 1 MiB, computes COMPUTE_MS and waits;
 * rank 0 sends it with MPI_Isend, computes COMPUTE_MS / 2 and waits; then rank 0 sends 4
 * bytes with MPI_Ssend, which waits for its receive too, to rank 1's MPI_Recv.
 * Probes, one per PROBE argument, each between two barriers:
 * - `eager:N`: rank 0 sends N bytes with MPI_Isend and tests it for up to 1 s while rank 1 sits
 *   in a barrier without the receive posted (its library runs, so an eager message is
 *   delivered); a send that did not complete waited for its receive. Rank 0 prints
 *   `LBF-PROBE bytes=N waited=0|1`.
 * - `answer:N`: when a receive posted before a pause is answered. Rank 1 posts an MPI_Irecv
 *   of N bytes, sleeps 50 ms (no MPI call) and waits for it, while rank 0 sends N bytes with
 *   MPI_Send; rank 0 prints `LBF-PROBE answer_bytes=N send_ms=T`, how long its send took
 *   (about 50 if the receive is answered at the wait, about 0 if at the post or eagerly).
 * - `sender:N`: whether the data of a nonblocking send moves while its sender is away. Rank 0
 *   sends N bytes with MPI_Isend, sleeps 50 ms (no MPI call) and waits; rank 1 prints
 *   `LBF-PROBE sender_bytes=N recv_ms=T`, how long its blocking MPI_Recv took (about 50 if
 *   the data waits for the sender's MPI_Wait).
 * Usage: rendezvous ITERS COMPUTE_MS [PROBE...] */
#include "lbf_check.h"

#define BIG (1 << 20)

/* Milliseconds since `start` (CLOCK_MONOTONIC nanoseconds). */
static long long ms_since(int64_t start) {
    return (long long)(work_clock_ns(CLOCK_MONOTONIC) - start) / 1000000;
}

/* 50 ms of sleep, with no MPI call. */
static void pause_50ms(void) {
    struct timespec pause = {0, 50000000};
    nanosleep(&pause, NULL);
}

/* The `eager:N` probe; rank 0 prints whether the send waited for the receive. */
static void eager_probe(int rank, char *buf, int bytes) {
    if (rank == 0) {
        MPI_Request r;
        int done = 0;
        MPI_Isend(buf, bytes, MPI_BYTE, 1, 9, MPI_COMM_WORLD, &r);
        lbf_count_send(bytes);
        int64_t until = work_clock_ns(CLOCK_MONOTONIC) + 1000000000;
        while (!done && work_clock_ns(CLOCK_MONOTONIC) < until)
            MPI_Test(&r, &done, MPI_STATUS_IGNORE);
        MPI_Barrier(MPI_COMM_WORLD);
        if (!done) MPI_Wait(&r, MPI_STATUS_IGNORE);
        printf("LBF-PROBE bytes=%d waited=%d\n", bytes, !done);
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 1) {
            MPI_Recv(buf, bytes, MPI_BYTE, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            lbf_count_recv(bytes);
        }
    }
    lbf_colls++;
}

/* The `answer:N` probe. */
static void answer_probe(int rank, char *buf, int bytes) {
    if (rank == 0) {
        int64_t start = work_clock_ns(CLOCK_MONOTONIC);
        MPI_Send(buf, bytes, MPI_BYTE, 1, 10, MPI_COMM_WORLD);
        lbf_count_send(bytes);
        printf("LBF-PROBE answer_bytes=%d send_ms=%lld\n", bytes, ms_since(start));
    } else if (rank == 1) {
        MPI_Request r;
        MPI_Irecv(buf, bytes, MPI_BYTE, 0, 10, MPI_COMM_WORLD, &r);
        pause_50ms();
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        lbf_count_recv(bytes);
    }
}

/* The `sender:N` probe. */
static void sender_probe(int rank, char *buf, int bytes) {
    if (rank == 0) {
        MPI_Request r;
        MPI_Isend(buf, bytes, MPI_BYTE, 1, 11, MPI_COMM_WORLD, &r);
        lbf_count_send(bytes);
        pause_50ms();
        MPI_Wait(&r, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
        int64_t start = work_clock_ns(CLOCK_MONOTONIC);
        MPI_Recv(buf, bytes, MPI_BYTE, 0, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        lbf_count_recv(bytes);
        printf("LBF-PROBE sender_bytes=%d recv_ms=%lld\n", bytes, ms_since(start));
    }
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
        int bytes;
        MPI_Barrier(MPI_COMM_WORLD);
        lbf_colls++;
        if (sscanf(argv[a], "eager:%d", &bytes) == 1) {
            eager_probe(rank, buf, bytes);
        } else if (sscanf(argv[a], "answer:%d", &bytes) == 1) {
            answer_probe(rank, buf, bytes);
        } else if (sscanf(argv[a], "sender:%d", &bytes) == 1) {
            sender_probe(rank, buf, bytes);
        } else {
            fprintf(stderr, "unknown probe %s\n", argv[a]);
            return 1;
        }
        fflush(stdout);
    }
    free(buf);
    return lbf_finish();
}
