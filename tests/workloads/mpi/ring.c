/* A token of ints travels around the ring ITERS times with blocking Send/Recv (each rank
 * computes before forwarding), then every rank shifts a buffer of doubles to its right
 * neighbour SHIFTS times (default ITERS) with MPI_Sendrecv.
 * Usage: ring ITERS COMPUTE_MS [SHIFTS] */
#include "lbf_check.h"

int main(int argc, char **argv) {
    lbf_init(&argc, &argv);
    int shifts = argc > 3 ? atoi(argv[3]) : lbf_iters;
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int token[16] = {0};
    for (int i = 0; i < lbf_iters; i++) {
        if (rank == 0) {
            lbf_compute(lbf_compute_ms);
            MPI_Send(token, 16, MPI_INT, right, 7, MPI_COMM_WORLD);
            lbf_count_send(16 * sizeof(int));
            MPI_Recv(token, 16, MPI_INT, left, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            lbf_count_recv(16 * sizeof(int));
        } else {
            MPI_Recv(token, 16, MPI_INT, left, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            lbf_count_recv(16 * sizeof(int));
            token[0]++;
            lbf_compute(lbf_compute_ms);
            MPI_Send(token, 16, MPI_INT, right, 7, MPI_COMM_WORLD);
            lbf_count_send(16 * sizeof(int));
        }
    }
    double out[512], in[512];
    for (int i = 0; i < 512; i++) out[i] = rank + i;
    for (int i = 0; i < shifts; i++) {
        lbf_compute(lbf_compute_ms);
        MPI_Status st;
        MPI_Sendrecv(out, 512, MPI_DOUBLE, right, 9, in, 512, MPI_DOUBLE, left, 9, MPI_COMM_WORLD,
                     &st);
        lbf_count_send(512 * sizeof(double));
        lbf_count_recv(512 * sizeof(double));
    }
    return lbf_finish();
}
