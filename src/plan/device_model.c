/* device_model.c — the CUDA backend's device bytes, pass by pass (device_model.h). Every size is
 * src/cuda/device.c's formula for the buffer named beside it; tests/gpu/test_cuda.c compares the
 * model's peak with the measured one (cuda_G_device_bytes), tests/test_device_model.c with sizes
 * worked out by hand. */
#include "plan/device_model.h"

#include "common/block.h"
#include "cuda/kernels.h" /* cu_band_set: the band pass's sets are copied to the device as they are */
#include "cuda/loss_fused.h" /* the fused loss's grids and buffers */
#include "fit/fit.h"      /* fit_se_group_bf */
#include "gbuild/gbuild.h"

#include <stdio.h>
#include <string.h>

const char *const dev_buf_name[DEV_N_BUF] = {"pixel tables", "chunk spectra", "chunk flags", "chunk phase planes",
                                             "sums", "block sums", "loss sums", "object sum / band sets",
                                             "band segments", "mean phase", "object spectrum", "object output",
                                             "cuFFT work area", "fused loss planes", "fused loss twiddles"};

#define F2 8 /* sizeof(float2), sizeof(cufftComplex) */

size_t dev_fft_work_estimate(int nyf, int nxf, int batch, int c2c)
{
    size_t npix = (size_t)nyf * (size_t)nxf;
    return c2c ? npix * F2 : (size_t)batch * npix * sizeof(float);
}

void dev_model_init(dev_model *m, size_t ny, size_t nx, size_t n_slots, size_t stride, dev_fft_work_fn fft_work)
{
    memset(m, 0, sizeof *m);
    m->ny = ny, m->nx = nx, m->n_slots = n_slots;
    m->stride = stride ? stride : G_plane_stride_of(ny, nx);
    /* cuda_G_attach: want = (n_slots ? n_slots : 1) * stride * sizeof(float2) */
    m->planes = (n_slots ? n_slots : 1) * m->stride * F2;
    m->fft_work = fft_work;
    m->fft_estimated = !fft_work;
    m->fused = cu_fused_wanted();
}

size_t dev_model_work_bytes(const dev_model *m)
{
    size_t s = 0;
    for (int k = 0; k < DEV_N_BUF; k++)
        s += m->buf[k];
    return s;
}

size_t dev_model_bytes(const dev_model *m) { return m->planes + dev_model_work_bytes(m); }

/* One pass's sizes: grown into the model's buffers (dev_alloc keeps the larger). */
typedef struct {
    size_t b[DEV_N_BUF];
} need;

static void apply(dev_model *m, const need *n, const char *name, size_t view_bf, size_t sets, int f)
{
    size_t own = 0;
    for (int k = 0; k < DEV_N_BUF; k++) {
        own += n->b[k];
        if (n->b[k] > m->buf[k])
            m->buf[k] = n->b[k];
    }
    if (!name || m->n_stages >= DEV_MAX_STAGES)
        return;
    dev_stage *s = &m->stages[m->n_stages++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->view_bf = view_bf, s->sets = sets, s->f = f;
    s->bytes = own;
    s->after = dev_model_bytes(m);
}

static size_t fft_work(const dev_model *m, size_t nyf, size_t nxf, size_t batch, int c2c)
{
    return (m->fft_work ? m->fft_work : dev_fft_work_estimate)((int)nyf, (int)nxf, (int)batch, c2c);
}

/* chunk_of(f): CHUNK / f² BF pixels in flight, at least 1 (CHUNK = SSB_BLOCK). */
static size_t chunk_of(int f)
{
    size_t c = (size_t)SSB_BLOCK / (size_t)(f * f);
    return c ? c : 1;
}

void dev_model_phases(dev_model *m, const char *name, size_t view_bf, size_t n, int f, int want_phase, int mean,
                      int object_floats)
{
    need q;
    memset(&q, 0, sizeof q);
    if (f < 1)
        f = 1;
    const size_t nyf = (size_t)f * m->ny, nxf = (size_t)f * m->nx, ncols = nxf / 2 + 1;
    const size_t nb = nyf * ncols, npix = nyf * nxf, P = chunk_of(f);
    /* dev_phases: a fused loss makes the object's sum in a pass of its own (fused_init's buffers
     * and the sum's spectra, both kept) */
    const int fused = m->fused && want_phase && cu_fused_shape_ok(nyf, nxf);
    /* dpass_init: tab_n = set0 + 5 n_bf n doubles, set0 = 3 n_bf + nyf + nxf */
    q.b[DEV_TAB] = (3 * view_bf + nyf + nxf + 5 * view_bf * n) * sizeof(double);
    if (!fused || object_floats) {
        q.b[DEV_SPEC] = P * nb * F2;   /* spec: P nb float2 */
        q.b[DEV_VALID] = P;            /* valid: P bytes */
    }
    if (want_phase) {
        const size_t len = n * 2 * npix;
        if (!fused)
            q.b[DEV_REAL] = P * npix * sizeof(float);    /* real */
        q.b[DEV_SUMS] = len * sizeof(double);            /* sums */
        q.b[DEV_BPART] = len * sizeof(double);           /* bpart */
        q.b[DEV_FIN] = n * 2 * sizeof(double);           /* fin */
        if (fused) {                                     /* fused_init: xbuf, twb */
            q.b[DEV_XBUF] = cu_fused_xbuf_bytes(nyf, nxf, P);
            q.b[DEV_TW] = cu_fused_tw_bytes(nyf, nxf);
        } else
            q.b[DEV_WORK] = fft_work(m, nyf, nxf, P, 0); /* ensure_plan: C2R, batch P */
        if (mean)
            q.b[DEV_MEAN] = n * npix * sizeof(float);    /* dev_phases: mean, every set's */
    }
    if (object_floats) {
        q.b[DEV_ACC] = nb * 2 * sizeof(double);          /* dpass_init: acc, nb double2 */
        q.b[DEV_OBJ_F] = npix * F2;                      /* the object's spectrum F */
        q.b[DEV_OBJ_OUT] = (size_t)object_floats * npix * sizeof(float); /* its output plane */
        /* ensure_obj_plan: C2C, batch 1; plans_work: one area for both plans, the larger */
        size_t w = fft_work(m, nyf, nxf, 1, 1);
        q.b[DEV_WORK] = w > q.b[DEV_WORK] ? w : q.b[DEV_WORK];
    }
    apply(m, &q, name, view_bf, n, f);
}

/* band_upload: nd = 4 nb1 + 2 n_bf + 3 nrot n_bf doubles (off | slot | qx qy q2 | T | ktab). */
static size_t band_tab(size_t view_bf, size_t nb, size_t nrot)
{
    size_t nb1 = nb ? nb : 1;
    return (4 * nb1 + 2 * view_bf + 3 * nrot * view_bf) * sizeof(double);
}

void dev_model_band(dev_model *m, const char *name, size_t view_bf, size_t n, size_t nrot, size_t nb)
{
    need q;
    memset(&q, 0, sizeof q);
    if (!nrot)
        nrot = 1;
    const size_t nout = n * (nb ? nb : 1) * 4;
    q.b[DEV_TAB] = band_tab(view_bf, nb, nrot);
    q.b[DEV_ACC] = (n ? n : 1) * sizeof(cu_band_set);    /* dev_band: acc, the sets */
    q.b[DEV_SUMS] = nout * sizeof(double);               /* sums */
    q.b[DEV_BPART] = nout * sizeof(double);              /* bpart */
    /* band_launch: seg, 3 long long a segment; one process: one launch of G's whole blocks
     * (dist_segments: ceil(n_bf / 64) of them) */
    size_t nseg = (view_bf + SSB_BLOCK - 1) / SSB_BLOCK;
    q.b[DEV_SEG] = (nseg ? nseg : 1) * 3 * sizeof(long long);
    apply(m, &q, name, view_bf, n, 1);
}

void dev_model_band_power(dev_model *m, const char *name, size_t view_bf, size_t nb)
{
    need q;
    memset(&q, 0, sizeof q);
    q.b[DEV_TAB] = band_tab(view_bf, nb, 1);
    q.b[DEV_SUMS] = (nb ? nb : 1) * sizeof(double); /* dev_band_power: sums */
    apply(m, &q, name, view_bf, 0, 1);
}

size_t dev_preview_bf(size_t n_bf, size_t subset)
{
    if (!subset)
        subset = 256;
    if (subset >= n_bf)
        return n_bf;
    size_t step = n_bf / subset;
    return (n_bf + step - 1) / step;
}

void dev_model_session(const dev_session_in *in, dev_model *m)
{
    const size_t n_stored = in->n_stored ? in->n_stored : in->n_bf;
    dev_model_init(m, in->ny, in->nx, n_stored, 0, in->fft_work);
    const int f = in->f ? in->f : 2;
    const int obj = in->object_complex ? 2 : 1;
    if (in->fit) {
        size_t nfit = in->n_fit && in->n_fit < in->n_bf ? in->n_fit : in->n_bf;
        size_t coarse = in->n_coarse && in->n_coarse < nfit ? in->n_coarse : nfit;
        size_t sc = in->sets_coarse ? in->sets_coarse : 1, sf = in->sets_fit ? in->sets_fit : 1;
        if (in->band) {
            dev_model_band_power(m, "fit: band power", coarse, in->band_nb);
            dev_model_band(m, "fit: band batch (coarse)", coarse, sc, in->rot_coarse, in->band_nb);
            if (coarse < nfit) {
                dev_model_band_power(m, "fit: band power (all)", nfit, in->band_nb);
                dev_model_band(m, "fit: band batch (all)", nfit, sf, in->rot_fit, in->band_nb);
            }
        } else {
            dev_model_phases(m, "fit: loss batch (coarse)", coarse, sc, 1, 1, 0, 0);
            if (coarse < nfit)
                dev_model_phases(m, "fit: loss batch (all)", nfit, sf, 1, 1, 0, 0);
        }
        /* the standard errors: per group of the fit pixels (the largest, the farther half's
         * first) its band power and one pass with the design's points */
        if (in->sets_se && nfit >= 8 * FIT_SE_GROUPS) {
            size_t group_bf = fit_se_group_bf(nfit, FIT_SE_GROUPS / 2);
            if (in->band) {
                dev_model_band_power(m, "fit: standard errors' band power", group_bf, in->band_nb);
                dev_model_band(m, "fit: standard errors", group_bf, in->sets_se, in->rot_se, in->band_nb);
            } else
                dev_model_phases(m, "fit: standard errors", group_bf, in->rot_se > 1 ? 1 : in->sets_se, 1, 1, 0, 0);
        }
        if (in->branch_check)
            dev_model_phases(m, "fit: branch check", in->n_bf, 1, 1, 0, 0, 1);
        dev_model_phases(m, "fit: exact loss", in->n_bf, 1, 1, 1, 0, 0);
    }
    if (in->no_images)
        return;
    dev_model_phases(m, "drag preview", dev_preview_bf(in->n_bf, in->subset), 1, f, 0, 0, 1);
    dev_model_phases(m, "release", in->n_bf, 1, 1, 1, 0, obj);
    dev_model_phases(m, "object", in->n_bf, 1, f, 0, 0, obj);
}

void dev_model_start(size_t n_scans, size_t n_pix, size_t n_blocks, size_t n_chunks, size_t payload_bytes,
                     size_t n_bf, size_t blocks, size_t bf_chunk, dev_start *out)
{
    blocks = blocks ? blocks : 16;
    bf_chunk = bf_chunk ? bf_chunk : 256;
    blocks = blocks < n_blocks ? blocks : n_blocks;
    bf_chunk = bf_chunk < n_bf ? bf_chunk : n_bf;
    out->upload = payload_bytes + 4 * (n_blocks * n_pix + n_chunks) + n_blocks * n_pix + n_blocks * (3 * 8 + 4) +
                  64 * 1024 + 64 * 33 * 4 + 8;
    out->calib = out->upload + blocks * n_pix * 512 * 2 + n_pix * 8 + n_scans * 3 * 8 + 4 * n_pix;
    out->gbuild = out->upload + bf_chunk * n_scans * 4 + n_bf * (8 + 4);
}
