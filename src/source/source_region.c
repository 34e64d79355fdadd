/* source_region.c — a source that presents a rectangle of another source's scan (SPEC §6.4: a
 * region refit builds its G from the data of that region only).
 *
 * The view owns nothing but its shape and origin: every read goes to the parent, whose reads do
 * the decoding (.qem) or mapping (.npy). Frames of a view row are consecutive frames of the
 * parent, so a frame read is one parent read per view row it touches. A column read takes the
 * parent's columns for whole scan rows and crops them, through a scratch buffer of at most the
 * caller's own output size (or one parent row, if that is larger), so the view never needs more
 * than a bounded transient. Counts are integers held exactly in float32, so a view's reads equal
 * those of a cropped copy of the data bit for bit. */
#include "common/err.h"
#include "source/source.h"

#include <stdlib.h>
#include <string.h>

/* Views are only useful for a region refit, which SPEC §6.4 asks for at 32x32 and above. */
#define REGION_MIN 32

ssb4d_status ssb4d_source_region(ssb4d_source *parent, size_t r0, size_t r1, size_t c0, size_t c1,
                                 ssb4d_source **out, ssb4d_err *err)
{
    if (!out)
        return ssb_fail(err, SSB4D_EINVAL, "ssb4d_source_region needs an output pointer");
    *out = NULL;
    if (!parent)
        return ssb_fail(err, SSB4D_EINVAL, "ssb4d_source_region needs a parent source");
    size_t shape[4];
    ssb4d_source_shape(parent, shape);
    if (r0 >= r1 || c0 >= c1)
        return ssb_fail(err, SSB4D_EINVAL,
                        "region rows [%zu, %zu) x cols [%zu, %zu) is empty", r0, r1, c0, c1);
    if (r1 > shape[0] || c1 > shape[1])
        return ssb_fail(err, SSB4D_EINVAL,
                        "region rows [%zu, %zu) x cols [%zu, %zu) is outside the %zux%zu scan",
                        r0, r1, c0, c1, shape[0], shape[1]);
    if (r1 - r0 < REGION_MIN || c1 - c0 < REGION_MIN)
        return ssb_fail(err, SSB4D_EINVAL,
                        "a region must be at least %dx%d scan positions; got %zux%zu", REGION_MIN,
                        REGION_MIN, r1 - r0, c1 - c0);
    shape[0] = r1 - r0;
    shape[1] = c1 - c0;
    return ssb_source_new_view(parent, r0, c0, shape, out, err);
}

ssb4d_status ssb_region_read_frames(ssb4d_source *parent, const size_t origin[2],
                                    const size_t vshape[4], size_t pos0, size_t npos,
                                    void *out, int as_float, ssb4d_err *err)
{
    size_t pshape[4];
    ssb4d_source_shape(parent, pshape);
    size_t vnx = vshape[1], fr = vshape[2] * vshape[3], done = 0;
    while (done < npos) {
        size_t t = pos0 + done, vr = t / vnx, vc = t % vnx;
        size_t run = vnx - vc < npos - done ? vnx - vc : npos - done; /* rest of this view row */
        size_t p = (origin[0] + vr) * pshape[1] + origin[1] + vc;
        ssb4d_status st = as_float ? ssb4d_source_read_frames_f32(parent, p, run, (float *)out + done * fr, err)
                                   : ssb4d_source_read_frames(parent, p, run, (uint32_t *)out + done * fr, err);
        if (st)
            return st;
        done += run;
    }
    return SSB4D_OK;
}

ssb4d_status ssb_region_read_columns(ssb4d_source *parent, const size_t origin[2],
                                     const size_t vshape[4], const int32_t *det_pix,
                                     size_t n_pix, size_t row0, size_t nrows, float *out,
                                     int threads, ssb4d_err *err)
{
    size_t pshape[4];
    ssb4d_source_shape(parent, pshape);
    size_t vnx = vshape[1], pnx = pshape[1], prow0 = origin[0] + row0;
    if (n_pix == 0 || nrows == 0)
        return SSB4D_OK;
    if (vnx == pnx) /* all columns: the parent's layout is the view's */
        return ssb_source_read_columns_mt(parent, det_pix, n_pix, prow0, nrows, out, threads, err);

    /* Rows per scratch block: the scratch holds n_pix x brows x pnx floats, at most the caller's
     * output (n_pix x nrows x vnx) unless one parent row alone is larger. */
    size_t brows = nrows * vnx / pnx;
    if (brows < 1)
        brows = 1;
    if (brows > nrows)
        brows = nrows;
    float *scratch = malloc(n_pix * brows * pnx * sizeof *scratch);
    if (!scratch)
        return ssb_fail(err, SSB4D_ENOMEM,
                        "out of memory for the region's column scratch (%zu pixels x %zu rows x %zu "
                        "columns)", n_pix, brows, pnx);
    ssb4d_status st = SSB4D_OK;
    for (size_t r = 0; r < nrows && !st; r += brows) {
        size_t nr = nrows - r < brows ? nrows - r : brows;
        st = ssb_source_read_columns_mt(parent, det_pix, n_pix, prow0 + r, nr, scratch, threads,
                                        err);
        for (size_t p = 0; p < n_pix && !st; p++)
            for (size_t i = 0; i < nr; i++)
                memcpy(out + (p * nrows + r + i) * vnx, scratch + (p * nr + i) * pnx + origin[1],
                       vnx * sizeof *out);
    }
    free(scratch);
    return st;
}
