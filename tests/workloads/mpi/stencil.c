/* A 1-D stencil on a periodic ring with uneven subdomains: of N ranks, rank r owns N + r + 1
 * shares of the grid, so each step it computes (N + r + 1) * COMPUTE_MS between posting its
 * halo exchange (MPI_Irecv from both neighbours, MPI_Isend of 4096 doubles, 32 KiB, to both)
 * and completing it with MPI_Waitall. The slowest rank sets every step's pace: a placement
 * runs fast when it gives the large subdomains the fast cores. The shares differ by less than
 * a factor of two, so on hosts of different speeds which rank is slowest, and so the pace,
 * changes with the placement (with 4 ranks, 5 to 8 shares).
 * Usage: stencil ITERS COMPUTE_MS */
#include "lbf_check.h"

#define HALO 4096

int main(int argc, char **argv) {
    lbf_init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    /* Neighbour 0 is the left one, 1 the right one; what goes to neighbour k carries tag k,
     * so what comes from neighbour k carries tag 1 - k. */
    int peer[2] = {(rank + size - 1) % size, (rank + 1) % size};
    static double out[2][HALO], in[2][HALO];
    for (int step = 0; step < lbf_iters; step++) {
        MPI_Request req[4];
        for (int k = 0; k < 2; k++)
            MPI_Irecv(in[k], HALO, MPI_DOUBLE, peer[k], 1 - k, MPI_COMM_WORLD, &req[k]);
        for (int k = 0; k < 2; k++) {
            MPI_Isend(out[k], HALO, MPI_DOUBLE, peer[k], k, MPI_COMM_WORLD, &req[2 + k]);
            lbf_count_send(sizeof out[k]);
        }
        lbf_compute(lbf_compute_ms * (size + rank + 1));
        MPI_Waitall(4, req, MPI_STATUSES_IGNORE);
        for (int k = 0; k < 2; k++) lbf_count_recv(sizeof in[k]);
    }
    return lbf_finish();
}
