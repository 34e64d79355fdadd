/* gbuild.h — the G(q,k) object, shared by the G build and the SSB stage.
 *
 * Layout: BF-major half-plane spectra, one plane per stored BF pixel, (ny, nx/2+1) complex64.
 * Planes are padded to a multiple of 8 complex values so every plane starts 64-byte aligned and
 * one FFTW plan serves all of them (FFTW plans are tied to the alignment of their arrays). */
#ifndef SSB4D_GBUILD_H
#define SSB4D_GBUILD_H
#include "ssb4d.h"

#include <fftw3.h>

struct ssb4d_G {
    size_t ny, nx, nxh;     /* scan shape, nx/2+1 */
    size_t plane_stride;    /* complex values per plane (>= ny*nxh, multiple of 8) */
    size_t n_bf, n_stored;
    size_t det_shape[2];
    int32_t *bf_pix;        /* all selected BF pixels, flat detector index, BF order */
    int64_t *plane_of;      /* per BF pixel: stored plane index or -1 (aperture-inactive) */
    fftwf_complex *data;    /* n_stored planes */
    uint64_t *totals;       /* per BF pixel: exact sum of counts over the scan */
    double dc;              /* mean over BF of the totals (SPEC 5.3) */
    ssb4d_mem *mem;
    int is_view;            /* 1: data belongs to another G (ssb4d_G_subset) */
};

static inline const fftwf_complex *G_plane(const struct ssb4d_G *G, size_t ib)
{
    int64_t p = G->plane_of[ib];
    return p < 0 ? NULL : G->data + (size_t)p * G->plane_stride;
}

/* A view of G restricted to the BF pixels idx[0..n) (indices into G's BF order, ascending): it
 * shares G's spectra (no copy), has its own dc (the mean of its pixels' totals) and must be freed
 * with ssb4d_G_free before G. The fit evaluates its loss on such subsets (docs/fit.md). */
ssb4d_status ssb4d_G_subset(const struct ssb4d_G *G, const size_t *idx, size_t n, struct ssb4d_G **out,
                            ssb4d_err *err);

/* A(k) can be non-zero for this BF pixel under geometry g (conservative: the widest edge). */
int ssb4d_bf_pixel_active(const ssb4d_geometry *g, size_t det_cols, int32_t pix);
#endif
