/* lbf probe test program: an MPI program that does nothing but start and end, so that what
 * a tracer costs it is its fixed cost (start-up and teardown). */
#include <mpi.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Finalize();
    return 0;
}
