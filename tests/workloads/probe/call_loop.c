/* Per-call cost of lbf's MPI probes (`cargo xtask bench-probe`): calls an MPI function N times
 * in a loop (N = argv[1], default 1000000) and prints the loop's wall time:
 *   LBF_LOOP calls=N ns=T
 * The function (argv[2]):
 * - `rank` (the default): MPI_Comm_rank, a cheap function whose first instruction (`push`) the
 *   kernel emulates when it hits a uprobe;
 * - `paced`: MPI_Comm_rank too, with a 1 ms sleep after every 64 calls, so that a reader of
 *   the records gets the CPU to read them whatever else runs;
 * - `test`: MPI_Test on a receive that nothing answers until the loop is over, as a progress
 *   loop polls: every call finds nothing;
 * - `halo`: a halo exchange with itself, 5 calls an iteration: MPI_Irecv twice, MPI_Isend
 *   twice, MPI_Waitall on the four (N counts calls, so N / 5 iterations);
 * - `proc`: lbf_hot, a function of the program itself that does almost nothing (for
 *   `lbf-trace --procedure lbf_hot`: the cost of a traced procedure's probes per call; its
 *   first instruction is a `push`, which the kernel emulates).
 * Every rank runs the loop; run it with one rank. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Out of line, and keeping a value across a call, so that it starts by saving a register. */
__attribute__((noinline)) static int lbf_leaf(int x) {
    __asm__ volatile("");
    return x + 1;
}
__attribute__((noinline)) int lbf_hot(int x) {
    int a = lbf_leaf(x);
    return a + lbf_leaf(a) + x;
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    int test = argc > 2 && strcmp(argv[2], "test") == 0;
    int paced = argc > 2 && strcmp(argv[2], "paced") == 0;
    int proc = argc > 2 && strcmp(argv[2], "proc") == 0;
    int halo = argc > 2 && strcmp(argv[2], "halo") == 0;
    int rows[4] = {0, 0, 1, 2};
    MPI_Request reqs[4];
    struct timespec pause = {0, 1000000};
    int rank, sum = 0, flag = 0, in = 0, out = 1;
    MPI_Request req;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (test) MPI_Irecv(&in, 1, MPI_INT, rank, 7, MPI_COMM_WORLD, &req);
    long long start = now_ns();
    for (long i = 0; i < n; i++) {
        if (halo) {
            if (i % 5 == 4) {
                MPI_Waitall(4, reqs, MPI_STATUSES_IGNORE);
                sum += rows[0] + rows[1];
            } else if (i % 5 < 2) {
                MPI_Irecv(&rows[i % 5], 1, MPI_INT, rank, (int)(i % 5), MPI_COMM_WORLD, &reqs[i % 5]);
            } else {
                int k = (int)(i % 5) - 2;
                MPI_Isend(&rows[2 + k], 1, MPI_INT, rank, k, MPI_COMM_WORLD, &reqs[2 + k]);
            }
        } else if (test) {
            MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
            sum += flag;
        } else if (proc) {
            sum += lbf_hot((int)i);
        } else {
            MPI_Comm_rank(MPI_COMM_WORLD, &rank);
            sum += rank;
            if (paced && i % 64 == 63) nanosleep(&pause, NULL);
        }
    }
    long long elapsed = now_ns() - start;
    if (test) {
        MPI_Send(&out, 1, MPI_INT, rank, 7, MPI_COMM_WORLD);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    }
    printf("LBF_LOOP calls=%ld ns=%lld sum=%d\n", n, elapsed, sum);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
