/* Enters MPI_Init N times (N = argv[1], default 2000) through fake_mpi.c's stand-in library:
 * more MPI_Init notices than their ring buffer holds, when nothing reads them. */
#include <stdlib.h>

int MPI_Init(int *argc, char ***argv);

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 2000;
    for (long i = 0; i < n; i++) MPI_Init(&argc, &argv);
    return 0;
}
