/* lbf probe test program: rank 0 sends N messages to rank 1 (N = argv[1], default 10),
 * every rank burns BUSY_MS milliseconds of CPU (argv[2], default 500), then prints its own
 * thread CPU clock right before MPI_Finalize so the test can compare it with the cpu_ns of
 * the Finalize entry record. Output line per rank:
 *   LBF_PROBE rank=R pid=P tid=T sends=S thread_cpu_ns=C
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static long long thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    long long busy_ns = (argc > 2 ? atoll(argv[2]) : 500) * 1000000LL;
    int rank, size, sends = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long long start = thread_cpu_ns();
    volatile unsigned long long x = 0;
    while (thread_cpu_ns() - start < busy_ns)
        for (int i = 0; i < 10000; i++) x += i;
    int buf[4] = {1, 2, 3, 4};
    for (int i = 0; i < n && size > 1; i++) {
        if (rank == 0) {
            MPI_Send(buf, 4, MPI_INT, 1, 7, MPI_COMM_WORLD);
            sends++;
        } else if (rank == 1) {
            MPI_Recv(buf, 4, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    long long cpu = thread_cpu_ns();
    printf("LBF_PROBE rank=%d pid=%d tid=%ld sends=%d thread_cpu_ns=%lld\n", rank, getpid(),
           (long)syscall(SYS_gettid), sends, cpu);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
