/* Messages and collectives of derived datatypes: a vector (8 blocks of 3 doubles, stride 5:
 * 192 bytes), a struct { int; double[3]; char[5] } (33 bytes), a contiguous of 6 ints (24
 * bytes), an indexed type (blocks of 2 and 5 ints: 28 bytes) and a dup of the vector. Every
 * iteration: rank 0 sends 2 vectors to rank 1 (MPI_Send) and rank 1 sends 4 structs back
 * (MPI_Isend + MPI_Wait); both receive with plain MPI_BYTE; then MPI_Bcast of 10 contiguous,
 * MPI_Alltoall of one dup'ed vector per member and MPI_Allgather of one indexed, with a
 * compute step before each. Each rank prints `LBF-COLL rank=R coll_bytes=B` as vcollectives
 * does. The types are freed at the end. Usage: derived ITERS COMPUTE_MS (2 ranks or more). */
#include <stddef.h>

#include "lbf_check.h"

struct rec { int a; double b[3]; char c[5]; };

int main(int argc, char **argv) {
    lbf_init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double ms = lbf_compute_ms * (1 + rank) / 4;

    MPI_Datatype vec, vec2, st, cont, idx;
    MPI_Type_vector(8, 3, 5, MPI_DOUBLE, &vec);
    MPI_Type_commit(&vec);
    MPI_Type_dup(vec, &vec2);
    MPI_Type_commit(&vec2);
    int lens[3] = {1, 3, 5};
    MPI_Aint disps[3] = {offsetof(struct rec, a), offsetof(struct rec, b), offsetof(struct rec, c)};
    MPI_Datatype types[3] = {MPI_INT, MPI_DOUBLE, MPI_CHAR};
    MPI_Type_create_struct(3, lens, disps, types, &st);
    MPI_Type_commit(&st);
    MPI_Type_contiguous(6, MPI_INT, &cont);
    MPI_Type_commit(&cont);
    int ilens[2] = {2, 5}, idisps[2] = {0, 4};
    MPI_Type_indexed(2, ilens, idisps, MPI_INT, &idx);
    MPI_Type_commit(&idx);
    int vsize, ssize, csize, isize;
    MPI_Type_size(vec, &vsize);
    MPI_Type_size(st, &ssize);
    MPI_Type_size(cont, &csize);
    MPI_Type_size(idx, &isize);

    double *vbuf = calloc(2 * 8 * 5 * size, sizeof(double));
    double *vrecv = calloc(2 * 8 * 5 * size, sizeof(double));
    struct rec recs[4] = {{0}};
    char bytes[4096];
    int ints[60] = {0}, *iall = calloc(7 * size * 2, sizeof(int));
    long long coll_bytes = 0;
    for (int i = 0; i < lbf_iters; i++) {
        lbf_compute(ms);
        if (rank == 0) {
            MPI_Send(vbuf, 2, vec, 1, 7, MPI_COMM_WORLD);
            lbf_count_send(2LL * vsize);
            MPI_Status s;
            int n;
            MPI_Recv(bytes, sizeof bytes, MPI_BYTE, 1, 8, MPI_COMM_WORLD, &s);
            MPI_Get_count(&s, MPI_BYTE, &n);
            lbf_count_recv(n);
        } else if (rank == 1) {
            MPI_Status s;
            int n;
            MPI_Recv(bytes, sizeof bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD, &s);
            MPI_Get_count(&s, MPI_BYTE, &n);
            lbf_count_recv(n);
            MPI_Request r;
            MPI_Isend(recs, 4, st, 0, 8, MPI_COMM_WORLD, &r);
            lbf_count_send(4LL * ssize);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        }
        lbf_compute(ms);
        MPI_Bcast(ints, 10, cont, 0, MPI_COMM_WORLD);
        coll_bytes += 10LL * csize;
        lbf_compute(ms);
        MPI_Alltoall(vbuf, 1, vec2, vrecv, 1, vec2, MPI_COMM_WORLD);
        coll_bytes += (long long)vsize * (size - 1);
        lbf_compute(ms);
        MPI_Allgather(ints, 1, idx, iall, 7, MPI_INT, MPI_COMM_WORLD);
        coll_bytes += isize;
        lbf_colls += 3;
    }
    printf("LBF-COLL rank=%d coll_bytes=%lld\n", rank, coll_bytes);
    MPI_Type_free(&vec);
    MPI_Type_free(&vec2);
    MPI_Type_free(&st);
    MPI_Type_free(&cont);
    MPI_Type_free(&idx);
    free(vbuf); free(vrecv); free(iall);
    return lbf_finish();
}
