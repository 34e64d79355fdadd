/* gbuild.h — the G(q,k) object, shared by the G build and the SSB stage.
 *
 * Layout: BF-major half-plane spectra, one plane per stored BF pixel, (ny, nx/2+1) complex64.
 * Planes are padded to a multiple of 8 complex values so every plane starts 64-byte aligned and
 * one FFTW plan serves all of them (FFTW plans are tied to the alignment of their arrays). */
#ifndef SSB4D_GBUILD_H
#define SSB4D_GBUILD_H
#include "common/workspace.h"
#include "ssb4d_advanced.h"

#include <fftw3.h>

/* G is its layout (which BF pixel is which plane, and the planes' shape), its store (where the
 * planes are held: host float32 or half precision, rebuilt from the source, a backend's copy) and,
 * for a BF subset of another G, its view of that G's store. */

/* The store: the planes and what holds them. A view shares its G's store (the copy of the
 * pointers below), which that G owns and frees. */
typedef struct {
    fftwf_complex *data;    /* n_resident float32 planes (NULL when half) */
    uint16_t *data_h;       /* half precision: n_resident planes of binary16 pairs (else NULL),
                               each plane scaled by 2^-h_exp[p] into binary16's range */
    int8_t *h_exp;          /* per half plane: its power-of-two scale */
    size_t n_resident;      /* stored planes held in data / data_h */
    ssb4d_mem *mem;
    /* What a streamed plane is rebuilt from (streaming mode, SPEC 9): the source, the block of
     * scan rows decoded at a time and the threads. */
    ssb4d_source *src;
    size_t block_bytes;
    size_t group_planes;    /* float32 planes a consumer materialises at once (multiple of 64) */
    int threads;
    /* The backend whose copy of the stored planes serves G's passes (src/ssb/backend.h; NULL:
     * the host planes, the CPU), set by whoever made the copy, with its state and its free. */
    const struct ssb_backend *backend;
    struct ssb_dev *dev;
    void (*dev_free)(struct ssb_dev *dev);
} G_store;

/* A view (ssb_G_subset): G's pixels are a subset of another G's, whose store it reads. */
typedef struct {
    int is_view;            /* 1: the store belongs to another G */
    size_t *ib;             /* with a backend's copy: each pixel's index in the store's G (else NULL) */
} G_view;

struct ssb4d_G {
    /* the layout */
    size_t ny, nx, nxh;     /* scan shape, nx/2+1 */
    size_t plane_stride;    /* complex values per plane (>= ny*nxh, multiple of 8) */
    size_t n_bf, n_stored;
    size_t det_shape[2];
    int32_t *bf_pix;        /* all selected BF pixels, flat detector index, BF order */
    int64_t *plane_of;      /* per BF pixel: resident plane index, G_INACTIVE or G_STREAMED */
    double *totals;         /* per BF pixel: sum over the scan in scan order (exact for counts) */
    double dc;              /* mean over BF of the totals (SPEC 5.3) */
    G_store store;
    G_view view;
    /* A distributed G (src/dist/dist.h; NULL: everything here): this rank holds the planes of
     * the BF pixels [own_lo, own_hi) only; the others' stored pixels are G_REMOTE (n_remote). */
    const struct ssb4d_dist *dist;
    size_t own_lo, own_hi, n_remote;
};

#define G_INACTIVE (-1)     /* A(k) = 0 everywhere: no plane, φ_k = 0 */
#define G_STREAMED (-2)     /* stored but not resident: rebuilt from the source when needed */
#define G_REMOTE (-3)       /* stored on another rank (a distributed G) */

/* The BF pixels whose planes this process holds: [G_lo, G_hi) (all of them unless distributed).
 * Every pass sums over these only; a distributed pass then reduces across ranks (dist.h). */
static inline size_t G_lo(const struct ssb4d_G *G) { return G->dist ? G->own_lo : 0; }
static inline size_t G_hi(const struct ssb4d_G *G) { return G->dist ? G->own_hi : G->n_bf; }

/* The resident float32 plane of BF pixel ib, or NULL (inactive, streamed or half precision). */
static inline const fftwf_complex *G_plane(const struct ssb4d_G *G, size_t ib)
{
    int64_t p = G->plane_of[ib];
    return (p < 0 || !G->store.data) ? NULL : G->store.data + (size_t)p * G->plane_stride;
}

/* A float32 plane into half precision: scaled by a power of two so that its largest component is
 * at most 32768 (G's low frequencies hold sums of counts over the whole scan, far above binary16's
 * 65504), then rounded to nearest even; the scale is exact both ways. Returns the exponent. */
int G_half_store(const float *in, uint16_t *out, size_t n);
void G_half_load(const uint16_t *in, int e, float *out, size_t n);

/* BF pixel ib has a stored spectrum (resident, streamed or half). */
static inline int G_stored(const struct ssb4d_G *G, size_t ib) { return G->plane_of[ib] != G_INACTIVE; }

/* Every stored plane is resident in float32 (no group loading needed). */
static inline int G_resident_f32(const struct ssb4d_G *G)
{
    return (G->store.data != NULL || (G->dist && !G->store.data_h)) && G->store.n_resident + G->n_remote == G->n_stored;
}

/* Float32 planes of the BF pixels [ib0, ib1) for one pass of a consumer (loss, object, band):
 * resident float32 planes are pointed at in place; half-precision planes are converted and
 * streamed planes rebuilt from the source into the group's own buffer, with the bits the full
 * build gives. planes[ib - ib0] is NULL for inactive pixels. */
typedef struct {
    const fftwf_complex **planes; /* group_planes entries */
    fftwf_complex *buf;           /* group_planes float32 planes (NULL when G is resident f32) */
    size_t cap;                   /* BF pixels per group */
    size_t ib0, ib1;
    ssb4d_mem *mem;
} G_group;

ssb4d_status G_group_init(const struct ssb4d_G *G, ssb4d_mem *mem, G_group *gr, ssb4d_err *err);
ssb4d_status G_group_load(const struct ssb4d_G *G, size_t ib0, size_t ib1, G_group *gr, ssb4d_err *err);
void G_group_free(G_group *gr);
/* BF pixels per group for G (all of them when G is resident float32). */
size_t G_group_span(const struct ssb4d_G *G);

/* A view of G restricted to the BF pixels idx[0..n) (indices into G's BF order, ascending): it
 * shares G's spectra (no copy), has its own dc (the mean of its pixels' totals) and must be freed
 * with ssb4d_G_free before G. The fit evaluates its loss on such subsets (docs/fit.md). */
ssb4d_status ssb_G_subset(const struct ssb4d_G *G, const size_t *idx, size_t n, struct ssb4d_G **out,
                          ssb4d_err *err);

/* ---- workspace (common/workspace.h): what the build and a consumer's pass allocate ---------- */

/* Complex values per plane of an ny x nx scan: ny * (nx/2+1), padded to a multiple of 8. */
size_t G_plane_stride_of(size_t ny, size_t nx);
/* Bytes of one stored plane: float32, or half precision (binary16 pairs). */
size_t G_plane_bytes_of(size_t ny, size_t nx, int half);
/* Float32 planes per group for group_bytes (a multiple of 64, at least 64). */
size_t G_group_planes_of(size_t ny, size_t nx, size_t group_bytes);

/* build_planes on n BF pixels: the decode block of `rows` scan rows, and the per-thread FFT
 * scratch (one aligned input row and one aligned output row per thread). */
typedef struct {
    size_t rows, block;               /* rows per block, its bytes */
    size_t in_bytes, scratch_stride;  /* per thread: the input row, input + output rows */
    size_t scratch;                   /* all threads' scratch */
} gbuild_block_ws;
gbuild_block_ws gbuild_block_sizes(size_t ny, size_t nx, size_t n, size_t block_bytes, int nt);

/* How a G is held, for the queries below. */
typedef struct {
    size_t ny, nx, n_bf, n_stored;
    size_t n_resident;   /* stored planes resident (half or float32) */
    size_t group_planes; /* G_group_planes_of */
    size_t block_bytes;
    int half, threads;   /* threads resolved */
} gbuild_ws_shape;

/* ssb4d_gbuild: the resident planes (left live), then the build in one pass or in groups. */
void gbuild_workspace(const gbuild_ws_shape *s, ws_sink *out);
/* ssb4d_G_free: the resident planes go. */
void gbuild_free_workspace(const gbuild_ws_shape *s, ws_sink *out);
/* One consumer pass over a G that is not resident in float32: the group's buffer (kept in the
 * cache) and, when planes are streamed, their rebuild. Which streamed pixels a group holds
 * depends on where they lie, and the decode block is not monotone in their number (59 pixels
 * can need more bytes than 64), so the query takes the count up to a group's that needs the
 * largest block: a bound, reached when the streamed pixels fall that way. */
void gbuild_pass_workspace(const gbuild_ws_shape *s, ws_sink *out);

/* A(k) can be non-zero for this BF pixel under geometry g (conservative: the widest edge). */
int ssb_bf_pixel_active(const ssb4d_geometry *g, size_t det_cols, int32_t pix);
/* ---- a G whose planes are built elsewhere (the GPU's start, src/cuda/gstart.c) ------------- */

/* ssb4d_gbuild's checks, layout and resident float32 planes (allocated, not filled; totals 0),
 * for the plain case only: one process, float32, every stored plane resident (else SSB4D_EINVAL:
 * build it with ssb4d_gbuild). o is not NULL. */
ssb4d_status gbuild_layout(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix, size_t n_bf,
                           const ssb4d_gbuild_opts *o, ssb4d_mem *mem, struct ssb4d_G **out, ssb4d_err *err);
/* Once its planes (and padding) and totals are filled, st the filling's status: dc and its check,
 * as ssb4d_gbuild ends. Takes G over (freed on failure); *out = G on success. */
ssb4d_status gbuild_layout_finish(struct ssb4d_G *G, ssb4d_status st, const ssb4d_gbuild_opts *o,
                                  struct ssb4d_G **out, ssb4d_err *err);
#endif
