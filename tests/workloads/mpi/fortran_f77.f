C     A FORTRAN 77 MPI workload using INCLUDE 'mpif.h': the same calls
C     and counts as fortran_mpi.f90 (see there), fixed form.
      PROGRAM F77MPI
      IMPLICIT NONE
      INCLUDE 'mpif.h'
      INTEGER N1, N2, N3, N4, N5
      PARAMETER (N1 = 1000, N2 = 100, N3 = 64, N4 = 16, N5 = 32)
      DOUBLE PRECISION A(N1), B(N1), SA(N5 * 64), RA(N5 * 64)
      INTEGER IA(N2), IB(N2), REQ(2), STATS(MPI_STATUS_SIZE, 2)
      INTEGER STATUS(MPI_STATUS_SIZE)
      DOUBLE COMPLEX Z(N3)
      REAL*8 R(N4), RSUM(N4)
      INTEGER IERR, RANK, NPROCS, RIGHT, LEFT, ITERS, IT, SPLIT
      INTEGER CART, SUB, SRC, DST, CRANK, DIMS(1)
      LOGICAL PERIOD(1)
      INTEGER*8 SENDS, SBYTES, RECVS, RBYTES, COLLS
      CHARACTER*32 ARG

      ITERS = 10
      IF (IARGC() .GE. 1) THEN
         CALL GETARG(1, ARG)
         READ (ARG, *) ITERS
      END IF
      SENDS = 0
      SBYTES = 0
      RECVS = 0
      RBYTES = 0
      COLLS = 0
      CALL MPI_INIT(IERR)
      CALL MPI_COMM_RANK(MPI_COMM_WORLD, RANK, IERR)
      CALL MPI_COMM_SIZE(MPI_COMM_WORLD, NPROCS, IERR)
      RIGHT = MOD(RANK + 1, NPROCS)
      LEFT = MOD(RANK - 1 + NPROCS, NPROCS)
      A = RANK
      IA = RANK
      Z = DCMPLX(RANK, 1)
      R = 1.0D0
      SA = RANK
      CALL MPI_COMM_SPLIT(MPI_COMM_WORLD, 0, NPROCS - 1 - RANK, SPLIT,
     &                    IERR)
      CALL MPI_COMM_RANK(SPLIT, SUB, IERR)
      DIMS(1) = NPROCS
      PERIOD(1) = .TRUE.
      CALL MPI_CART_CREATE(MPI_COMM_WORLD, 1, DIMS, PERIOD, .FALSE.,
     &                     CART, IERR)
      CALL MPI_COMM_RANK(CART, CRANK, IERR)
      CALL MPI_CART_SHIFT(CART, 0, 1, SRC, DST, IERR)
      COLLS = COLLS + 2
      DO 10 IT = 1, ITERS
         IF (MOD(RANK, 2) .EQ. 0) THEN
            CALL MPI_SEND(A, N1, MPI_DOUBLE_PRECISION, RIGHT, 1,
     &                    MPI_COMM_WORLD, IERR)
            CALL MPI_RECV(B, N1, MPI_DOUBLE_PRECISION, LEFT, 1,
     &                    MPI_COMM_WORLD, STATUS, IERR)
         ELSE
            CALL MPI_RECV(B, N1, MPI_DOUBLE_PRECISION, LEFT, 1,
     &                    MPI_COMM_WORLD, STATUS, IERR)
            CALL MPI_SEND(A, N1, MPI_DOUBLE_PRECISION, RIGHT, 1,
     &                    MPI_COMM_WORLD, IERR)
         END IF
         SENDS = SENDS + 1
         SBYTES = SBYTES + 8 * N1
         RECVS = RECVS + 1
         RBYTES = RBYTES + 8 * N1

         CALL MPI_IRECV(IB, N2, MPI_INTEGER, LEFT, 2, MPI_COMM_WORLD,
     &                  REQ(1), IERR)
         CALL MPI_ISEND(IA, N2, MPI_INTEGER, RIGHT, 2, MPI_COMM_WORLD,
     &                  REQ(2), IERR)
         CALL MPI_WAITALL(2, REQ, STATS, IERR)
         SENDS = SENDS + 1
         SBYTES = SBYTES + 4 * N2
         RECVS = RECVS + 1
         RBYTES = RBYTES + 4 * N2

         CALL MPI_SENDRECV_REPLACE(Z, N3, MPI_DOUBLE_COMPLEX, DST, 3,
     &                             SRC, 3, CART, STATUS, IERR)
         SENDS = SENDS + 1
         SBYTES = SBYTES + 16 * N3
         RECVS = RECVS + 1
         RBYTES = RBYTES + 16 * N3

         CALL MPI_ALLREDUCE(R, RSUM, N4, MPI_REAL8, MPI_SUM, SPLIT,
     &                      IERR)
         COLLS = COLLS + 1
         IF (NPROCS .GT. 1) THEN
            IF (SUB .EQ. 0) THEN
               CALL MPI_SEND(RSUM, N4, MPI_REAL8, 1, 4, SPLIT, IERR)
               SENDS = SENDS + 1
               SBYTES = SBYTES + 8 * N4
            ELSE IF (SUB .EQ. 1) THEN
               CALL MPI_RECV(R, N4, MPI_REAL8, 0, 4, SPLIT, STATUS,
     &                       IERR)
               RECVS = RECVS + 1
               RBYTES = RBYTES + 8 * N4
            END IF
         END IF
         R = 1.0D0

         CALL MPI_BCAST(IA, N2, MPI_INTEGER, 0, MPI_COMM_WORLD, IERR)
         CALL MPI_ALLTOALL(SA, N5, MPI_DOUBLE_PRECISION, RA, N5,
     &                     MPI_DOUBLE_PRECISION, CART, IERR)
         COLLS = COLLS + 2
   10 CONTINUE
      CALL MPI_FINALIZE(IERR)
      WRITE (*, 100) RANK, SENDS, SBYTES, RECVS, RBYTES, COLLS, CRANK
  100 FORMAT ('LBF-CHECK rank=', I0, ' sends=', I0, ' send_bytes=', I0,
     &        ' recvs=', I0, ' recv_bytes=', I0, ' colls=', I0,
     &        ' cart_rank=', I0)
      END
