/* cli_mpi.c — the command line's MPI start and end (cli_mpi.h). The process-wide state here is
 * the command line's own (one MPI world per process), never the library's: the library takes the
 * context explicitly (ssb4d_session_opts.dist). */
#include "cli/cli_mpi.h"
#include "cli/cli_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef SSB4D_HAVE_MPI
#include <mpi.h>
#endif

static struct {
    ssb4d_dist *d;
    int rank;
} mpi_state;

/* Started by mpirun: OpenMPI sets OMPI_COMM_WORLD_SIZE, PMIx launchers PMIX_RANK. */
static int launched_by_mpirun(void) { return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK"); }

int cli_mpi_init(int *argc, char ***argv)
{
#ifdef SSB4D_HAVE_MPI
    if (!launched_by_mpirun())
        return 0;
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        cli_say("MPI could not start");
        return CLI_EXIT_INTERNAL;
    }
    /* the viewer's worker thread sends the jobs: MPI from one thread at a time, not only main's */
    if (provided < MPI_THREAD_SERIALIZED) {
        cli_say("this MPI library does not allow calls from a second thread");
        MPI_Abort(MPI_COMM_WORLD, CLI_EXIT_INTERNAL);
    }
    ssb4d_err err = {0};
    if (ssb4d_dist_mpi(NULL, &mpi_state.d, &err)) {
        cli_say("%s", err.msg);
        MPI_Abort(MPI_COMM_WORLD, CLI_EXIT_INTERNAL);
    }
    mpi_state.rank = ssb4d_dist_rank(mpi_state.d);
    if (mpi_state.rank != 0 && !freopen("/dev/null", "w", stdout)) /* rank 0 speaks for the job */
        fprintf(stderr, "ssb4d (rank %d): cannot silence stdout\n", mpi_state.rank);
#else
    (void)argc, (void)argv;
    if (launched_by_mpirun() && getenv("OMPI_COMM_WORLD_SIZE") && atoi(getenv("OMPI_COMM_WORLD_SIZE")) > 1) {
        cli_say("started by mpirun, but this build has no MPI (configure with -DSSB4D_MPI=ON)");
        return CLI_EXIT_USAGE;
    }
#endif
    return 0;
}

int cli_mpi_finish(int rc)
{
#ifdef SSB4D_HAVE_MPI
    if (!mpi_state.d)
        return rc;
    if (getenv("SSB4D_MPI_TRAFFIC")) { /* a diagnostic: docs/scale.md's measurements */
        uint64_t bytes, msgs;
        double sec;
        ssb4d_dist_traffic(mpi_state.d, &bytes, &msgs, &sec);
        fprintf(stderr, "ssb4d rank %d of %d: sent %llu bytes in %llu messages, %.3f s in messages\n", mpi_state.rank,
                ssb4d_dist_size(mpi_state.d), (unsigned long long)bytes, (unsigned long long)msgs, sec);
    }
    fflush(stdout);
    fflush(stderr);
    if (rc) /* a rank that stops early would leave the others waiting in a reduction */
        MPI_Abort(MPI_COMM_WORLD, rc);
    ssb4d_dist_free(mpi_state.d);
    mpi_state.d = NULL;
    MPI_Finalize();
#endif
    return rc;
}

const ssb4d_dist *cli_dist(void) { return mpi_state.d; }
int cli_is_root(void) { return mpi_state.rank == 0; }
