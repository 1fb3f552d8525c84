! A Fortran MPI workload through the module bindings: `use mpi` (Fortran 90), or with
! -DMPI_F08 `use mpi_f08` (Fortran 2008, whose handles are derived types). Point-to-point
! (MPI_Send/MPI_Recv, MPI_Isend/MPI_Irecv/MPI_Waitall, MPI_Sendrecv_replace on a Cartesian
! communicator), collectives (MPI_Allreduce on a communicator from MPI_Comm_split, MPI_Bcast,
! MPI_Alltoall on the Cartesian one) with Fortran datatypes (MPI_DOUBLE_PRECISION,
! MPI_INTEGER, MPI_REAL8, MPI_DOUBLE_COMPLEX). Takes ITERS (default 10). Prints the
! LBF-CHECK line of lbf_check.h (rank, sends, send_bytes, recvs, recv_bytes, colls;
! MPI_Comm_split and MPI_Cart_create count as collectives), and cart_rank, the rank in the
! Cartesian communicator.
program fortran_bindings
#ifdef MPI_F08
    use mpi_f08
#else
    use mpi
#endif
    implicit none
    integer, parameter :: n1 = 1000, n2 = 100, n3 = 64, n4 = 16, n5 = 32
    double precision :: a(n1), b(n1), sa(n5 * 64), ra(n5 * 64)
    integer :: ia(n2), ib(n2)
#ifdef MPI_F08
    type(MPI_Request) :: req(2)
    type(MPI_Status) :: statuses(2), status
    type(MPI_Comm) :: split, cart
#else
    integer :: req(2), statuses(MPI_STATUS_SIZE, 2), status(MPI_STATUS_SIZE), split, cart
#endif
    double complex :: z(n3)
    real(kind=8) :: r(n4), rsum(n4)
    integer :: ierr, rank, nprocs, right, left, iters, it, sub, src, dst
    integer :: cart_rank, dims(1)
    logical :: periods(1)
    integer(kind=8) :: sends, send_bytes, recvs, recv_bytes, colls
    character(len=32) :: arg

    iters = 10
    if (command_argument_count() >= 1) then
        call get_command_argument(1, arg)
        read (arg, *) iters
    end if
    sends = 0; send_bytes = 0; recvs = 0; recv_bytes = 0; colls = 0
    call MPI_Init(ierr)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
    right = mod(rank + 1, nprocs)
    left = mod(rank - 1 + nprocs, nprocs)
    a = rank; ia = rank; z = cmplx(rank, 1, kind=8); r = 1.0d0; sa = rank
    ! Every rank in one communicator, ranks reversed.
    call MPI_Comm_split(MPI_COMM_WORLD, 0, nprocs - 1 - rank, split, ierr)
    call MPI_Comm_rank(split, sub, ierr)
    dims(1) = nprocs
    periods(1) = .true.
    call MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, .false., cart, ierr)
    call MPI_Comm_rank(cart, cart_rank, ierr)
    call MPI_Cart_shift(cart, 0, 1, src, dst, ierr)
    colls = colls + 2
    do it = 1, iters
        if (mod(rank, 2) == 0) then
            call MPI_Send(a, n1, MPI_DOUBLE_PRECISION, right, 1, MPI_COMM_WORLD, ierr)
            call MPI_Recv(b, n1, MPI_DOUBLE_PRECISION, left, 1, MPI_COMM_WORLD, status, ierr)
        else
            call MPI_Recv(b, n1, MPI_DOUBLE_PRECISION, left, 1, MPI_COMM_WORLD, status, ierr)
            call MPI_Send(a, n1, MPI_DOUBLE_PRECISION, right, 1, MPI_COMM_WORLD, ierr)
        end if
        sends = sends + 1; send_bytes = send_bytes + 8 * n1
        recvs = recvs + 1; recv_bytes = recv_bytes + 8 * n1

        call MPI_Irecv(ib, n2, MPI_INTEGER, left, 2, MPI_COMM_WORLD, req(1), ierr)
        call MPI_Isend(ia, n2, MPI_INTEGER, right, 2, MPI_COMM_WORLD, req(2), ierr)
        call MPI_Waitall(2, req, statuses, ierr)
        sends = sends + 1; send_bytes = send_bytes + 4 * n2
        recvs = recvs + 1; recv_bytes = recv_bytes + 4 * n2

        call MPI_Sendrecv_replace(z, n3, MPI_DOUBLE_COMPLEX, dst, 3, src, 3, cart, status, ierr)
        sends = sends + 1; send_bytes = send_bytes + 16 * n3
        recvs = recvs + 1; recv_bytes = recv_bytes + 16 * n3

        call MPI_Allreduce(r, rsum, n4, MPI_REAL8, MPI_SUM, split, ierr)
        colls = colls + 1
        if (nprocs > 1) then
            if (sub == 0) then
                call MPI_Send(rsum, n4, MPI_REAL8, 1, 4, split, ierr)
                sends = sends + 1; send_bytes = send_bytes + 8 * n4
            else if (sub == 1) then
                call MPI_Recv(r, n4, MPI_REAL8, 0, 4, split, status, ierr)
                recvs = recvs + 1; recv_bytes = recv_bytes + 8 * n4
            end if
        end if
        r = 1.0d0

        call MPI_Bcast(ia, n2, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
        call MPI_Alltoall(sa, n5, MPI_DOUBLE_PRECISION, ra, n5, MPI_DOUBLE_PRECISION, cart, ierr)
        colls = colls + 2
    end do
    call MPI_Finalize(ierr)
    write (*, '(a,i0,a,i0,a,i0,a,i0,a,i0,a,i0,a,i0)') 'LBF-CHECK rank=', rank, ' sends=', &
        sends, ' send_bytes=', send_bytes, ' recvs=', recvs, ' recv_bytes=', recv_bytes, &
        ' colls=', colls, ' cart_rank=', cart_rank
end program fortran_bindings
