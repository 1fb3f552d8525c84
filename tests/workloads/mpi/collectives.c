/* Every iteration runs Barrier, Bcast, Reduce, Allreduce, Gather, Scatter, Allgather and
 * Alltoall on MPI_COMM_WORLD with a compute step before each (rank r computes (1 + r) *
 * COMPUTE_MS / 4 so ranks arrive unevenly). Then the world is split into even and odd ranks
 * (MPI_Comm_split) and duplicated (MPI_Comm_dup); each iteration does an Allreduce on the split
 * communicator and a Barrier on the duplicate. Comm_split and Comm_dup count as collectives.
 * Usage: collectives ITERS COMPUTE_MS */
#include "lbf_check.h"

#define N 256

int main(int argc, char **argv) {
    lbf_init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double ms = lbf_compute_ms * (1 + rank) / 4;
    double *a = calloc(N * size, sizeof(double)), *b = calloc(N * size, sizeof(double));
    for (int i = 0; i < lbf_iters; i++) {
        lbf_compute(ms);
        MPI_Barrier(MPI_COMM_WORLD);
        lbf_compute(ms);
        MPI_Bcast(a, N, MPI_DOUBLE, i % size, MPI_COMM_WORLD);
        lbf_compute(ms);
        MPI_Reduce(a, b, N, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        lbf_compute(ms);
        MPI_Allreduce(a, b, N, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        lbf_compute(ms);
        MPI_Gather(a, N, MPI_DOUBLE, b, N, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        lbf_compute(ms);
        MPI_Scatter(a, N, MPI_DOUBLE, b, N, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        lbf_compute(ms);
        MPI_Allgather(a, N, MPI_DOUBLE, b, N, MPI_DOUBLE, MPI_COMM_WORLD);
        lbf_compute(ms);
        MPI_Alltoall(a, N, MPI_DOUBLE, b, N, MPI_DOUBLE, MPI_COMM_WORLD);
        lbf_colls += 8;
    }
    MPI_Comm half, dup;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    lbf_colls += 2;
    int half_rank;
    MPI_Comm_rank(half, &half_rank);
    for (int i = 0; i < lbf_iters; i++) {
        lbf_compute(ms);
        MPI_Allreduce(a, b, N, MPI_DOUBLE, MPI_SUM, half);
        lbf_compute(ms);
        MPI_Barrier(dup);
        lbf_colls += 2;
    }
    MPI_Comm_free(&half);
    MPI_Comm_free(&dup);
    free(a);
    free(b);
    return lbf_finish();
}
