/* cli_mpi.h — `mpirun -np N ssb4d fit|reconstruct|...`: the command line under MPI (docs/scale.md).
 *
 * When the process was started by mpirun (OpenMPI's or PMIx's environment) and the build has
 * MPI, main() initialises MPI and the compute commands open a distributed session. Rank 0 prints
 * and writes; the other ranks compute their share in silence (stdout goes to /dev/null, progress
 * is off) and write nothing. A rank that fails ends the whole job (MPI_Abort) so that no rank is
 * left waiting for it. */
#ifndef SSB4D_CLI_MPI_H
#define SSB4D_CLI_MPI_H
#include "ssb4d_advanced.h"

/* Called first by main; returns 0, or an exit status when MPI could not start. */
int cli_mpi_init(int *argc, char ***argv);
/* Called last by main with the command's exit status; returns it (a failure aborts the job). */
int cli_mpi_finish(int rc);
/* The distributed context (NULL: one process). */
const ssb4d_dist *cli_dist(void);
/* 1 on the rank that prints and writes (rank 0, or a plain process). */
int cli_is_root(void);
#endif
