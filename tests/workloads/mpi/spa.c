/* SPA over MPI, the Synthetic Parallel Application of Eom and Hollingsworth's procedure-LBF
 * paper: rank 0 serves ranks 1 to 3. Each client loops ITERS times: compute COMPUTE_MS, send
 * a request, wait for the reply. The server takes requests from any client as they come and
 * serves two classes: servBusy1 (2 x COMPUTE_MS) for client 1 and servBusy2 (1 x COMPUTE_MS)
 * for clients 2 and 3, so the server is the bottleneck.
 *
 * Built with -DMOVED=1 (or 2), servBusy1 (servBusy2) is moved from the server to the clients
 * it serves: the server answers their requests at once, and each such client runs it after
 * sending its request and before receiving the reply. With -DEMPTIED=1 (or 2), that procedure
 * does nothing (critical-path zeroing); with -DHALVED=1 (or 2), it does half its work (a
 * procedure made twice as fast). The tests build every variant from this one file.
 *
 * Usage: mpirun -np 4 spa ITERS COMPUTE_MS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "../work.h"

#ifndef MOVED
#define MOVED 0
#endif
#ifndef EMPTIED
#define EMPTIED 0
#endif
#ifndef HALVED
#define HALVED 0
#endif

enum { REQUEST = 1, REPLY = 2, REQ_BYTES = 200, REPLY_BYTES = 1000 };

/* Kept out of line, under their own names, so that `lbf-trace --procedure` finds them. */
__attribute__((noinline, noclone)) void servBusy1(double ms) {
    if (EMPTIED != 1) work_burn((HALVED == 1 ? 1 : 2) * ms);
}
__attribute__((noinline, noclone)) void servBusy2(double ms) {
    if (EMPTIED != 2) work_burn((HALVED == 2 ? 0.5 : 1) * ms);
}

/* The service of request class `class` (1 or 2). */
static void serve(int class, double ms) {
    if (class == 1)
        servBusy1(ms);
    else
        servBusy2(ms);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 3 || size < 2) {
        if (rank == 0) fprintf(stderr, "usage: mpirun -np 4 spa ITERS COMPUTE_MS\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int iters = atoi(argv[1]);
    double ms = atof(argv[2]);
    char request[REQ_BYTES] = {0}, reply[REPLY_BYTES] = {0};
    if (rank == 0) {
        for (int left = (size - 1) * iters; left > 0; left--) {
            MPI_Status status;
            MPI_Recv(request, REQ_BYTES, MPI_CHAR, MPI_ANY_SOURCE, REQUEST, MPI_COMM_WORLD,
                     &status);
            int class = status.MPI_SOURCE == 1 ? 1 : 2;
            if (class != MOVED) serve(class, ms);
            MPI_Send(reply, REPLY_BYTES, MPI_CHAR, status.MPI_SOURCE, REPLY, MPI_COMM_WORLD);
        }
    } else {
        int class = rank == 1 ? 1 : 2;
        for (int i = 0; i < iters; i++) {
            work_burn(ms);
            MPI_Send(request, REQ_BYTES, MPI_CHAR, 0, REQUEST, MPI_COMM_WORLD);
            if (class == MOVED) serve(class, ms);
            MPI_Recv(reply, REPLY_BYTES, MPI_CHAR, 0, REPLY, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
    }
    MPI_Finalize();
    return 0;
}
