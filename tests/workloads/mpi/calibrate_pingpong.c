/* The MPI ping-pong of `lbf-node calibrate --mpi`: ranks 0 and 1 exchange messages of 0 B and
 * every power of two up to MAX_BYTES; for each size, one warm-up round trip, then at least
 * MIN_REPS and while BUDGET_MS lasts at most MAX_REPS timed ones. Rank 0 prints one line per
 * size: "LBF-PINGPONG bytes one_way_seconds reps", the one-way time being half the median
 * round trip. Standalone (no lbf_check.h): lbf-node compiles this very file.
 * Usage: calibrate_pingpong MAX_BYTES MIN_REPS MAX_REPS BUDGET_MS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 5 || size < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np 2 %s MAX_BYTES MIN_REPS MAX_REPS BUDGET_MS\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long max_bytes = atol(argv[1]);
    int min_reps = atoi(argv[2]), max_reps = atoi(argv[3]);
    double budget = atof(argv[4]) / 1000.0;
    char *buf = calloc(max_bytes > 0 ? max_bytes : 1, 1);
    double *times = calloc(max_reps > 0 ? max_reps : 1, sizeof *times);
    if (!buf || !times)
        MPI_Abort(MPI_COMM_WORLD, 3);
    for (long bytes = 0; bytes <= max_bytes; bytes = bytes ? bytes * 2 : 1) {
        int n = (int)bytes, reps = 0, go = 1;
        double start = 0;
        for (int i = -1; go; i++) {
            if (rank == 0) {
                double t = MPI_Wtime();
                if (i == 0)
                    start = t;
                MPI_Send(buf, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
                MPI_Recv(buf, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                double now = MPI_Wtime();
                if (i >= 0)
                    times[reps++] = now - t;
                go = i < 0 || reps < min_reps || (reps < max_reps && now - start < budget);
            } else if (rank == 1) {
                MPI_Recv(buf, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
            }
            /* Rank 0 says whether another round trip follows. */
            if (rank < 2) {
                if (rank == 0)
                    MPI_Send(&go, 1, MPI_INT, 1, 1, MPI_COMM_WORLD);
                else
                    MPI_Recv(&go, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                go = 0;
            }
        }
        if (rank == 0) {
            qsort(times, reps, sizeof *times, by_value);
            double median = reps % 2 ? times[reps / 2] : (times[reps / 2 - 1] + times[reps / 2]) / 2;
            printf("LBF-PINGPONG %ld %.9e %d\n", bytes, median / 2, reps);
            fflush(stdout);
        }
    }
    free(buf);
    free(times);
    MPI_Finalize();
    return 0;
}
