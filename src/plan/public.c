/* public.c — the planner's calls for clients (include/ssb4d.h): the rank plans of a distributed
 * session, the calibration's block, and the CUDA backend's device plan (`ssb4d plan`). */
#include "plan/device_model.h"
#include "plan/plan.h"
#ifdef SSB4D_HAVE_CUDA
#include "cuda/cuda.h"
#endif

#include <stdio.h>
#include <string.h>

size_t ssb4d_plan_region_side(size_t n)
{
    return ssb_plan_region_side(n);
}

void ssb4d_plan_input_from_calibration(ssb4d_plan_input *in, const ssb4d_calibration *cal, const size_t shape[4],
                                       double fit_radius)
{
    plan_input_from_calibration(in, cal, shape, fit_radius);
}

size_t ssb4d_calib_need(size_t budget, size_t encoded, size_t det_pixels, size_t npos, int rotation_fitted,
                        size_t *block)
{
    return plan_calib_need(budget, encoded, det_pixels, npos, rotation_fitted, block);
}

_Static_assert(SSB4D_PLAN_MAX_RANKS == PLAN_MAX_RANKS && SSB4D_PLAN_BLOCK_BF == PLAN_BLOCK,
               "the public rank constants are the planner's");
_Static_assert(SSB4D_DEVICE_MAX_STAGES == DEV_MAX_STAGES, "the public stage table is the model's");

ssb4d_status ssb4d_plan_make_rank(const ssb4d_plan_input *in, size_t ranks, ssb4d_plan *p,
                                  ssb4d_plan_rank_share *share, ssb4d_err *err)
{
    plan_rank_share r;
    ssb4d_status st = plan_make_rank(in, ranks, PLAN_RANK_LARGEST, p, &r, err);
    if (st || !share)
        return st;
    size_t n_stored = in->n_stored ? in->n_stored : in->n_bf;
    share->ranks = r.ranks;
    share->blocks = r.blocks;
    share->local_blocks = r.local_blocks;
    share->local_bf = r.local_bf;
    share->local_stored = r.local_stored;
    share->g_bytes = r.g_bytes;
    share->g_all_bytes = (size_t)((double)n_stored * (double)plan_plane_bytes(in->scan[0], in->scan[1]));
    share->chain_loss_bytes = r.chain_loss_bytes;
    share->chain_fit_bytes = r.chain_fit_bytes;
    return st;
}

ssb4d_status ssb4d_plan_smallest_ranks(const ssb4d_plan_input *in, size_t max_ranks, ssb4d_plan_ranks_answer *a,
                                       ssb4d_err *err)
{
    plan_ranks_answer r;
    memset(&r, 0, sizeof r);
    ssb4d_status st = plan_smallest_ranks(in, max_ranks, &r, err);
    a->ranks = r.ranks;
    a->one_process_streams = r.one_process_streams;
    a->tried = r.tried;
    a->tried_need = r.tried_need;
    memcpy(a->reason, r.reason, sizeof a->reason);
    return st;
}

static void model_out(const dev_model *m, ssb4d_device_model *o)
{
    memset(o, 0, sizeof *o);
    o->ny = m->ny, o->nx = m->nx, o->n_slots = m->n_slots;
    o->planes_bytes = m->planes;
    o->work_bytes = dev_model_work_bytes(m);
    o->fft_work_bytes = m->buf[DEV_WORK];
    o->peak_bytes = dev_model_bytes(m);
    o->fft_estimated = m->fft_estimated;
    o->n_stages = m->n_stages;
    for (size_t i = 0; i < m->n_stages; i++) {
        const dev_stage *s = &m->stages[i];
        ssb4d_device_stage *d = &o->stages[i];
        snprintf(d->name, sizeof d->name, "%s", s->name);
        d->view_bf = s->view_bf, d->sets = s->sets, d->f = s->f, d->bytes = s->bytes, d->after = s->after;
    }
}

void ssb4d_plan_device(const ssb4d_plan_input *in, const ssb4d_plan *p, size_t n_ranks, size_t local_stored,
                       size_t device_memory, ssb4d_plan_device_info *g)
{
    memset(g, 0, sizeof *g);
    dev_fft_work_fn fw = NULL; /* no GPU here: cuFFT's work area estimated */
#ifdef SSB4D_HAVE_CUDA
    if (cuda_device_info(g->gpu, sizeof g->gpu, &g->gpu_bytes) == 0)
        fw = cuda_fft_work_bytes;
    else
        g->gpu[0] = 0, g->gpu_bytes = 0;
#endif
    dev_model field, region;
    dev_session_in d;
    plan_device_session(in, in->scan[0], in->scan[1], &d);
    d.fft_work = fw;
    if (n_ranks > 1) /* a rank's GPU holds its share of the planes */
        d.n_stored = local_stored ? local_stored : 1;
    dev_model_session(&d, &field);
    model_out(&field, &g->field);
    g->peak_bytes = dev_model_bytes(&field);
    if (in->region[0] && in->region[1]) {
        dev_session_in r;
        plan_device_session(in, in->region[0], in->region[1], &r);
        r.fft_work = fw, r.no_images = 1, r.n_stored = d.n_stored;
        dev_model_session(&r, &region);
        model_out(&region, &g->region);
        g->have_region = 1;
        g->region_frees = p->region_frees_g;
        size_t with = dev_model_bytes(&region) + (g->region_frees ? 0 : dev_model_bytes(&field));
        if (with > g->peak_bytes)
            g->peak_bytes = with;
    }
    g->budget_given = device_memory != 0;
    g->budget_bytes = device_memory ? device_memory : g->gpu_bytes;
    g->fits = g->budget_bytes ? g->peak_bytes <= g->budget_bytes : -1;
}
