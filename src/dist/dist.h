/* dist.h — what the stages need of an MPI run (SPEC 9, 11): which BF pixels this rank owns, and
 * the reductions that give every rank the one-process bits.
 *
 * Two reduction shapes, matching the two orders of the one-process sums (docs/scale.md):
 *   chain of blocks   the loss and the band objective sum logical blocks of 64 BF pixels from
 *                     zero and add the block partials into the totals in block order. Ranks make
 *                     their partials at the same time and keep them; the running totals then pass
 *                     rank to rank, each adding its partials in order (dist_chain_*).
 *   sequential        the object, the band power and the parallax's bin power add pixel by pixel
 *                     into one accumulator: it passes rank to rank and each adds its pixels
 *                     (dist_seq_*). These passes take one process's time; they run once per image.
 * Every rank ends with the same bits, which are those of one process.
 *
 * A rank's pixels in a pass are [own_lo, own_hi) of the G it reads (gbuild.h). In a view of G (the
 * fit's subsets) that range need not start on a block: the pixels before the first block boundary
 * finish a block begun on an earlier rank, and go into the chain one by one (DIST_PIX).
 *
 * A rank that fails a pass must not leave the others waiting: every pass ends in dist_agree (or
 * a sequential hop carries the status), so all ranks return the error together. */
#ifndef SSB4D_DIST_H
#define SSB4D_DIST_H
#include "common/block.h"
#include "ssb4d_advanced.h"

#include <stddef.h>
#include <stdint.h>

#define DIST_BLOCK SSB_BLOCK /* the logical block of BF pixels (common/block.h) */

int dist_rank(const ssb4d_dist *d);
int dist_size(const ssb4d_dist *d);
/* This rank's index among the ranks on its host (0 .. ranks there − 1): its GPU's index. */
int dist_local_rank(const ssb4d_dist *d);

/* The BF pixels [lo, hi) of rank `rank` among `size` for n pixels: whole blocks of 64, as even as
 * blocks allow (the last rank may hold fewer, a rank may hold none when there are few blocks). */
void dist_split(size_t n, int size, int rank, size_t *lo, size_t *hi);

/* Every rank passes its status; all return the first failing rank's status. The failing rank
 * keeps its own message; the others get "rank R failed". */
ssb4d_status dist_agree(const ssb4d_dist *d, ssb4d_status st, ssb4d_err *err);

/* Bytes from rank `root` to all. */
ssb4d_status dist_bcast(const ssb4d_dist *d, void *buf, size_t bytes, int root, ssb4d_err *err);
/* Rank r's rows [lo_r, hi_r) of a table of row_bytes-sized rows, gathered into every rank's
 * table (the ranges tile the table in rank order). */
ssb4d_status dist_allgather_rows(const ssb4d_dist *d, void *table, size_t row_bytes, size_t lo, size_t hi,
                                 ssb4d_err *err);
/* Sums of counts (exact: integers) over ranks, in place. */
ssb4d_status dist_sum_u64(const ssb4d_dist *d, uint64_t *v, size_t n, ssb4d_err *err);
/* Bytes of every rank, in rank order, into out (size * bytes). */
ssb4d_status dist_allgather(const ssb4d_dist *d, const void *mine, size_t bytes, void *out, ssb4d_err *err);

/* ---- chain of blocks -------------------------------------------------------------------------- */

enum {
    DIST_BLOCK_FULL = 0, /* a block's partial: totals += partial */
    DIST_PIX = 1,        /* one pixel of a block begun on an earlier rank: open += pixel */
    DIST_CLOSE = 2,      /* that block ends here: totals += open */
    DIST_TAIL = 3        /* a block that goes on on a later rank: open = partial */
};

/* A pixel of a block begun on an earlier rank: its contribution (len doubles, zeroed by the
 * caller, in the chain's memory) as the pass would add it into a block partial started at zero.
 * Called by dist_chain_run once the open block has arrived, so these pixels (at most 63 per
 * pass) cost no memory of their own, only their time after the wait. */
typedef ssb4d_status (*dist_pix_fn)(void *user, size_t ib, double *out, ssb4d_err *err);

/* Where a chain's vectors live — its kept partials, the totals, the open block, a head pixel's
 * contribution — and the few operations the chain makes on them: the host's memory
 * (dist_vec_host, ctx: the ssb4d_mem), or a device's (the CUDA backend's, src/cuda/device.c,
 * ctx: its device). The messages go from host buffers: a device's vectors pass through to_host
 * and from_host. Every operation is elementwise, so the chain's sums are the same on either. */
enum { DIST_VEC_KEPT, DIST_VEC_OPEN, DIST_VEC_PIX };
typedef struct {
    int host; /* 1: the vectors are host memory (messages read and write them in place) */
    /* n doubles for what (DIST_VEC_*; DIST_VEC_OPEN zeroed); a failure sets err */
    ssb4d_status (*alloc)(void *ctx, int what, size_t n, double **out, ssb4d_err *err);
    void (*release)(void *ctx, int what, double *p, size_t n);
    ssb4d_status (*add)(void *ctx, double *dst, const double *src, size_t n, ssb4d_err *err); /* dst += src */
    ssb4d_status (*copy)(void *ctx, double *dst, const double *src, size_t n, ssb4d_err *err);
    ssb4d_status (*zero)(void *ctx, double *dst, size_t n, ssb4d_err *err);
    ssb4d_status (*to_host)(void *ctx, double *host, const double *v, size_t n, ssb4d_err *err);
    ssb4d_status (*from_host)(void *ctx, double *v, const double *host, size_t n, ssb4d_err *err);
} dist_vec_ops;
extern const dist_vec_ops dist_vec_host;

typedef struct {
    const ssb4d_dist *d;
    size_t len;          /* doubles per partial */
    const dist_vec_ops *ops;
    void *ctx;           /* ops' context (the host: the ssb4d_mem) */
    double *items;       /* kept partials (full blocks, the tail), len doubles each, in ops' memory */
    unsigned char *kind;
    size_t n, cap;
    size_t *head;        /* the pixels before the first block boundary, in order */
    size_t n_head;
    int head_closes;     /* the head ends its block here */
    int direct;          /* rank 0: full blocks go straight into the totals */
    dist_pix_fn pix;
    void *pix_user;
} dist_chain;

/* A segment of a pass: pixels [a, b) summed from zero into one partial, of kind DIST_*. */
typedef struct {
    size_t a, b;
    int kind;
    int close;           /* DIST_PIX only: the block ends after this pixel */
} dist_seg;

/* The segments of pixels [lo, hi) of a G of n pixels: blocks of 64 (one process: [0, n) in
 * blocks), the head of a block begun before lo pixel by pixel, a tail going on after hi. Returns
 * how many; segs has room for dist_segments_cap(lo, hi). */
size_t dist_segments(size_t n, size_t lo, size_t hi, dist_seg *segs);
/* The most segments [lo, hi) can make: its blocks, up to 63 head pixels, and a tail. */
static inline size_t dist_segments_cap(size_t lo, size_t hi) { return (hi - lo) / DIST_BLOCK + DIST_BLOCK + 2; }

/* For the segments this rank sums: room for the partials it keeps, and the head pixels, whose
 * contributions pix gives when the chain reaches this rank. The vectors are the host's. */
ssb4d_status dist_chain_init(dist_chain *c, const ssb4d_dist *d, size_t len, const dist_seg *segs, size_t nsegs,
                             dist_pix_fn pix, void *pix_user, ssb4d_mem *mem, ssb4d_err *err);
/* The same with the vectors in ops' memory (a device's). */
ssb4d_status dist_chain_init_on(dist_chain *c, const dist_vec_ops *ops, void *ctx, const ssb4d_dist *d, size_t len,
                                const dist_seg *segs, size_t nsegs, dist_pix_fn pix, void *pix_user, ssb4d_err *err);
/* 1: rank 0's full blocks, which the caller adds into its totals itself, in order (no copy). */
int dist_chain_direct(const dist_chain *c, int kind);
/* Otherwise, in segment order, for every segment but DIST_PIX (the pass skips those): the
 * segment's partial, the concatenation of parts[0..np) (lens[i] doubles each), is kept. */
void dist_chain_keep(dist_chain *c, const dist_seg *seg, const double *const *parts, const size_t *lens, size_t np);
/* Or the place of that segment's kept partial (len doubles in ops' memory), which the caller
 * fills itself (a device sums into it in place). */
double *dist_chain_slot(dist_chain *c, const dist_seg *seg);
/* The status agreement, then the chain: totals (len doubles in ops' memory; rank 0's direct adds
 * already in it) become the one-process totals on every rank. */
ssb4d_status dist_chain_run(dist_chain *c, ssb4d_status st, double *totals, ssb4d_err *err);
void dist_chain_free(dist_chain *c);

/* ---- sequential ------------------------------------------------------------------------------ */

/* The state of one sequential pass. */
typedef struct {
    int skip; /* a rank failed before the pass: no rank sends anything */
} dist_seq;

/* Before the rank's pixels: the status agreement (every rank calls this, failed or not; acc may
 * be NULL when st is a failure), then acc (len doubles) becomes the running sum of the ranks
 * before (rank 0: unchanged, it starts the sum). Returns a failure of any rank. */
ssb4d_status dist_seq_begin(const ssb4d_dist *d, dist_seq *sq, double *acc, size_t len, ssb4d_status st,
                            ssb4d_err *err);
/* The same in pieces, so that ranks work at once (a pipeline: while rank r adds its pixels into
 * piece i, rank r − 1 adds its own into piece i + 1). A piece's sum depends on no other piece's,
 * so the bits are those of one pass. dist_seq_agree once; then per piece, in the same order on
 * every rank, dist_seq_recv (the earlier ranks' running sum of the piece), the rank's adds, and
 * dist_seq_send (even after a failure: it carries it on); then dist_seq_finish gives every rank
 * the last rank's whole accumulator, or the first failure. */
ssb4d_status dist_seq_agree(const ssb4d_dist *d, dist_seq *sq, ssb4d_status st, ssb4d_err *err);
ssb4d_status dist_seq_recv(const ssb4d_dist *d, dist_seq *sq, double *part, size_t len, ssb4d_status st,
                           ssb4d_err *err);
ssb4d_status dist_seq_send(const ssb4d_dist *d, dist_seq *sq, const double *part, size_t len, ssb4d_status st,
                           ssb4d_err *err);
ssb4d_status dist_seq_finish(const ssb4d_dist *d, dist_seq *sq, double *acc, size_t len, ssb4d_status st,
                             ssb4d_err *err);
/* After them (every rank, whatever begin returned): acc goes on to the next rank with this rank's
 * status; every rank then gets the last rank's acc, or the first failure. */
ssb4d_status dist_seq_end(const ssb4d_dist *d, dist_seq *sq, double *acc, size_t len, ssb4d_status st,
                          ssb4d_err *err);
/* A whole sequential pass: fn adds this rank's pixels into acc (len doubles) after the earlier
 * ranks' (d NULL, one process: fn alone). Every rank calls it, failed or not (st: fn is then not
 * called); every rank ends with the last rank's acc, or the first failure. */
typedef ssb4d_status (*dist_pass_fn)(void *user, ssb4d_err *err);
ssb4d_status dist_seq_pass(const ssb4d_dist *d, double *acc, size_t len, ssb4d_status st, dist_pass_fn fn,
                           void *user, ssb4d_err *err);
#endif
