/* Ping-pong between ranks 0 and 1 with several message sizes, one of them above 64 KiB so both
 * the eager and the rendezvous protocols run. Other ranks only compute. Blocking Send/Recv.
 * Usage: pingpong ITERS COMPUTE_MS */
#include "lbf_check.h"
#include <string.h>

int main(int argc, char **argv) {
    static const int sizes[] = {8, 1024, 16384, 200000};
    lbf_init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char *buf = calloc(200000, 1);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s];
        for (int i = 0; i < lbf_iters; i++) {
            lbf_compute(lbf_compute_ms);
            if (rank == 0) {
                MPI_Send(buf, n, MPI_BYTE, 1, s, MPI_COMM_WORLD);
                lbf_count_send(n);
                MPI_Recv(buf, n, MPI_BYTE, 1, s, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                lbf_count_recv(n);
            } else if (rank == 1) {
                MPI_Recv(buf, n, MPI_BYTE, 0, s, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                lbf_count_recv(n);
                MPI_Send(buf, n, MPI_BYTE, 0, s, MPI_COMM_WORLD);
                lbf_count_send(n);
            }
        }
    }
    free(buf);
    return lbf_finish();
}
