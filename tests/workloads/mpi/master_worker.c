/* Master/worker: rank 0 hands out 4*ITERS tasks and collects results with MPI_ANY_SOURCE and
 * MPI_ANY_TAG, reading the sender and tag from the status; workers MPI_Probe for the next
 * message, then receive it (tag 1 = task, tag 2 = stop) and compute 1-3 times COMPUTE_MS.
 * Which worker gets which task depends on timing; the per-rank LBF-CHECK counts are exact.
 * Usage: master_worker ITERS COMPUTE_MS */
#include "lbf_check.h"

enum { TAG_TASK = 1, TAG_STOP = 2, TAG_RESULT_BASE = 100 };

int main(int argc, char **argv) {
    lbf_init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0) {
        int tasks = 4 * lbf_iters, next = 0, done = 0;
        long result[4];
        for (int w = 1; w < size; w++) {
            int tag = next < tasks ? TAG_TASK : TAG_STOP;
            MPI_Send(&next, 1, MPI_INT, w, tag, MPI_COMM_WORLD);
            lbf_count_send(sizeof(int));
            if (tag == TAG_TASK) next++;
        }
        while (done < next) {
            MPI_Status st;
            MPI_Recv(result, 4, MPI_LONG, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            int bytes;
            MPI_Get_count(&st, MPI_BYTE, &bytes);
            lbf_count_recv(bytes);
            done++;
            int tag = next < tasks ? TAG_TASK : TAG_STOP;
            MPI_Send(&next, 1, MPI_INT, st.MPI_SOURCE, tag, MPI_COMM_WORLD);
            lbf_count_send(sizeof(int));
            if (tag == TAG_TASK) next++;
        }
    } else {
        for (;;) {
            MPI_Status st;
            int task;
            MPI_Probe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            MPI_Recv(&task, 1, MPI_INT, 0, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            lbf_count_recv(sizeof(int));
            if (st.MPI_TAG == TAG_STOP) break;
            lbf_compute(lbf_compute_ms * (1 + task % 3));
            long result[4] = {task, rank, 0, 0};
            int n = 1 + task % 4;
            MPI_Send(result, n, MPI_LONG, 0, TAG_RESULT_BASE + task % 5, MPI_COMM_WORLD);
            lbf_count_send(n * sizeof(long));
        }
    }
    return lbf_finish();
}
