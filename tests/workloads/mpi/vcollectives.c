/* Collectives with a count per member: every iteration runs an MPI_Alltoallv with uneven
 * counts (the largest exchange: rank r sends (1 + r + 2 d) * 2048 ints to rank d), then
 * MPI_Allgatherv, MPI_Gatherv, MPI_Scatterv, MPI_Reduce_scatter and
 * MPI_Reduce_scatter_block, with a compute step before each (rank r computes
 * (1 + r) * COMPUTE_MS / 4). Besides its LBF-CHECK line each rank prints
 * `LBF-COLL rank=R coll_bytes=B`: the payload it stated over all its collectives, as lbf
 * counts it (what it sends to the others in an all-to-all, its own contribution to a gather,
 * what it receives in a scatter, the whole vector of a reduce-scatter).
 * Usage: vcollectives ITERS COMPUTE_MS */
#include "lbf_check.h"

#define UNIT 2048

int main(int argc, char **argv) {
    lbf_init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double ms = lbf_compute_ms * (1 + rank) / 4;
    int *scounts = calloc(size, sizeof(int)), *sdispls = calloc(size, sizeof(int));
    int *rcounts = calloc(size, sizeof(int)), *rdispls = calloc(size, sizeof(int));
    int stotal = 0, rtotal = 0;
    long long alltoallv_bytes = 0;
    for (int d = 0; d < size; d++) {
        scounts[d] = (1 + rank + 2 * d) * UNIT;
        rcounts[d] = (1 + d + 2 * rank) * UNIT;
        sdispls[d] = stotal;
        rdispls[d] = rtotal;
        stotal += scounts[d];
        rtotal += rcounts[d];
        if (d != rank) alltoallv_bytes += (long long)scounts[d] * sizeof(int);
    }
    int *sbuf = calloc(stotal, sizeof(int)), *rbuf = calloc(rtotal, sizeof(int));
    /* Allgatherv and Gatherv: rank i contributes (i + 1) * 100 doubles. */
    int *vcounts = calloc(size, sizeof(int)), *vdispls = calloc(size, sizeof(int));
    int vtotal = 0;
    for (int i = 0; i < size; i++) {
        vcounts[i] = (i + 1) * 100;
        vdispls[i] = vtotal;
        vtotal += vcounts[i];
    }
    double *mine = calloc(vcounts[rank], sizeof(double)), *all = calloc(vtotal, sizeof(double));
    /* Reduce_scatter: rank i gets (i + 1) * 20 doubles of the sum. */
    int *rs_counts = calloc(size, sizeof(int)), rs_total = 0;
    for (int i = 0; i < size; i++) {
        rs_counts[i] = (i + 1) * 20;
        rs_total += rs_counts[i];
    }
    double *rs_in = calloc(rs_total, sizeof(double)), *rs_out = calloc(rs_total, sizeof(double));
    int *blk_in = calloc(16 * size, sizeof(int)), blk_out[16];
    long long coll_bytes = 0;
    for (int i = 0; i < lbf_iters; i++) {
        lbf_compute(ms);
        MPI_Alltoallv(sbuf, scounts, sdispls, MPI_INT, rbuf, rcounts, rdispls, MPI_INT,
                      MPI_COMM_WORLD);
        coll_bytes += alltoallv_bytes;
        lbf_compute(ms);
        MPI_Allgatherv(mine, vcounts[rank], MPI_DOUBLE, all, vcounts, vdispls, MPI_DOUBLE,
                       MPI_COMM_WORLD);
        coll_bytes += (long long)vcounts[rank] * sizeof(double);
        lbf_compute(ms);
        MPI_Gatherv(mine, vcounts[rank], MPI_DOUBLE, all, vcounts, vdispls, MPI_DOUBLE, 0,
                    MPI_COMM_WORLD);
        coll_bytes += (long long)vcounts[rank] * sizeof(double);
        lbf_compute(ms);
        MPI_Scatterv(all, vcounts, vdispls, MPI_DOUBLE, mine, vcounts[rank], MPI_DOUBLE,
                     size - 1, MPI_COMM_WORLD);
        coll_bytes += (long long)vcounts[rank] * sizeof(double);
        lbf_compute(ms);
        MPI_Reduce_scatter(rs_in, rs_out, rs_counts, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        coll_bytes += (long long)rs_total * sizeof(double);
        lbf_compute(ms);
        MPI_Reduce_scatter_block(blk_in, blk_out, 16, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        coll_bytes += 16LL * sizeof(int) * size;
        lbf_colls += 6;
    }
    printf("LBF-COLL rank=%d coll_bytes=%lld\n", rank, coll_bytes);
    free(scounts); free(sdispls); free(rcounts); free(rdispls); free(sbuf); free(rbuf);
    free(vcounts); free(vdispls); free(mine); free(all); free(rs_counts); free(rs_in);
    free(rs_out); free(blk_in);
    return lbf_finish();
}
