/* cli_session.c — what fit, demo, reconstruct and fit-regions share: resolve the command line's
 * values, open DATA (or simulate the built-in dataset) as a session handle under --memory with
 * the plan of what the command will do, draw one bar per call, and word a refusal by the budget
 * the same way everywhere ("the job does not fit in X: why; the smallest budget is Y", exit 2). */
#include "cli/cli_session.h"
#include "cli/cli_mpi.h"

#include "cli/cli_job.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


int cli_session_fail(const cli_session *cs, ssb4d_status st, const char *msg)
{
    if (st == SSB4D_ENOMEM && !strncmp(msg, "the job does not fit", 20)) { /* the planner's words */
        fprintf(stderr, "ssb4d %s: %s\n", cs->cmd, msg);
        return CLI_EXIT_USAGE;
    }
    return cli_job_error(cs->cmd, st, msg, cs->budget);
}

int cli_backend_check(const char *cmd, ssb4d_backend_kind kind, const char **name)
{
    ssb4d_err err = {0};
    ssb4d_status st = ssb4d_backend_check(kind, name, &err);
    return st ? cli_error(cmd, st, err.msg) : 0;
}

void cli_session_bar(cli_session *cs, const char *label) { cli_progress_start(&cs->pb, label, cs->quiet); }

double cli_session_bar_done(cli_session *cs)
{
    cli_progress_done(&cs->pb);
    return cli_progress_elapsed(&cs->pb);
}

/* Simulates the built-in dataset into memory (counted under the budget by the session) and sets
 * the values its sidecar would give; the flags still win. */
void cli_builtin_params(ssb4d_sim_params *sp, int threads)
{
    ssb4d_err err = {0};
    ssb4d_sim_params_preset(sp, "small", &err); /* a known preset: cannot fail */
    memset(&sp->ab, 0, sizeof sp->ab);
    sp->ab.C_nm[SSB4D_C10] = BUILTIN_C10;
    sp->ab.C_nm[SSB4D_C12] = BUILTIN_C12;
    sp->ab.phi_deg[SSB4D_C12] = BUILTIN_PHI12;
    sp->seed = BUILTIN_SEED;
    sp->threads = threads;
}

static int simulate_builtin(cli_session *cs, const cli_micro *m, ssb4d_err *err)
{
    ssb4d_sim_params sp;
    cli_builtin_params(&sp, m->threads);
    ssb4d_sim_info info;
    if (ssb4d_sim_describe(&sp, &info, err))
        return cli_error(cs->cmd, err->code, err->msg);
    size_t sh[4] = {(size_t)sp.scan_n, (size_t)sp.scan_n, (size_t)sp.det, (size_t)sp.det};
    size_t bytes = sh[0] * sh[1] * sh[2] * sh[3] * sizeof(uint16_t);
    if (cs->budget && bytes > cs->budget) { /* before the simulation's work */
        char b[32], n[32];
        fprintf(stderr, "ssb4d %s: the job does not fit in %s: the built-in dataset alone needs %s\n", cs->cmd,
                cli_job_size_as(b, cs->budget, bytes > cs->budget ? bytes : cs->budget, 0),
                cli_job_size_as(n, bytes, bytes > cs->budget ? bytes : cs->budget, 1));
        return CLI_EXIT_USAGE;
    }
    if (!(cs->builtin = malloc(bytes)))
        return cli_error(cs->cmd, SSB4D_ENOMEM, "out of memory");
    cli_progress pb;
    cli_progress_start(&pb, "simulate", cs->quiet);
    sp.progress = cli_progress_cb;
    sp.progress_user = &pb;
    ssb4d_status st = ssb4d_simulate_to_memory(&sp, cs->builtin, NULL, NULL, NULL, &info, err);
    cli_progress_done(&pb);
    if (st)
        return cli_error(cs->cmd, st, err->msg);
    memcpy(cs->shape, sh, sizeof sh);
    ssb4d_values_unset(&cs->v);
    cs->v.kv = sp.kv;
    cs->v.semiangle_mrad = sp.semiangle_mrad;
    cs->v.scan_step_A[0] = cs->v.scan_step_A[1] = info.scan_step_A;
    cs->v.det_sampling_mrad[0] = cs->v.det_sampling_mrad[1] = info.det_sampling_mrad;
    cs->v.rotation_deg = 0;
    snprintf(cs->v.rotation_from, sizeof cs->v.rotation_from, "built-in dataset");
    cs->v.flip = 0;
    snprintf(cs->v.flip_from, sizeof cs->v.flip_from, "built-in dataset");
    static const char *const builtin_from[4] = {"the built-in dataset's", "the built-in dataset's",
                                                "the built-in dataset's", "the built-in dataset's"};
    cli_warn_overrides(&cs->v, &m->flags, builtin_from);
    ssb4d_values_layer(&cs->v, &m->flags);
    /* The mean depth of the simulator's potential planes (docs/simulate.md, docs/fit.md). */
    cs->truth[0] = BUILTIN_C10 + 0.5 * (info.thickness_nm - info.thickness_nm / info.n_slices);
    cs->truth[1] = BUILTIN_C12;
    cs->truth[2] = BUILTIN_PHI12;
    return 0;
}

int cli_session_open(const char *cmd, cli_session_req *rq, cli_session *cs)
{
    memset(cs, 0, sizeof *cs);
    cs->cmd = cmd;
    cs->truth[0] = cs->truth[1] = cs->truth[2] = NAN;
    cs->budget = cli_memory_budget(rq->m);
    cs->quiet = rq->m->quiet || rq->m->json || !cli_is_root(); /* one rank speaks (cli_mpi.h) */
    ssb4d_err err = {0};
    int rc;
    if (rq->data && rq->values) {
        cs->v = *rq->values;
    } else if (rq->data) {
        if ((rc = cli_resolve(rq->data, rq->m, &cs->v)) || (rc = cli_check_microscope(&cs->v)))
            return rc;
    }
    /* A backend that cannot run here is said before any work (the built-in dataset's simulation). */
    const char *bk = NULL;
    if ((rc = cli_backend_check(cmd, rq->m->backend, &bk)))
        return rc;
#ifdef SSB4D_HAVE_CUDA
    /* auto in a build with the CUDA backend but no GPU: one info line, for a person at a terminal
     * (scripts and tests read the backend from the summary instead) */
    if (rq->m->backend == SSB4D_BACKEND_AUTO && !strcmp(bk, "cpu") && !cs->quiet && isatty(STDERR_FILENO))
        fprintf(stderr, "ssb4d %s: no CUDA device here; running on the CPU\n", cmd);
#endif
    if (!rq->data && (rc = simulate_builtin(cs, rq->m, &err)))
        return rc;

    ssb4d_session_opts o;
    ssb4d_session_opts_default(&o);
    cli_values_to_calib_params(&cs->v, rq->m->threads, rq->m->hot_pixels, &o.calib);
    o.rotation_measured = cs->v.rotation_measured && !isnan(cs->v.rotation_deg);
    o.rotation_sigma_deg = o.rotation_measured ? cs->v.rotation_sigma_deg : NAN;
    snprintf(o.rotation_from, sizeof o.rotation_from, "%s", cs->v.rotation_from); /* for the saved file */
    o.memory_bytes = cs->budget;
    o.threads = rq->m->threads;
    o.dist = cli_dist();
    o.backend = rq->m->backend;
    o.device_memory_bytes = rq->m->device_memory_bytes;
    o.progress = rq->progress ? rq->progress : cli_progress_cb;
    o.progress_user = rq->progress ? rq->progress_user : &cs->pb;
    o.fit = rq->fit;
    o.no_fit = !rq->fit;
    o.block_bytes = rq->block_bytes;
    o.ssb_path = rq->ssb_path;
    if (rq->region)
        memcpy(o.region, rq->region, sizeof o.region);
    /* Automatic upsampling follows the microscope (step, semi-angle, kV), known before calibrating. */
    if (!rq->upsample) {
        ssb4d_geometry g;
        memset(&g, 0, sizeof g);
        g.kv = o.calib.kv, g.semiangle_mrad = o.calib.semiangle_mrad;
        g.scan_step_A[0] = o.calib.scan_step_A[0], g.scan_step_A[1] = o.calib.scan_step_A[1];
        rq->upsample = ssb4d_upsample_auto(&g);
    }
    /* The plan: the command's stages (a fit, or one release: the exact loss and the image), the
     * image at its upsampling, a refit of the largest region; the output images held to the end. */
    ssb4d_session_script sc;
    ssb4d_session_script_default(&sc);
    sc.upsample = rq->upsample;
    sc.fft = 0;
    sc.drags = 0;
    sc.releases = rq->fit ? 0 : 1;
    sc.save = 0;
    if (rq->viewer) /* the viewer's session as the planner knows it, at this upsampling */
        ssb4d_session_script_default(&sc), sc.upsample = rq->upsample;
    if (rq->refit_region[0]) {
        sc.region = 1;
        sc.region_rect[1] = rq->refit_region[0], sc.region_rect[3] = rq->refit_region[1];
    }
    cs->sc = sc;
    o.script = &cs->sc; /* read at calibration: it lives as long as the session */
    o.held_image_floats = rq->image_floats;
    ssb4d_status st;
    if (rq->data)
        st = ssb4d_session_open(rq->data, &o, &cs->s, &err);
    else
        st = ssb4d_session_open_memory(cs->builtin, SSB4D_U16, cs->shape, &o, &cs->s, &err);
    if (st)
        return cli_session_fail(cs, st, err.msg);
    ssb4d_session_shape(cs->s, cs->shape);
    return 0;
}

int cli_session_calibrate(cli_session *cs)
{
    ssb4d_err err = {0};
    cli_session_bar(cs, "calibrate");
    ssb4d_status st = ssb4d_session_calibrate(cs->s, &err);
    cli_session_bar_done(cs);
    return st ? cli_session_fail(cs, st, err.msg) : 0;
}

void cli_session_close(cli_session *cs)
{
    ssb4d_session_close(cs->s);
    free(cs->builtin); /* after the session: it reads the counts until closed */
    cs->s = NULL;
    cs->builtin = NULL;
}
