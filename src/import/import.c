/* import.c — `ssb4d import`: a foreign-format acquisition streamed into a .qem (SPEC §3).
 *
 *   pass 1 (unless hot = NONE): per-pixel totals over the whole scan -> hot / dead pixels;
 *   pass 2: frames block by block -> flagged-pixel correction, exact narrowing -> qem writer.
 *
 * A reader thread fills the next block while the current one is converted and encoded, so the
 * disk and both cores stay busy. Memory: two read blocks (uint32), one converted block (uint16)
 * and the writer's chunk; nothing grows with the input. Any failure leaves no output. */
#include "common/err.h"
#include "common/clock.h"
#include "common/parallel.h"
#include "detector/hotpix.h"
#include "formats/framesrc.h"
#include "qem/qem.h"
#include "ssb4d_advanced.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define READ_BLOCK_BYTES ((size_t)32 << 20) /* one uint32 read block */

void ssb4d_import_params_default(ssb4d_import_params *p)
{
    memset(p, 0, sizeof *p);
    p->hot = SSB4D_HOT_MEDIAN;
    p->kv = p->semiangle_mrad = NAN;
    p->scan_step_A[0] = p->scan_step_A[1] = NAN;
    p->det_sampling_mrad[0] = p->det_sampling_mrad[1] = NAN;
    p->camera_length_mm = p->dwell_us = NAN;
    p->flip = -1;
}

/* ---- float data to electrons (SPEC §4: an explicit quantisation with a stated gain) ---------- */

/* One detector pixel's values v·g over the scan: sums of x − x0 (x0 its first value, so a large
 * offset does not swamp a small spread). */
typedef struct {
    double x0, sx, sxx;
    size_t n;
} pix_spread;

/* What quantising float data did: the error |round(v·g) − v·g| in electrons and how much the
 * values themselves vary over the scan, pixel by pixel (what SSB uses), summed in scan order by
 * the one reader thread (so the figures do not depend on the thread count). Pass 2 also keeps
 * the first valid value too large for the stored width, to name it as it was (the float and the
 * gain), not as the clamped count. */
typedef struct {
    double gain;         /* electrons per unit; 0: the source holds counts */
    double max_e, sum2_e;
    size_t n, clipped;   /* values seen; values below −0.5 e, stored as 0 */
    size_t n_stored;     /* values within the stored width (the figures are theirs) */
    pix_spread *pix;     /* P entries, owned */
    uint32_t cmin, cmax; /* the stored counts' range */
    const uint8_t *valid;/* pass 2: the valid pixels (NULL: no range check) */
    size_t P;            /* values per frame */
    uint32_t out_max;    /* the stored width's largest count */
    int have_big;        /* set once: the first valid value above out_max */
    size_t big_at;       /* its flat index (scan position * P + pixel) */
    float big_value;
} quantiser;

static ssb4d_status quantiser_init(quantiser *q, double gain, size_t P, uint32_t out_max, ssb4d_err *err)
{
    memset(q, 0, sizeof *q);
    q->gain = gain;
    q->P = P;
    q->out_max = out_max;
    q->cmin = UINT32_MAX;
    q->pix = calloc(P, sizeof *q->pix);
    return q->pix ? SSB4D_OK : ssb_fail(err, SSB4D_ENOMEM, "out of memory (quantisation figures)");
}

static void quantiser_free(quantiser *q)
{
    free(q->pix);
    q->pix = NULL;
}

/* The float frames in buf (n values, whole frames, read as float32 into the same 4-byte slots) as
 * electron counts, in place. Values too large for the stored width stay large: the conversion
 * refuses them, naming the value the quantiser kept. */
static void quantise(quantiser *q, uint32_t *buf, size_t n)
{
    const float *f = (const float *)(void *)buf;
    for (size_t i = 0, k = q->n % q->P; i < n; i++, k = k + 1 == q->P ? 0 : k + 1) {
        float v = f[i]; /* read before buf[i], the same 4 bytes, is overwritten */
        double x = (double)v * q->gain, r = nearbyint(x);
        uint32_t c;
        if (r < 0) {
            c = 0;
            q->clipped += x < -0.5;
        } else
            c = r > 4294967295.0 ? 4294967295u : (uint32_t)r;
        buf[i] = c;
        if (c > q->out_max) { /* refused in a valid pixel, replaced in a flagged one: not stored */
            if (q->valid && !q->have_big && q->valid[k]) {
                q->have_big = 1;
                q->big_at = q->n + i;
                q->big_value = v;
            }
            continue;
        }
        double e = fabs((double)c - x);
        q->max_e = e > q->max_e ? e : q->max_e;
        q->sum2_e += e * e;
        pix_spread *ps = &q->pix[k];
        if (ps->n == 0)
            ps->x0 = x;
        double d = x - ps->x0;
        ps->sx += d;
        ps->sxx += d * d;
        ps->n++;
        q->cmin = c < q->cmin ? c : q->cmin;
        q->cmax = c > q->cmax ? c : q->cmax;
        q->n_stored++;
    }
    q->n += n;
}

/* The values' variation over the scan: each pixel's variance about its own mean, pooled over
 * the pixels (the within-pixel sum of squares over all values; electrons²), and the mean. */
static void quantiser_spread(const quantiser *q, double *var, double *mean)
{
    double ss = 0, sum = 0;
    for (size_t k = 0; k < q->P; k++) {
        const pix_spread *ps = &q->pix[k];
        if (ps->n == 0)
            continue;
        double m = ps->sx / (double)ps->n, v = ps->sxx - m * ps->sx;
        ss += v > 0 ? v : 0;
        sum += ps->x0 * (double)ps->n + ps->sx;
    }
    *var = q->n_stored ? ss / (double)q->n_stored : 0;
    *mean = q->n_stored ? sum / (double)q->n_stored : 0;
}

/* Whether quantising destroyed the data: the rounding error (mean square, electrons²) is as
 * large as the values' own variation over the scan (pooled per detector pixel: the signal SSB
 * works on), so the stored counts carry more rounding than data. Counts divided by the right
 * gain round back with no error; float data with read noise lose the noise, a fraction of the
 * variation. A summed or normalised image taken as counts at --gain auto (every value within a
 * step of the smallest: all ones), or counts in tenths of an electron stored at gain 1, lose
 * everything. Returns 1 and says why in msg. */
static int quantisation_destroys(const quantiser *q, char *msg, size_t msg_n)
{
    if (q->n_stored == 0 || q->sum2_e == 0)
        return 0;
    double var, mean;
    quantiser_spread(q, &var, &mean);
    double mse = q->sum2_e / (double)q->n_stored, sd = sqrt(var);
    if (mse < var)
        return 0;
    if (sd > 0)
        snprintf(msg, msg_n, "at %.6g e per unit the rounding error (rms %.3g e) is %.2g times the "
                 "values' own variation over the scan (std %.3g e per detector pixel, mean %.6g e)",
                 q->gain, sqrt(mse), sqrt(mse) / sd, sd, mean);
    else
        snprintf(msg, msg_n, "at %.6g e per unit no value varies over the scan and each rounds "
                 "with an error of %.3g e rms", q->gain, sqrt(mse));
    return 1;
}

/* "every stored count 1" or "stored counts 0 to 3 only". */
static void stored_range(const quantiser *q, char *buf, size_t n)
{
    if (q->cmin == q->cmax)
        snprintf(buf, n, "every stored count %u", q->cmin);
    else
        snprintf(buf, n, "stored counts %u to %u only", q->cmin, q->cmax);
}

/* The refusal of a quantisation that destroys the data (why: quantisation_destroys's reason). */
static ssb4d_status quantisation_refusal(const char *path, const quantiser *q, const char *why,
                                         ssb4d_err *err)
{
    char range[64];
    stored_range(q, range, sizeof range);
    return ssb_fail(err, SSB4D_EINVAL, "%s: quantising would destroy the data: %s (%s); give the "
                    "electrons per unit of the data (--gain E), or fit / reconstruct / view the "
                    "file as it is", path, why, range);
}

/* --gain auto: integer-valued data need none (1); data on a grid of 1/g (counts divided by a
 * gain) are multiplied back by g, found from the smallest positive value and checked on every
 * value of a sample of frames (the first READ_BLOCK_BYTES of the scan). Anything else cannot be
 * estimated here: the user must state it. */
static ssb4d_status estimate_gain(framesrc *fs, const char *path, size_t N, size_t P, double *gain,
                                  char *how, size_t how_n, ssb4d_err *err)
{
    size_t nf = READ_BLOCK_BYTES / (P * sizeof(float));
    nf = nf < 1 ? 1 : nf > N ? N : nf;
    float *v = malloc(nf * P * sizeof *v);
    if (!v)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory (gain estimate)");
    ssb4d_status st = framesrc_read_f32(fs, 0, nf, v, err);
    int integer = 1;
    double vmin = INFINITY;
    for (size_t i = 0; !st && i < nf * P; i++) {
        if (v[i] != nearbyintf(v[i]))
            integer = 0;
        if (v[i] > 0 && v[i] < vmin)
            vmin = v[i];
    }
    if (!st && integer) {
        *gain = 1.0;
        snprintf(how, how_n, "estimated: every value of the first %zu frames is an integer", nf);
    } else if (!st && isfinite(vmin)) {
        double g = 1.0 / vmin, worst = 0;
        for (size_t i = 0; i < nf * P; i++) {
            double x = (double)v[i] * g, e = fabs(x - nearbyint(x));
            worst = e > worst ? e : worst;
        }
        /* On a grid, and the grid must say something: values that all lie within a step of
         * the smallest pass the grid test trivially and would all round to 1. */
        quantiser q = {0};
        char why[320], range[64];
        if (worst >= 1e-3) {
            st = ssb_fail(err, SSB4D_EINVAL, "cannot estimate the gain of %s: its values are neither "
                          "integers nor multiples of one step; give --gain E (electrons per unit)",
                          path);
        } else if (!(st = quantiser_init(&q, g, P, UINT32_MAX, err))) {
            quantise(&q, (uint32_t *)(void *)v, nf * P);
            if (quantisation_destroys(&q, why, sizeof why)) {
                stored_range(&q, range, sizeof range);
                st = ssb_fail(err, SSB4D_EINVAL, "%s: --gain auto refused: taking the smallest value "
                              "%.9g as one electron, %s (%s): not counts divided by a gain (a summed "
                              "or normalised image?); give --gain E if you know it, or fit / "
                              "reconstruct / view the file as it is", path, vmin, why, range);
            } else {
                *gain = g;
                snprintf(how, how_n, "estimated: the first %zu frames' values are multiples of %.9g "
                         "(within %.1e)", nf, vmin, worst * vmin);
            }
        }
        quantiser_free(&q);
    } else if (!st)
        st = ssb_fail(err, SSB4D_EINVAL, "cannot estimate the gain: the first %zu frames hold no "
                      "positive value; give --gain E (electrons per unit)", nf);
    free(v);
    return st;
}

/* ---- a one-block-ahead reader thread ------------------------------------------------------ */
typedef struct {
    framesrc *fs;
    quantiser *q;                    /* float sources: read as float32 and quantised */
    size_t n_scans, block, frame;   /* scans in all, scans per block, values per scan */
    uint32_t *buf[2];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t next;                     /* block index the thread reads next */
    int ready[2];                    /* buf[i] holds block `have[i]` */
    size_t have[2];
    int stop, failed;
    ssb4d_err err;
    ssb4d_status st;
} prefetch;

static void *prefetch_main(void *arg)
{
    prefetch *pf = arg;
    size_t nblocks = (pf->n_scans + pf->block - 1) / pf->block;
    for (size_t b = 0; b < nblocks; b++) {
        int slot = (int)(b & 1);
        pthread_mutex_lock(&pf->mu);
        while (pf->ready[slot] && !pf->stop)
            pthread_cond_wait(&pf->cv, &pf->mu);
        int stop = pf->stop;
        pthread_mutex_unlock(&pf->mu);
        if (stop)
            break;
        size_t t0 = b * pf->block, n = pf->n_scans - t0 < pf->block ? pf->n_scans - t0 : pf->block;
        ssb4d_err e = {0};
        ssb4d_status st;
        if (pf->q && pf->q->gain > 0) {
            st = framesrc_read_f32(pf->fs, t0, n, (float *)(void *)pf->buf[slot], &e);
            if (!st)
                quantise(pf->q, pf->buf[slot], n * pf->frame);
        } else
            st = framesrc_read(pf->fs, t0, n, pf->buf[slot], &e);
        pthread_mutex_lock(&pf->mu);
        if (st) {
            pf->failed = 1;
            pf->st = st;
            pf->err = e;
        } else {
            pf->ready[slot] = 1;
            pf->have[slot] = b;
        }
        pthread_cond_broadcast(&pf->cv);
        pthread_mutex_unlock(&pf->mu);
        if (st)
            break;
    }
    return NULL;
}

static ssb4d_status prefetch_start(prefetch *pf, framesrc *fs, quantiser *q, size_t n_scans, size_t block,
                                   size_t frame, ssb4d_mem *mem, ssb4d_err *err)
{
    memset(pf, 0, sizeof *pf);
    pf->fs = fs;
    pf->q = q;
    pf->n_scans = n_scans;
    pf->block = block;
    pf->frame = frame;
    for (int i = 0; i < 2; i++) {
        pf->buf[i] = ssb4d_mem_alloc(mem, block * frame * sizeof(uint32_t), "import read block", err);
        if (!pf->buf[i]) {
            ssb4d_mem_free(mem, pf->buf[0], 0);
            return SSB4D_ENOMEM;
        }
    }
    pthread_mutex_init(&pf->mu, NULL);
    pthread_cond_init(&pf->cv, NULL);
    if (pthread_create(&pf->thread, NULL, prefetch_main, pf) != 0) {
        pthread_mutex_destroy(&pf->mu);
        pthread_cond_destroy(&pf->cv);
        ssb4d_mem_free(mem, pf->buf[0], 0);
        ssb4d_mem_free(mem, pf->buf[1], 0);
        return ssb_fail(err, SSB4D_EINTERNAL, "cannot start the reader thread");
    }
    return SSB4D_OK;
}

/* Waits for block b; returns its buffer or NULL when the reader failed (error in err). */
static const uint32_t *prefetch_get(prefetch *pf, size_t b, ssb4d_status *st, ssb4d_err *err)
{
    int slot = (int)(b & 1);
    pthread_mutex_lock(&pf->mu);
    while (!(pf->ready[slot] && pf->have[slot] == b) && !pf->failed)
        pthread_cond_wait(&pf->cv, &pf->mu);
    const uint32_t *out = NULL;
    if (pf->ready[slot] && pf->have[slot] == b)
        out = pf->buf[slot];
    else {
        *st = pf->st;
        if (err)
            *err = pf->err;
    }
    pthread_mutex_unlock(&pf->mu);
    return out;
}

static void prefetch_release(prefetch *pf, size_t b)
{
    pthread_mutex_lock(&pf->mu);
    pf->ready[b & 1] = 0;
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
}

static void prefetch_stop(prefetch *pf, ssb4d_mem *mem)
{
    pthread_mutex_lock(&pf->mu);
    pf->stop = 1;
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
    pthread_join(pf->thread, NULL);
    pthread_mutex_destroy(&pf->mu);
    pthread_cond_destroy(&pf->cv);
    ssb4d_mem_free(mem, pf->buf[0], 0);
    ssb4d_mem_free(mem, pf->buf[1], 0);
}

/* ---- flagged pixels ----------------------------------------------------------------------- */

/* For each flagged pixel its valid 3x3 neighbours (at most 8; -1 ends the list). */
typedef struct {
    size_t n;          /* flagged pixels */
    int32_t *pix;      /* their flat indices, ascending */
    int32_t (*nb)[9];  /* neighbour lists */
} flag_list;

static ssb4d_status flag_list_build(const uint8_t *flagged, size_t rows, size_t cols, flag_list *fl,
                                    ssb4d_err *err)
{
    size_t P = rows * cols, n = 0;
    for (size_t k = 0; k < P; k++)
        n += flagged[k] != 0;
    fl->n = n;
    fl->pix = malloc((n ? n : 1) * sizeof *fl->pix);
    fl->nb = malloc((n ? n : 1) * sizeof *fl->nb);
    if (!fl->pix || !fl->nb)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory listing flagged pixels");
    size_t i = 0;
    for (size_t k = 0; k < P; k++) {
        if (!flagged[k])
            continue;
        fl->pix[i] = (int32_t)k;
        int m = 0;
        long r = (long)(k / cols), c = (long)(k % cols);
        for (long dr = -1; dr <= 1; dr++)
            for (long dc = -1; dc <= 1; dc++) {
                long rr = r + dr, cc = c + dc;
                if ((dr || dc) && rr >= 0 && cc >= 0 && rr < (long)rows && cc < (long)cols &&
                    !flagged[rr * (long)cols + cc])
                    fl->nb[i][m++] = (int32_t)(rr * (long)cols + cc);
            }
        fl->nb[i][m] = -1;
        i++;
    }
    return SSB4D_OK;
}

static void flag_list_free(flag_list *fl)
{
    free(fl->pix);
    free(fl->nb);
}

/* Median of the valid neighbours in one frame; the lower middle value for an even count, so the
 * result is always one of the measured counts. 0 when no neighbour is valid. */
static uint32_t neighbour_median(const uint32_t *frame, const int32_t *nb)
{
    uint32_t v[8];
    int m = 0;
    for (; m < 8 && nb[m] >= 0; m++) {
        uint32_t x = frame[nb[m]];
        int j = m;
        while (j > 0 && v[j - 1] > x) { /* insertion sort of at most 8 values */
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
    return m ? v[(m - 1) / 2] : 0;
}

/* ---- metadata ----------------------------------------------------------------------------- */

static cJSON *quantity(double value, const char *unit, const char *provenance, const char *evidence)
{
    cJSON *q = cJSON_CreateObject();
    cJSON_AddNumberToObject(q, "value", value);
    cJSON_AddStringToObject(q, "unit", unit);
    cJSON_AddStringToObject(q, "provenance", provenance);
    if (evidence)
        cJSON_AddStringToObject(q, "evidence", evidence);
    return q;
}

/* User-given values become calibration overrides (qem-format §9.4): explicit edits that win
 * over, and never replace, what the file recorded. */
static void add_overrides(cJSON *sci, const ssb4d_import_params *p)
{
    const char *ev[4] = {"ssb4d import --kv", "ssb4d import --semiangle", "ssb4d import --scan-step",
                         "ssb4d import --det-sampling"};
    for (int i = 0; i < 4; i++)
        ev[i] = p->evidence[i] ? p->evidence[i] : ev[i];
    cJSON *ov = cJSON_GetObjectItemCaseSensitive(sci, "calibration_overrides");
    if (!cJSON_IsObject(ov)) {
        cJSON_DeleteItemFromObjectCaseSensitive(sci, "calibration_overrides");
        ov = cJSON_AddObjectToObject(sci, "calibration_overrides");
    }
    if (p->kv > 0)
        cJSON_AddItemToObject(ov, "electron_source/accelerating_voltage",
                              quantity(p->kv, "kV", "user_override", ev[0]));
    if (p->semiangle_mrad > 0)
        cJSON_AddItemToObject(ov, "illumination_system/semi_convergence_angle",
                              quantity(p->semiangle_mrad, "mrad", "user_override", ev[1]));
    if (p->scan_step_A[0] > 0 && p->scan_step_A[1] > 0) {
        cJSON_AddItemToObject(ov, "scan_controller/regular_scan/pixel_size_row",
                              quantity(p->scan_step_A[0], "angstrom", "user_override", ev[2]));
        cJSON_AddItemToObject(ov, "scan_controller/regular_scan/pixel_size_column",
                              quantity(p->scan_step_A[1], "angstrom", "user_override", ev[2]));
    }
    if (p->camera_length_mm > 0)
        cJSON_AddItemToObject(ov, "imaging_system/camera_length",
                              quantity(p->camera_length_mm, "mm", "user_override", "ssb4d import --camera-length"));
    if (p->dwell_us > 0)
        cJSON_AddItemToObject(ov, "scan_controller/regular_scan/dwell_time",
                              quantity(p->dwell_us, "us", "user_override", "ssb4d import --dwell"));
    if (p->det_sampling_mrad[0] > 0 && p->det_sampling_mrad[1] > 0) {
        cJSON_AddItemToObject(ov, "imaging_system/reciprocal_pixel_size_row",
                              quantity(p->det_sampling_mrad[0], "mrad", "user_override", ev[3]));
        cJSON_AddItemToObject(ov, "imaging_system/reciprocal_pixel_size_column",
                              quantity(p->det_sampling_mrad[1], "mrad", "user_override", ev[3]));
    }
}

static cJSON *processing_record(const char *op, int changes)
{
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "operation", op);
    cJSON_AddBoolToObject(r, "changes_measurements", changes);
    return r;
}

static const char *dtype_name(int bytes) { return bytes == 1 ? "uint8" : bytes == 2 ? "uint16" : "uint32"; }

/* One frame to the stored dtype: valid values copied exactly, flagged pixels replaced by the
 * policy (a value too large for the dtype in a flagged pixel is a marker: stored as 0 and
 * counted in *markers). Returns the first valid pixel whose count does not fit, or SIZE_MAX. */
static size_t convert_frame(const uint32_t *in, uint16_t *o, size_t P, const uint8_t *valid,
                            const flag_list *fl, ssb4d_hot_policy hot, uint32_t out_max,
                            size_t *markers)
{
    for (size_t k = 0; k < P; k++) {
        uint32_t v = in[k];
        if (v > out_max && valid[k])
            return k;
        o[k] = (uint16_t)v;
    }
    for (size_t f = 0; f < fl->n; f++) {
        int32_t k = fl->pix[f];
        uint32_t v = hot == SSB4D_HOT_MEDIAN ? neighbour_median(in, fl->nb[f])
                   : hot == SSB4D_HOT_ZERO ? 0 : in[k];
        if (v > out_max) {
            v = 0;
            (*markers)++;
        }
        o[k] = (uint16_t)v;
    }
    return SIZE_MAX;
}

/* ---- the import ----------------------------------------------------------------------------- */

ssb4d_status ssb4d_import(const char *in_path, const char *out_path, const ssb4d_import_params *p,
                          ssb4d_import_report *rep, ssb4d_err *err)
{
    double t_start = ssb_clock_s();
    framesrc_opts fo;
    memset(&fo, 0, sizeof fo);
    ssb4d_status st = SSB4D_OK;
    if (p->format && (st = framesrc_format_parse(p->format, &fo.format, err)))
        return st;
    /* Refused before any reading: a bad microscope value, or an output that exists (the
     * writer checks again when it opens, after pass 1 has read the whole input). */
    const double given[] = {p->kv, p->semiangle_mrad, p->scan_step_A[0], p->scan_step_A[1],
                            p->det_sampling_mrad[0], p->det_sampling_mrad[1], p->camera_length_mm, p->dwell_us};
    static const char *given_name[] = {"kV", "semi-angle", "scan step", "scan step",
                                       "detector sampling", "detector sampling", "camera length", "dwell time"};
    for (int i = 0; i < 8; i++)
        if (!isnan(given[i]) && !(given[i] > 0 && isfinite(given[i])))
            return ssb_fail(err, SSB4D_EINVAL, "the %s must be positive and finite (got %g)",
                            given_name[i], given[i]);
    if (isnan(p->scan_step_A[0]) != isnan(p->scan_step_A[1]) ||
        isnan(p->det_sampling_mrad[0]) != isnan(p->det_sampling_mrad[1]))
        return ssb_fail(err, SSB4D_EINVAL, "give the scan step and detector sampling for both axes");
    struct stat sb0;
    if (!p->force && lstat(out_path, &sb0) == 0)
        return ssb_fail(err, SSB4D_EIO, "%.200s exists; use --force to replace it", out_path);
    fo.dataset = p->dataset;
    memcpy(fo.shape, p->shape, sizeof fo.shape);
    fo.dtype_bytes = p->dtype_bytes;
    fo.dtype_float = p->dtype_float;
    fo.big_endian = p->big_endian;
    fo.offset = p->offset;
    fo.more_paths = p->more_paths;
    fo.n_more_paths = p->n_more_paths;
    if (!isnan(p->gain) && !(p->gain >= 0 && isfinite(p->gain)))
        return ssb_fail(err, SSB4D_EINVAL, "the gain must be a positive number of electrons per unit "
                        "(got %g)", p->gain);

    framesrc *fs = NULL;
    st = framesrc_open(in_path, &fo, &fs, err);
    if (st)
        return st;
    size_t shape[4];
    framesrc_shape(fs, shape);
    size_t N = shape[0] * shape[1], P = shape[2] * shape[3];
    int src_bytes = framesrc_dtype_bytes(fs);
    if (rep) {
        memset(rep, 0, sizeof *rep);
        rep->input_bytes = N * P * (size_t)src_bytes; /* known before the first progress call */
        rep->gain = NAN;
    }
    /* Float data: stored as electrons at the stated (or estimated) gain, never silently. */
    quantiser qz = {0}, q1 = {0}; /* q1: pass 1's copy (only pass 2's figures are reported) */
    double gain = 0;
    char gain_how[96] = "";
    int is_float = framesrc_is_float(fs);
    if (is_float && p->gain == 0) {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s holds float values, not counts: ssb4d never quantises "
                      "silently; give --gain E (electrons per unit of the data; --gain auto estimates "
                      "it) to store electron counts, or fit / reconstruct / view the file as it is",
                      in_path);
        framesrc_close(fs);
        return st;
    }
    if (is_float) {
        if (isnan(p->gain))
            st = estimate_gain(fs, in_path, N, P, &gain, gain_how, sizeof gain_how, err);
        else {
            gain = p->gain;
            snprintf(gain_how, sizeof gain_how, "given");
        }
        if (st) {
            framesrc_close(fs);
            return st;
        }
    } else if (p->gain > 0 && p->gain != 1) {
        framesrc_close(fs);
        return ssb_fail(err, SSB4D_EINVAL, "%s holds counts: --gain applies to float data only", in_path);
    }
    int out_bytes = src_bytes == 1 && !is_float ? 1 : 2;
    uint32_t out_max = out_bytes == 1 ? 255u : 65535u;
    if (is_float && ((st = quantiser_init(&qz, gain, P, out_max, err)) ||
                     (st = quantiser_init(&q1, gain, P, out_max, err)))) {
        quantiser_free(&qz);
        framesrc_close(fs);
        return st;
    }
    size_t block = READ_BLOCK_BYTES / (P * sizeof(uint32_t));
    block = block < 1 ? 1 : block > N ? N : block;
    size_t nblocks = (N + block - 1) / block;
    int passes = p->hot == SSB4D_HOT_NONE ? 1 : 2;
    int nt = ssb_threads_resolve(p->threads);

    uint8_t *flagged = calloc(P, 1), *valid = malloc(P);
    uint64_t *totals = calloc(P, sizeof *totals);
    int32_t *found = malloc(P * sizeof *found);
    uint16_t *conv = ssb4d_mem_alloc(p->mem, block * P * sizeof *conv, "import converted block", err);
    flag_list fl = {0};
    qem_writer *w = NULL;
    prefetch pf;
    int pf_running = 0;
    size_t n_file = 0, n_found = 0, markers_zeroed = 0;
    if (!flagged || !valid || !totals || !found || !conv) {
        st = conv ? ssb_fail(err, SSB4D_ENOMEM, "out of memory") : SSB4D_ENOMEM;
        goto done;
    }
    const uint8_t *fmask = framesrc_flag_mask(fs);
    if (fmask)
        for (size_t k = 0; k < P; k++)
            if (fmask[k]) {
                flagged[k] = 1;
                n_file++;
            }

    /* Pass 1: totals of every pixel over the whole scan, then the hot/dead rule that the
     * calibration uses too (detector/hotpix.h). */
    if (passes == 2) {
        st = prefetch_start(&pf, fs, &q1, N, block, P, p->mem, err);
        if (st)
            goto done;
        pf_running = 1;
        for (size_t b = 0; b < nblocks && !st; b++) {
            const uint32_t *buf = prefetch_get(&pf, b, &st, err);
            if (!buf)
                break;
            size_t n = N - b * block < block ? N - b * block : block;
            /* Each thread owns a range of pixels, so the sums need no merging. */
#pragma omp parallel for num_threads(nt) schedule(static)
            for (size_t k0 = 0; k0 < P; k0 += 256) {
                size_t k1 = k0 + 256 < P ? k0 + 256 : P;
                for (size_t i = 0; i < n; i++)
                    for (size_t k = k0; k < k1; k++)
                        totals[k] += buf[i * P + k];
            }
            prefetch_release(&pf, b);
            if (p->progress && p->progress(p->progress_user, "import", (double)(b * block + n) / (double)(passes * N))) {
                st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
                break;
            }
        }
        prefetch_stop(&pf, p->mem);
        pf_running = 0;
        if (st)
            goto done;
        char why[320];
        if (is_float && quantisation_destroys(&q1, why, sizeof why)) {
            st = quantisation_refusal(in_path, &q1, why, err);
            goto done;
        }
        /* The file's own flagged pixels may hold marker values; keep them out of the rule's
         * neighbour medians by giving them their neighbours' level. */
        double *td = malloc(P * sizeof *td);
        if (!td) {
            st = ssb_fail(err, SSB4D_ENOMEM, "out of memory");
            goto done;
        }
        for (size_t k = 0; k < P; k++)
            td[k] = (double)totals[k]; /* exact: totals stay far below 2^53 */
        for (size_t k = 0; k < P; k++)
            if (flagged[k])
                td[k] = (double)(uint64_t)ssb_hotpix_neighbour_median(td, flagged, shape[2], shape[3],
                                                                      k / shape[3], k % shape[3]);
        size_t nf = ssb_hotpix_find_flagged(td, shape[2], shape[3], found);
        free(td);
        for (size_t i = 0; i < nf; i++)
            if (!flagged[found[i]]) {
                flagged[found[i]] = 1;
                n_found++;
            }
    }
    for (size_t k = 0; k < P; k++)
        valid[k] = !flagged[k];
    st = flag_list_build(flagged, shape[2], shape[3], &fl, err);
    if (st)
        goto done;

    /* Metadata the writer records (qem-format §9, §10). */
    framesrc_calibration fc;
    framesrc_calibration_of(fs, &fc);
    qem_meta_in mi;
    memset(&mi, 0, sizeof mi);
    mi.kv = fc.kv;
    mi.semiangle_mrad = fc.semiangle_mrad;
    mi.scan_step_A[0] = fc.scan_step_A[0];
    mi.scan_step_A[1] = fc.scan_step_A[1];
    mi.det_sampling[0] = fc.det_sampling_mrad[0];
    mi.det_sampling[1] = fc.det_sampling_mrad[1];
    mi.camera_length_mm = fc.camera_length_mm;
    mi.dwell_us = fc.dwell_us;

    mi.source_format = framesrc_format_name(fs);
    const cJSON *sm = framesrc_source_metadata(fs);
    mi.source_metadata = sm ? cJSON_Duplicate(sm, 1) : NULL;
    cJSON *proc = cJSON_CreateArray();
    if (src_bytes == 4 && !is_float) {
        cJSON *r = processing_record("exact_integer_narrowing", 0);
        cJSON_AddStringToObject(r, "source_dtype", "uint32");
        cJSON_AddStringToObject(r, "stored_dtype", "uint16");
        cJSON_AddItemToArray(proc, r);
    }
    if (is_float) { /* its error figures are filled in once pass 2 has seen every value */
        cJSON *qrec = processing_record("gain_quantisation", 1);
        cJSON_AddStringToObject(qrec, "source_dtype", "float32");
        cJSON_AddStringToObject(qrec, "stored_dtype", dtype_name(out_bytes));
        cJSON_AddNumberToObject(qrec, "gain_electrons_per_unit", qz.gain);
        cJSON_AddStringToObject(qrec, "gain_source", gain_how);
        cJSON_AddItemToArray(proc, qrec);
    }
    if (p->hot != SSB4D_HOT_NONE && fl.n) {
        cJSON *r = processing_record("flagged_pixel_replacement", 1);
        cJSON_AddStringToObject(r, "method", p->hot == SSB4D_HOT_MEDIAN ? "median_3x3_valid_neighbours" : "zero");
        cJSON_AddNumberToObject(r, "pixel_count", (double)fl.n);
        cJSON_AddItemToArray(proc, r);
    }
    mi.processing_extra = proc;
    cJSON *sci = qem_build_scientific_metadata(shape, &mi);
    if (!sci) {
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory building the metadata");
        goto done;
    }
    /* A detector sampling the file gives only as a spatial frequency (EMD / py4DSTEM A^-1,
     * kept as det_sampling_inv_A) becomes an angle with the beam energy stated here or by the
     * file (θ = λq), recorded as an override whose evidence says so. */
    ssb4d_import_params pq = *p;
    char q_ev[160];
    const cJSON *qs = sm ? cJSON_GetObjectItemCaseSensitive(sm, "det_sampling_inv_A") : NULL;
    double q_kv = p->kv > 0 ? p->kv : fc.kv, qa, qb;
    if (cJSON_IsString(qs) && !(fc.det_sampling_mrad[0] > 0) && !(p->det_sampling_mrad[0] > 0) &&
        q_kv > 0 && isfinite(q_kv) && sscanf(qs->valuestring, "%lf %lf", &qa, &qb) == 2 && qa > 0 && qb > 0) {
        double lam = ssb4d_wavelength_A(q_kv);
        pq.det_sampling_mrad[0] = 1e3 * lam * qa;
        pq.det_sampling_mrad[1] = 1e3 * lam * qb;
        snprintf(q_ev, sizeof q_ev, "the file's detector sampling %.9g 1/A at %.9g kV (%s)", qa, q_kv,
                 p->kv > 0 ? "stated at import" : "the file's");
        pq.evidence[3] = q_ev;
    }
    add_overrides(sci, &pq);
    cJSON *meta = cJSON_CreateObject();
    if (p->flip >= 0) /* the handedness the user stated: every reader of the .qem takes it */
        cJSON_AddBoolToObject(meta, "detector_flip", p->flip != 0);
    if (is_float)
        cJSON_AddStringToObject(meta, "source_value_type", "float32");
    cJSON *hp = cJSON_AddObjectToObject(meta, "hot_pixel_correction");
    cJSON_AddBoolToObject(hp, "applied", p->hot != SSB4D_HOT_NONE && fl.n);
    cJSON_AddStringToObject(hp, "policy", p->hot == SSB4D_HOT_MEDIAN ? "median" : p->hot == SSB4D_HOT_ZERO ? "zero" : "none");
    cJSON_AddNumberToObject(hp, "flagged_by_file", (double)n_file);
    cJSON_AddNumberToObject(hp, "flagged_by_totals", (double)n_found);
    cJSON *list = cJSON_AddArrayToObject(hp, "pixels");
    for (size_t i = 0; i < fl.n; i++) {
        cJSON *rc = cJSON_CreateArray();
        cJSON_AddItemToArray(rc, cJSON_CreateNumber((double)(fl.pix[i] / (int32_t)shape[3])));
        cJSON_AddItemToArray(rc, cJSON_CreateNumber((double)(fl.pix[i] % (int32_t)shape[3])));
        cJSON_AddItemToArray(list, rc);
    }
    if (src_bytes == 4 && !is_float)
        cJSON_AddStringToObject(meta, "source_dtype", "uint32");
    cJSON_AddStringToObject(meta, "writer", "ssb4d " SSB4D_VERSION_STRING);

    qem_writer_opts wo;
    memset(&wo, 0, sizeof wo);
    memcpy(wo.shape, shape, sizeof wo.shape);
    wo.dtype_bytes = out_bytes;
    wo.chunk_scans = p->chunk_scans;
    wo.valid = valid;
    wo.threads = p->threads;
    wo.force = p->force;
    wo.scientific_metadata = sci;
    wo.metadata = meta;
    st = qem_writer_open(out_path, &wo, &w, err);
    if (st)
        goto done;

    /* Pass 2: correct, narrow exactly, encode. */
    qz.valid = valid;
    st = prefetch_start(&pf, fs, &qz, N, block, P, p->mem, err);
    if (st)
        goto done;
    pf_running = 1;
    for (size_t b = 0; b < nblocks && !st; b++) {
        const uint32_t *buf = prefetch_get(&pf, b, &st, err);
        if (!buf)
            break;
        size_t t0 = b * block, n = N - t0 < block ? N - t0 : block;
        /* Frames are independent: converted in parallel; the error reported is that of the
         * first bad frame in scan order, whatever the thread count. */
        size_t bad_i = SIZE_MAX, bad_k = 0, markers = 0;
#pragma omp parallel for num_threads(nt) schedule(static) reduction(+ : markers) reduction(min : bad_i)
        for (size_t i = 0; i < n; i++) {
            size_t k = convert_frame(buf + i * P, conv + i * P, P, valid, &fl, p->hot, out_max, &markers);
            if (k != SIZE_MAX && i < bad_i)
                bad_i = i;
        }
        markers_zeroed += markers;
        if (bad_i != SIZE_MAX) {
            size_t dummy = 0;
            bad_k = convert_frame(buf + bad_i * P, conv + bad_i * P, P, valid, &fl, p->hot, out_max, &dummy);
            size_t at = (t0 + bad_i) * P + bad_k;
            if (is_float && qz.have_big && qz.big_at == at) /* the value as it was, not the count */
                st = ssb_fail(err, SSB4D_EFORMAT,
                              "%s: value %.9g at scan position (%zu, %zu), detector pixel (%zu, %zu) is "
                              "%.9g electrons at --gain %.9g, more than %s holds (%u); ssb4d does not "
                              "clip: give a smaller gain (at most %.6g for this value), or fit / reconstruct / "
                              "view the file as it is",
                              in_path, (double)qz.big_value, (t0 + bad_i) / shape[1],
                              (t0 + bad_i) % shape[1], bad_k / shape[3], bad_k % shape[3],
                              (double)qz.big_value * qz.gain, qz.gain, dtype_name(out_bytes), out_max,
                              (double)out_max / (double)qz.big_value);
            else
                st = ssb_fail(err, SSB4D_EFORMAT,
                              "%s: count %u at scan position (%zu, %zu), detector pixel (%zu, %zu) "
                              "does not fit %s; ssb4d stores counts exactly and does not clip",
                              in_path, buf[bad_i * P + bad_k], (t0 + bad_i) / shape[1],
                              (t0 + bad_i) % shape[1], bad_k / shape[3], bad_k % shape[3],
                              dtype_name(out_bytes));
        }
        prefetch_release(&pf, b);
        if (!st)
            st = qem_writer_append(w, conv, n, err);
        if (!st && p->progress &&
            p->progress(p->progress_user, "import", (double)((passes - 1) * N + t0 + n) / (double)(passes * N)))
            st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
    }
    prefetch_stop(&pf, p->mem);
    pf_running = 0;
    if (st)
        goto done;
    char why2[320];
    if (is_float && passes == 1 && quantisation_destroys(&qz, why2, sizeof why2)) {
        st = quantisation_refusal(in_path, &qz, why2, err);
        goto done;
    }
    if (markers_zeroed || is_float) {
        /* Recorded (§9.5): marker values of masked pixels are stored as 0, not as counts; a
         * quantisation's error, now that every value has been seen. */
        cJSON *s2 = cJSON_Duplicate(sci, 1), *m2 = cJSON_Duplicate(meta, 1);
        cJSON *pr = cJSON_GetObjectItemCaseSensitive(s2, "processing");
        if (markers_zeroed) {
            cJSON *r = processing_record("flagged_marker_zeroing", 0);
            cJSON_AddNumberToObject(r, "value_count", (double)markers_zeroed);
            cJSON_AddItemToArray(pr, r);
            cJSON_AddTrueToObject(m2, "flagged_markers_stored_as_zero");
        }
        for (cJSON *r = pr ? pr->child : NULL; is_float && r; r = r->next) {
            const cJSON *op = cJSON_GetObjectItemCaseSensitive(r, "operation");
            if (!cJSON_IsString(op) || strcmp(op->valuestring, "gain_quantisation"))
                continue;
            cJSON_AddNumberToObject(r, "max_error_electrons", qz.max_e);
            cJSON_AddNumberToObject(r, "rms_error_electrons", qz.n_stored ? sqrt(qz.sum2_e / (double)qz.n_stored) : 0.0);
            cJSON_AddNumberToObject(r, "negative_values_stored_as_zero", (double)qz.clipped);
            double var, mean;
            quantiser_spread(&qz, &var, &mean);
            cJSON_AddNumberToObject(r, "value_spread_electrons", sqrt(var));
        }
        st = qem_writer_set_metadata(w, s2, m2, err);
        if (st)
            goto done;
    }
    st = qem_writer_finish(w, err);
    w = NULL;
    if (st)
        goto done;
    if (rep) {
        memcpy(rep->shape, shape, sizeof rep->shape);
        rep->source_float = is_float;
        rep->gain = is_float ? qz.gain : NAN;
        snprintf(rep->gain_how, sizeof rep->gain_how, "%s", gain_how);
        rep->quant_max_e = qz.max_e;
        rep->quant_rms_e = qz.n_stored ? sqrt(qz.sum2_e / (double)qz.n_stored) : 0.0;
        rep->quant_clipped = qz.clipped;
        rep->source_dtype_bytes = src_bytes;
        rep->stored_dtype_bytes = out_bytes;
        rep->source_format = framesrc_format_name(fs);
        rep->flagged_file = n_file;
        rep->flagged_found = n_found;
        rep->input_bytes = N * P * (size_t)src_bytes;
        struct stat sb;
        rep->encoded_bytes = stat(out_path, &sb) == 0 ? (size_t)sb.st_size : 0;
        rep->seconds = ssb_clock_s() - t_start;
    }
done:
    if (pf_running)
        prefetch_stop(&pf, p->mem);
    qem_writer_abort(w);
    flag_list_free(&fl);
    ssb4d_mem_free(p->mem, conv, 0);
    free(flagged);
    free(valid);
    free(totals);
    free(found);
    quantiser_free(&qz);
    quantiser_free(&q1);
    framesrc_close(fs);
    return st;
}
