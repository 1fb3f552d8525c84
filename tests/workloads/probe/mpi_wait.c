/* lbf probe test program: rank 1 waits in MPI_Recv for a message that rank 0 sends only after
 * argv[1] seconds (default 60), so that a capture stopped meanwhile ends with rank 1 inside
 * the call. Rank 1 prints, right before the call:
 *   LBF_WAIT pid=P tid=T
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>

int main(int argc, char **argv) {
    int delay = argc > 1 ? atoi(argv[1]) : 60;
    int rank, buf = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        sleep(delay);
        MPI_Send(&buf, 1, MPI_INT, 1, 7, MPI_COMM_WORLD);
    } else if (rank == 1) {
        printf("LBF_WAIT pid=%d tid=%ld\n", getpid(), (long)syscall(SYS_gettid));
        fflush(stdout);
        MPI_Recv(&buf, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Finalize();
    return 0;
}
