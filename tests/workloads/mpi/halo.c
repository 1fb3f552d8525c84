/* Nonblocking 1-D halo exchange on a periodic ring: each iteration posts Irecv from both
 * neighbours and Isend to both, computes, then completes all four with MPI_Waitall. A second
 * phase completes the receives one at a time with MPI_Waitany (in whatever order they
 * finish) and the sends with MPI_Wait; a third polls one MPI_Irecv with MPI_Test between compute
 * slices. Halo rows are 4096 doubles (32 KiB) left and 100 doubles right.
 * Usage: halo ITERS COMPUTE_MS */
#include "lbf_check.h"

#define BIG 4096
#define SMALL 100

int main(int argc, char **argv) {
    lbf_init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    static double to_left[BIG], to_right[SMALL], from_left[SMALL], from_right[BIG];
    MPI_Request req[4];
    MPI_Status st[4];
    for (int phase = 0; phase < 2; phase++) {
        for (int i = 0; i < lbf_iters; i++) {
            MPI_Irecv(from_left, SMALL, MPI_DOUBLE, left, 1, MPI_COMM_WORLD, &req[0]);
            MPI_Irecv(from_right, BIG, MPI_DOUBLE, right, 2, MPI_COMM_WORLD, &req[1]);
            MPI_Isend(to_right, SMALL, MPI_DOUBLE, right, 1, MPI_COMM_WORLD, &req[2]);
            MPI_Isend(to_left, BIG, MPI_DOUBLE, left, 2, MPI_COMM_WORLD, &req[3]);
            lbf_count_send((SMALL + BIG) * sizeof(double));
            lbf_sends++;
            lbf_compute(lbf_compute_ms);
            if (phase == 0) {
                MPI_Waitall(4, req, st);
            } else {
                for (int k = 0; k < 2; k++) {
                    int idx;
                    MPI_Waitany(2, req, &idx, MPI_STATUS_IGNORE);
                    lbf_compute(lbf_compute_ms / 4);
                }
                MPI_Wait(&req[2], MPI_STATUS_IGNORE);
                MPI_Wait(&req[3], MPI_STATUS_IGNORE);
            }
            lbf_count_recv((SMALL + BIG) * sizeof(double));
            lbf_recvs++;
        }
    }
    for (int i = 0; i < lbf_iters; i++) {
        MPI_Request r;
        int flag = 0;
        MPI_Irecv(from_left, SMALL, MPI_DOUBLE, left, 3, MPI_COMM_WORLD, &r);
        MPI_Send(to_right, SMALL, MPI_DOUBLE, right, 3, MPI_COMM_WORLD);
        lbf_count_send(SMALL * sizeof(double));
        while (!flag) {
            lbf_compute(lbf_compute_ms / 8);
            MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
        }
        lbf_count_recv(SMALL * sizeof(double));
    }
    return lbf_finish();
}
