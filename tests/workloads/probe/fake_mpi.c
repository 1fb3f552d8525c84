/* A stand-in MPI library for probe tests: defines PMPI_Init, and MPI_Init as its alias, doing
 * nothing, so that a test can enter it more often than a real MPI allows (see init_loop.c). */
int PMPI_Init(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

int MPI_Init(int *argc, char ***argv) __attribute__((alias("PMPI_Init")));
