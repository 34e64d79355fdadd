/* main.c — `ssb4d <command> ...`: dispatch to the subcommands. */
#include "cli/cli_common.h"
#include "cli/cli_mpi.h"
#include "ssb4d_view.h"
#include "cli/commands.h"
#include "ssb4d_advanced.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *what;
} commands[] = {
    {"import", cmd_import, "stream an acquisition (.npy, raw, HDF5, Arina, .mib, EMPAD, DM, Velox, MRC) into a .qem"},
    {"info", cmd_info, "shape, sizes, compression and calibration of a .qem"},
    {"verify", cmd_verify, "compare every count of a .qem with the original it came from"},
    {"export", cmd_export, "every frame of any readable acquisition (or a .qem) as a .npy"},
    {"simulate", cmd_simulate, "simulate a 4D-STEM acquisition (multislice, Poisson counts)"},
    {"calibrate", cmd_calibrate, "find the BF disk, detector sampling, hot pixels and rotation"},
    {"virtual", cmd_virtual, "virtual BF, ADF, centre-of-mass and iDPC images of DATA, one pass over its frames"},
    {"reconstruct", cmd_reconstruct, "build G(q,k) and write the SSB phase image at given aberrations"},
    {"fit", cmd_fit, "fit the aberrations (the main job); without DATA, on a built-in simulation"},
    {"demo", cmd_demo, "simulate a small dataset, fit it and print the truth beside the fit"},
    {"refine", cmd_refine, "multislice refinement seeded by the fit: crystals, tilt, thickness (docs/refine.md)"},
    {"fit-regions", cmd_fit_regions, "fit a grid or list of scan regions: a map of C10, C12, phi12"},
    {"plan", cmd_plan, "the memory plan of a session under a budget: per stage peak, after, tiles"},
    {"session", cmd_session, "replay a typical viewer session on DATA: memory and time per stage"},
    {"view", cmd_view, "the browser viewer: fit, sliders with live previews, regions, save (127.0.0.1)"},
    {"bench", cmd_bench, "benchmark records: bench run, bench compare OLD NEW, bench sweep"},
};

static void usage(FILE *f)
{
    fprintf(f, "ssb4d %s — single-side-band direct ptychography of 4D-STEM data\n\n"
               "usage: ssb4d <command> [options]    (ssb4d <command> --help for details)\n\n"
               "commands:\n", SSB4D_VERSION_STRING);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].what);
    fprintf(f, "\nEvery command takes -q/--quiet and --help; one that writes files refuses to replace an\n"
               "existing one unless --force.\n"
               "Under mpirun (a build with MPI), fit, reconstruct, fit-regions, session, bench and view\n"
               "split the BF pixels over the ranks with the same results bit for bit; rank 0 prints and\n"
               "writes (docs/scale.md). ssb4d plan --ranks N plans one rank.\n" CLI_EXIT_HELP);
}

/* What `ssb4d` alone adds below the usage: where a new user starts. */
static void first_steps(FILE *f)
{
    fprintf(f, "\nNew here? Try:\n"
               "  ssb4d demo             simulate a small dataset, fit it and print the truth beside the fit\n"
               "  ssb4d fit              the main job on that built-in dataset: outputs in ssb4d-fit/\n"
               "  ssb4d fit DATA -o DIR  the main job on your data (.npy counts or a .qem from ssb4d import):\n"
               "                         fit the aberrations and write the phase image into DIR\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) { /* a usage error: exit 2, with the way in spelled out */
        usage(stderr);
        first_steps(stderr);
        return CLI_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        first_steps(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("ssb4d %s\n", SSB4D_VERSION_STRING);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            cli_set_command(commands[i].name); /* every shared helper's line: "ssb4d CMD: ..." */
            /* The viewer reads SIGINT/SIGTERM through a signalfd: blocked before MPI starts its own
             * threads, which would otherwise take them (and die of them). */
            if (commands[i].fn == cmd_view && view_block_signals()) {
                fprintf(stderr, "ssb4d view: cannot block SIGINT/SIGTERM\n");
                return CLI_EXIT_INTERNAL;
            }
            int rc = cli_mpi_init(&argc, &argv); /* under mpirun: a distributed session (cli_mpi.h) */
            return rc ? rc : cli_mpi_finish(commands[i].fn(argc - 1, argv + 1));
        }
    fprintf(stderr, "ssb4d: unknown command '%s' (try ssb4d --help)\n", argv[1]);
    return CLI_EXIT_USAGE;
}
