/* Per-call cost of lbf's MPI probes (`cargo xtask bench-probe`): calls MPI_Comm_rank, a cheap
 * function whose first instruction (`push`) the kernel emulates when it hits a uprobe, N times
 * in a loop (N = argv[1], default 1000000) and prints the loop's wall time:
 *   LBF_LOOP calls=N ns=T
 * Every rank runs the loop; run it with one rank. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    int rank, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long long start = now_ns();
    for (long i = 0; i < n; i++) {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        sum += rank;
    }
    long long elapsed = now_ns() - start;
    printf("LBF_LOOP calls=%ld ns=%lld sum=%d\n", n, elapsed, sum);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
