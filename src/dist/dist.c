/* dist.c — the MPI context and the reductions of dist.h. Without MPI (SSB4D_HAVE_MPI unset) no
 * context can be made, so the stages never reach these calls; they fail cleanly if they do. */
#include "dist/dist.h"
#include "common/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SSB4D_HAVE_MPI
#include <mpi.h>

/* What this rank sent and how long it spent in messages (ssb4d_dist_traffic): counted through
 * a pointer, since the stages hold the context const. */
typedef struct {
    uint64_t bytes, messages;
    double seconds;
} traffic;

struct ssb4d_dist {
    MPI_Comm comm; /* a duplicate of the caller's: our messages never meet theirs */
    int rank, size;
    int local;     /* this rank's index among the ranks of its host (a GPU per rank) */
    traffic *t;
};

static void count(const ssb4d_dist *d, size_t bytes, double t0)
{
    d->t->bytes += bytes;
    d->t->messages++;
    d->t->seconds += MPI_Wtime() - t0;
}

void ssb4d_dist_traffic(const ssb4d_dist *d, uint64_t *bytes, uint64_t *messages, double *seconds)
{
    *bytes = d ? d->t->bytes : 0;
    *messages = d ? d->t->messages : 0;
    *seconds = d ? d->t->seconds : 0.0;
}

ssb4d_status ssb4d_dist_mpi(const void *comm, ssb4d_dist **out, ssb4d_err *err)
{
    *out = NULL;
    int up = 0;
    MPI_Initialized(&up);
    if (!up)
        return ssb_fail(err, SSB4D_EINVAL, "MPI is not initialised (call MPI_Init first)");
    ssb4d_dist *d = calloc(1, sizeof *d);
    traffic *t = calloc(1, sizeof *t);
    if (!d || !t) {
        free(d), free(t);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    d->t = t;
    MPI_Comm c = comm ? *(const MPI_Comm *)comm : MPI_COMM_WORLD;
    if (MPI_Comm_dup(c, &d->comm) != MPI_SUCCESS) {
        free(d->t), free(d);
        return ssb_fail(err, SSB4D_EINTERNAL, "MPI_Comm_dup failed");
    }
    MPI_Comm_rank(d->comm, &d->rank);
    MPI_Comm_size(d->comm, &d->size);
    /* The ranks that share this host, ordered as in comm: the CUDA backend gives each its own
     * device (cuda_G_attach). */
    MPI_Comm host;
    if (MPI_Comm_split_type(d->comm, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &host) == MPI_SUCCESS) {
        MPI_Comm_rank(host, &d->local);
        MPI_Comm_free(&host);
    }
    *out = d;
    return SSB4D_OK;
}

void ssb4d_dist_free(ssb4d_dist *d)
{
    if (!d)
        return;
    int done = 0;
    MPI_Finalized(&done);
    if (!done)
        MPI_Comm_free(&d->comm);
    free(d->t);
    free(d);
}

int ssb4d_dist_rank(const ssb4d_dist *d) { return d ? d->rank : 0; }
int ssb4d_dist_size(const ssb4d_dist *d) { return d ? d->size : 1; }
int dist_rank(const ssb4d_dist *d) { return d ? d->rank : 0; }
int dist_size(const ssb4d_dist *d) { return d ? d->size : 1; }
int dist_local_rank(const ssb4d_dist *d) { return d ? d->local : 0; }

/* MPI counts are ints: large buffers go in pieces of at most 2^27 elements. */
#define PIECE ((size_t)1 << 27)

static int send_d(const ssb4d_dist *d, const double *v, size_t n, int to)
{
    for (size_t i = 0; i < n || (n == 0 && i == 0); i += PIECE) {
        size_t m = n - i < PIECE ? n - i : PIECE;
        double t0 = MPI_Wtime();
        if (MPI_Send(v + i, (int)m, MPI_DOUBLE, to, 7, d->comm) != MPI_SUCCESS)
            return -1;
        count(d, m * sizeof *v, t0);
        if (n == 0)
            break;
    }
    return 0;
}

static int recv_d(const ssb4d_dist *d, double *v, size_t n, int from)
{
    for (size_t i = 0; i < n || (n == 0 && i == 0); i += PIECE) {
        size_t m = n - i < PIECE ? n - i : PIECE;
        double t0 = MPI_Wtime();
        if (MPI_Recv(v + i, (int)m, MPI_DOUBLE, from, 7, d->comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return -1;
        count(d, 0, t0); /* the wait; the sender counts the bytes */
        d->t->messages--;
        if (n == 0)
            break;
    }
    return 0;
}

static int bcast_bytes(const ssb4d_dist *d, void *buf, size_t bytes, int root)
{
    char *p = buf;
    for (size_t i = 0; i < bytes; i += PIECE) {
        size_t m = bytes - i < PIECE ? bytes - i : PIECE;
        double t0 = MPI_Wtime();
        if (MPI_Bcast(p + i, (int)m, MPI_BYTE, root, d->comm) != MPI_SUCCESS)
            return -1;
        count(d, d->rank == root ? m * (size_t)(d->size - 1) : 0, t0); /* the root's sends, as if direct */
    }
    return 0;
}

ssb4d_status dist_agree(const ssb4d_dist *d, ssb4d_status st, ssb4d_err *err)
{
    /* (status, −rank) under MAXLOC-like MAX: the largest status; ties to the lowest rank */
    int mine[2] = {(int)st, st ? d->rank : d->size}, all[2];
    int v = mine[0] * 65536 + (65535 - (mine[1] < 65535 ? mine[1] : 65535));
    double t0 = MPI_Wtime();
    if (MPI_Allreduce(&v, &all[0], 1, MPI_INT, MPI_MAX, d->comm) != MPI_SUCCESS)
        return ssb_fail(err, SSB4D_EINTERNAL, "MPI_Allreduce failed");
    count(d, sizeof v, t0);
    int code = all[0] / 65536, who = 65535 - all[0] % 65536;
    if (!code)
        return SSB4D_OK;
    if (st)
        return st; /* ours: our own message */
    return ssb_fail(err, (ssb4d_status)code, "rank %d of %d failed (its message says why)", who, d->size);
}

ssb4d_status dist_bcast(const ssb4d_dist *d, void *buf, size_t bytes, int root, ssb4d_err *err)
{
    return bcast_bytes(d, buf, bytes, root) ? ssb_fail(err, SSB4D_EINTERNAL, "MPI_Bcast failed") : SSB4D_OK;
}

ssb4d_status dist_allgather(const ssb4d_dist *d, const void *mine, size_t bytes, void *out, ssb4d_err *err)
{
    if (bytes > (size_t)1 << 30)
        return ssb_fail(err, SSB4D_EINTERNAL, "allgather of %zu bytes per rank", bytes);
    if (MPI_Allgather(mine, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, d->comm) != MPI_SUCCESS)
        return ssb_fail(err, SSB4D_EINTERNAL, "MPI_Allgather failed");
    return SSB4D_OK;
}

ssb4d_status dist_allgather_rows(const ssb4d_dist *d, void *table, size_t row_bytes, size_t lo, size_t hi,
                                 ssb4d_err *err)
{
    /* every rank's range from everyone, then each range broadcast from its owner */
    size_t mine[2] = {lo, hi};
    size_t *all = malloc(2 * (size_t)d->size * sizeof *all);
    if (!all)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    ssb4d_status st = dist_allgather(d, mine, sizeof mine, all, err);
    for (int r = 0; !st && r < d->size; r++)
        if (all[2 * r + 1] > all[2 * r] &&
            bcast_bytes(d, (char *)table + all[2 * r] * row_bytes, (all[2 * r + 1] - all[2 * r]) * row_bytes, r))
            st = ssb_fail(err, SSB4D_EINTERNAL, "MPI_Bcast failed");
    free(all);
    return st;
}

ssb4d_status dist_sum_u64(const ssb4d_dist *d, uint64_t *v, size_t n, ssb4d_err *err)
{
    for (size_t i = 0; i < n; i += PIECE) {
        size_t m = n - i < PIECE ? n - i : PIECE;
        if (MPI_Allreduce(MPI_IN_PLACE, v + i, (int)m, MPI_UINT64_T, MPI_SUM, d->comm) != MPI_SUCCESS)
            return ssb_fail(err, SSB4D_EINTERNAL, "MPI_Allreduce failed");
    }
    return SSB4D_OK;
}

/* ---- chain of blocks -------------------------------------------------------------------------- */

ssb4d_status dist_chain_run(dist_chain *c, ssb4d_status st, double *totals, ssb4d_err *err)
{
    const ssb4d_dist *d = c->d;
    const dist_vec_ops *v = c->ops ? c->ops : &dist_vec_host;
    const size_t len = c->len;
    /* open: the open block's partial (the host's has its flag after it); a device's vectors go
     * through T and O (totals, open and its flag) on the host; px: a head pixel's contribution */
    double *open = NULL, *T = NULL, *O = NULL, *px = NULL;
    if (!st)
        st = v->alloc(c->ctx, DIST_VEC_OPEN, len, &open, err);
    if (!st && !v->host && !(T = malloc((2 * len + 1) * sizeof *T)))
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory (reduction)");
    if (!st && !v->host && c->n_head) /* the host's, after the wait (its memory is counted then) */
        st = v->alloc(c->ctx, DIST_VEC_PIX, len, &px, err);
    if ((st = dist_agree(d, st, err))) {
        if (open)
            v->release(c->ctx, DIST_VEC_OPEN, open, len);
        if (px)
            v->release(c->ctx, DIST_VEC_PIX, px, len);
        free(T);
        return st;
    }
    if (v->host)
        T = totals, O = open;
    else
        O = T + len;
    int ok = 1; /* the messages went through (an MPI failure ends the job's messages here) */
    ssb4d_status pst = SSB4D_OK; /* an operation of the chain that failed: the job cannot go on */
    double flag = 0;
    if (d->rank > 0) {
        ok = !recv_d(d, T, len, d->rank - 1) && !recv_d(d, O, len + 1, d->rank - 1);
        flag = O[len];
        if (ok && flag < 0) /* an earlier rank's chain failed: this one passes the word on */
            pst = ssb_fail(err, SSB4D_EINTERNAL, "the reduction failed on an earlier rank");
        if (ok && !pst && !v->host && !(pst = v->from_host(c->ctx, totals, T, len, err)))
            pst = v->from_host(c->ctx, open, O, len, err);
    }
    /* the head: each pixel into the open block, in order, then the block closes */
    if (ok && !pst && c->n_head && v->host)
        pst = v->alloc(c->ctx, DIST_VEC_PIX, len, &px, err);
    for (size_t i = 0; ok && !pst && i < c->n_head; i++) {
        if (!(pst = v->zero(c->ctx, px, len, err)) && !(pst = c->pix(c->pix_user, c->head[i], px, err)))
            pst = v->add(c->ctx, open, px, len, err);
        flag = 1;
    }
    if (px)
        v->release(c->ctx, DIST_VEC_PIX, px, len);
    if (ok && !pst && c->n_head && c->head_closes) {
        if (!(pst = v->add(c->ctx, totals, open, len, err)))
            pst = v->zero(c->ctx, open, len, err);
        flag = 0;
    }
    for (size_t i = 0; ok && !pst && i < c->n; i++) {
        const double *p = c->items + i * len;
        if (c->kind[i] == DIST_BLOCK_FULL)
            pst = v->add(c->ctx, totals, p, len, err);
        else { /* DIST_TAIL */
            pst = v->copy(c->ctx, open, p, len, err);
            flag = 1;
        }
    }
    /* After the agreement only memory or a device can fail. The state still goes on, marked
     * (flag −1), so that no later rank waits for it; the agreement below then stops every rank. */
    if (ok && d->rank < d->size - 1) {
        if (!pst && !v->host && !(pst = v->to_host(c->ctx, T, totals, len, err)))
            pst = v->to_host(c->ctx, O, open, len, err);
        O[len] = pst ? -1.0 : flag;
        ok = !send_d(d, T, len, d->rank + 1) && !send_d(d, O, len + 1, d->rank + 1);
    } else if (ok && !pst && flag != 0)
        pst = v->add(c->ctx, totals, open, len, err); /* the last block, begun on an earlier rank */
    v->release(c->ctx, DIST_VEC_OPEN, open, len);
    if (ok) {
        ssb4d_status a = dist_agree(d, pst, err);
        if (a && !pst)
            pst = a;
        ok = !a;
    }
    if (ok && !v->host && d->rank == d->size - 1)
        ok = !(pst = v->to_host(c->ctx, T, totals, len, err));
    if (ok)
        ok = !bcast_bytes(d, T, len * sizeof *T, d->size - 1);
    if (ok && !v->host)
        ok = !(pst = v->from_host(c->ctx, totals, T, len, err));
    if (!v->host)
        free(T);
    if (pst)
        return pst;
    return ok ? SSB4D_OK : ssb_fail(err, SSB4D_EINTERNAL, "an MPI message of the reduction failed");
}

/* ---- sequential ------------------------------------------------------------------------------ */

ssb4d_status dist_seq_agree(const ssb4d_dist *d, dist_seq *sq, ssb4d_status st, ssb4d_err *err)
{
    ssb4d_status a = dist_agree(d, st, err);
    sq->skip = a != SSB4D_OK;
    return a;
}

ssb4d_status dist_seq_recv(const ssb4d_dist *d, dist_seq *sq, double *part, size_t len, ssb4d_status st,
                           ssb4d_err *err)
{
    if (sq->skip || d->rank == 0)
        return st;
    double s[2];
    if (recv_d(d, s, 2, d->rank - 1) || (s[0] == 0 && recv_d(d, part, len, d->rank - 1)))
        return ssb_fail(err, SSB4D_EINTERNAL, "an MPI message of the reduction failed");
    if (s[0] != 0 && !st) /* an earlier rank failed: forwarded, this rank stops adding */
        return ssb_fail(err, (ssb4d_status)(int)s[0], "rank %d of %d failed (its message says why)", (int)s[1],
                        d->size);
    return st;
}

/* The rank that failed first: the one an earlier rank's message names, else this one. */
static int failed_rank(const ssb4d_dist *d, const ssb4d_err *err)
{
    int r;
    if (err && sscanf(err->msg, "rank %d of", &r) == 1)
        return r;
    return d->rank;
}

ssb4d_status dist_seq_send(const ssb4d_dist *d, dist_seq *sq, const double *part, size_t len, ssb4d_status st,
                           ssb4d_err *err)
{
    if (sq->skip || d->rank == d->size - 1)
        return st;
    double s[2] = {(double)st, st ? (double)failed_rank(d, err) : 0.0};
    if (send_d(d, s, 2, d->rank + 1) || (!st && send_d(d, part, len, d->rank + 1)))
        return ssb_fail(err, SSB4D_EINTERNAL, "an MPI message of the reduction failed");
    return st;
}

ssb4d_status dist_seq_finish(const ssb4d_dist *d, dist_seq *sq, double *acc, size_t len, ssb4d_status st,
                             ssb4d_err *err)
{
    if (sq->skip)
        return st;
    double s[2] = {(double)st, st ? (double)failed_rank(d, err) : 0.0};
    int ok = !bcast_bytes(d, s, sizeof s, d->size - 1);
    if (ok && s[0] == 0)
        ok = !bcast_bytes(d, acc, len * sizeof *acc, d->size - 1);
    if (!ok)
        return ssb_fail(err, SSB4D_EINTERNAL, "an MPI message of the reduction failed");
    if (s[0] != 0 && !st)
        return ssb_fail(err, (ssb4d_status)(int)s[0], "rank %d of %d failed (its message says why)", (int)s[1],
                        d->size);
    return st;
}

#else /* no MPI in this build */

ssb4d_status ssb4d_dist_mpi(const void *comm, ssb4d_dist **out, ssb4d_err *err)
{
    (void)comm;
    *out = NULL;
    return ssb_fail(err, SSB4D_EINVAL, "this ssb4d was built without MPI (configure with -DSSB4D_MPI=ON)");
}
void ssb4d_dist_free(ssb4d_dist *d) { (void)d; }
int ssb4d_dist_rank(const ssb4d_dist *d) { (void)d; return 0; }
int ssb4d_dist_size(const ssb4d_dist *d) { (void)d; return 1; }
void ssb4d_dist_traffic(const ssb4d_dist *d, uint64_t *bytes, uint64_t *messages, double *seconds)
{
    (void)d;
    *bytes = *messages = 0;
    *seconds = 0.0;
}
int dist_rank(const ssb4d_dist *d) { (void)d; return 0; }
int dist_size(const ssb4d_dist *d) { (void)d; return 1; }
int dist_local_rank(const ssb4d_dist *d) { (void)d; return 0; }

#define NO_MPI(err) ssb_fail(err, SSB4D_EINTERNAL, "built without MPI")
ssb4d_status dist_agree(const ssb4d_dist *d, ssb4d_status st, ssb4d_err *err) { (void)d, (void)err; return st; }
ssb4d_status dist_bcast(const ssb4d_dist *d, void *buf, size_t bytes, int root, ssb4d_err *err)
{
    (void)d, (void)buf, (void)bytes, (void)root;
    return NO_MPI(err);
}
ssb4d_status dist_allgather(const ssb4d_dist *d, const void *mine, size_t bytes, void *out, ssb4d_err *err)
{
    (void)d, (void)mine, (void)bytes, (void)out;
    return NO_MPI(err);
}
ssb4d_status dist_allgather_rows(const ssb4d_dist *d, void *table, size_t row_bytes, size_t lo, size_t hi,
                                 ssb4d_err *err)
{
    (void)d, (void)table, (void)row_bytes, (void)lo, (void)hi;
    return NO_MPI(err);
}
ssb4d_status dist_sum_u64(const ssb4d_dist *d, uint64_t *v, size_t n, ssb4d_err *err)
{
    (void)d, (void)v, (void)n;
    return NO_MPI(err);
}
ssb4d_status dist_chain_run(dist_chain *c, ssb4d_status st, double *totals, ssb4d_err *err)
{
    (void)c, (void)totals;
    return st ? st : NO_MPI(err);
}
ssb4d_status dist_seq_agree(const ssb4d_dist *d, dist_seq *sq, ssb4d_status st, ssb4d_err *err)
{
    (void)d, (void)sq;
    return st ? st : NO_MPI(err);
}
ssb4d_status dist_seq_recv(const ssb4d_dist *d, dist_seq *sq, double *part, size_t len, ssb4d_status st,
                           ssb4d_err *err)
{
    (void)d, (void)sq, (void)part, (void)len;
    return st ? st : NO_MPI(err);
}
ssb4d_status dist_seq_send(const ssb4d_dist *d, dist_seq *sq, const double *part, size_t len, ssb4d_status st,
                           ssb4d_err *err)
{
    (void)d, (void)sq, (void)part, (void)len;
    return st ? st : NO_MPI(err);
}
ssb4d_status dist_seq_finish(const ssb4d_dist *d, dist_seq *sq, double *acc, size_t len, ssb4d_status st,
                             ssb4d_err *err)
{
    (void)d, (void)sq, (void)acc, (void)len;
    return st ? st : NO_MPI(err);
}
#endif

/* ---- the parts that need no messages of their own ---------------------------------------------- */

ssb4d_status dist_seq_begin(const ssb4d_dist *d, dist_seq *sq, double *acc, size_t len, ssb4d_status st,
                            ssb4d_err *err)
{
    ssb4d_status a = dist_seq_agree(d, sq, st, err);
    return a ? a : dist_seq_recv(d, sq, acc, len, st, err);
}

ssb4d_status dist_seq_end(const ssb4d_dist *d, dist_seq *sq, double *acc, size_t len, ssb4d_status st,
                          ssb4d_err *err)
{
    st = dist_seq_send(d, sq, acc, len, st, err);
    return dist_seq_finish(d, sq, acc, len, st, err);
}

ssb4d_status dist_seq_pass(const ssb4d_dist *d, double *acc, size_t len, ssb4d_status st, dist_pass_fn fn,
                           void *user, ssb4d_err *err)
{
    if (!d)
        return st ? st : fn(user, err);
    dist_seq sq = {0};
    st = dist_seq_begin(d, &sq, acc, len, st, err);
    if (!st)
        st = fn(user, err);
    return dist_seq_end(d, &sq, acc, len, st, err);
}

void dist_split(size_t n, int size, int rank, size_t *lo, size_t *hi)
{
    size_t nb = (n + DIST_BLOCK - 1) / DIST_BLOCK;
    size_t b0 = nb * (size_t)rank / (size_t)size, b1 = nb * (size_t)(rank + 1) / (size_t)size;
    *lo = b0 * DIST_BLOCK < n ? b0 * DIST_BLOCK : n;
    *hi = b1 * DIST_BLOCK < n ? b1 * DIST_BLOCK : n;
}

size_t dist_segments(size_t n, size_t lo, size_t hi, dist_seg *segs)
{
    size_t k = 0, i = lo;
    if (lo < hi && lo % DIST_BLOCK) { /* the head: a block begun on an earlier rank */
        size_t bend = (lo / DIST_BLOCK + 1) * DIST_BLOCK;
        bend = bend < n ? bend : n;
        size_t hend = bend < hi ? bend : hi;
        for (size_t p = lo; p < hend; p++)
            segs[k++] = (dist_seg){p, p + 1, DIST_PIX, p + 1 == bend};
        i = hend;
    }
    while (i < hi) {
        size_t bend = (i / DIST_BLOCK + 1) * DIST_BLOCK;
        bend = bend < n ? bend : n;
        if (bend <= hi) {
            segs[k++] = (dist_seg){i, bend, DIST_BLOCK_FULL, 0};
            i = bend;
        } else {
            segs[k++] = (dist_seg){i, hi, DIST_TAIL, 0};
            i = hi;
        }
    }
    return k;
}

/* ---- the host's vectors (dist_vec_ops) ------------------------------------------------------- */

static ssb4d_status host_alloc(void *ctx, int what, size_t n, double **out, ssb4d_err *err)
{
    ssb4d_mem *mem = ctx;
    switch (what) {
    case DIST_VEC_OPEN: /* then its flag */
        *out = calloc(n + 1, sizeof **out);
        return *out ? SSB4D_OK : ssb_fail(err, SSB4D_ENOMEM, "out of memory (reduction)");
    case DIST_VEC_PIX:
        *out = ssb4d_mem_alloc(mem, n * sizeof **out, "reduction pixel", err);
        return *out ? SSB4D_OK : SSB4D_ENOMEM;
    default:
        *out = ssb4d_mem_alloc(mem, n * sizeof **out, "reduction partials", err);
        return *out ? SSB4D_OK : SSB4D_ENOMEM;
    }
}

static void host_release(void *ctx, int what, double *p, size_t n)
{
    (void)n;
    if (what == DIST_VEC_OPEN)
        free(p);
    else
        ssb4d_mem_free(ctx, p, 0);
}

static ssb4d_status host_add(void *ctx, double *dst, const double *src, size_t n, ssb4d_err *err)
{
    (void)ctx, (void)err;
    for (size_t q = 0; q < n; q++)
        dst[q] += src[q];
    return SSB4D_OK;
}

static ssb4d_status host_copy(void *ctx, double *dst, const double *src, size_t n, ssb4d_err *err)
{
    (void)ctx, (void)err;
    memcpy(dst, src, n * sizeof *dst);
    return SSB4D_OK;
}

static ssb4d_status host_zero(void *ctx, double *dst, size_t n, ssb4d_err *err)
{
    (void)ctx, (void)err;
    memset(dst, 0, n * sizeof *dst);
    return SSB4D_OK;
}

const dist_vec_ops dist_vec_host = {.host = 1, .alloc = host_alloc, .release = host_release, .add = host_add,
                                    .copy = host_copy, .zero = host_zero, .to_host = host_copy,
                                    .from_host = host_copy};

ssb4d_status dist_chain_init(dist_chain *c, const ssb4d_dist *d, size_t len, const dist_seg *segs, size_t nsegs,
                             dist_pix_fn pix, void *pix_user, ssb4d_mem *mem, ssb4d_err *err)
{
    return dist_chain_init_on(c, &dist_vec_host, mem, d, len, segs, nsegs, pix, pix_user, err);
}

ssb4d_status dist_chain_init_on(dist_chain *c, const dist_vec_ops *ops, void *ctx, const ssb4d_dist *d, size_t len,
                                const dist_seg *segs, size_t nsegs, dist_pix_fn pix, void *pix_user, ssb4d_err *err)
{
    memset(c, 0, sizeof *c);
    c->d = d;
    c->len = len;
    c->ops = ops;
    c->ctx = ctx;
    c->direct = dist_rank(d) == 0;
    c->pix = pix;
    c->pix_user = pix_user;
    for (size_t i = 0; i < nsegs; i++) {
        if (segs[i].kind == DIST_PIX) {
            c->n_head++;
            c->head_closes |= segs[i].close;
        } else
            c->cap += !dist_chain_direct(c, segs[i].kind);
    }
    c->head = malloc((c->n_head ? c->n_head : 1) * sizeof *c->head);
    if (!c->head)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    for (size_t i = 0, k = 0; i < nsegs; i++)
        if (segs[i].kind == DIST_PIX)
            c->head[k++] = segs[i].a;
    if (c->cap) {
        ssb4d_status st = ops->alloc(ctx, DIST_VEC_KEPT, c->cap * len, &c->items, err);
        c->kind = malloc(c->cap);
        if (st || !c->kind) {
            dist_chain_free(c);
            return st ? st : ssb_fail(err, SSB4D_ENOMEM, "out of memory");
        }
    }
    return SSB4D_OK;
}

int dist_chain_direct(const dist_chain *c, int kind) { return c->direct && kind == DIST_BLOCK_FULL; }

double *dist_chain_slot(dist_chain *c, const dist_seg *seg)
{
    if (c->n == c->cap)
        return NULL; /* cannot happen: init counted the segments */
    c->kind[c->n] = (unsigned char)seg->kind;
    return c->items + c->n++ * c->len;
}

void dist_chain_keep(dist_chain *c, const dist_seg *seg, const double *const *parts, const size_t *lens, size_t np)
{
    double *dst = dist_chain_slot(c, seg);
    for (size_t i = 0; dst && i < np; i++) {
        memcpy(dst, parts[i], lens[i] * sizeof *dst);
        dst += lens[i];
    }
}

void dist_chain_free(dist_chain *c)
{
    if (c->items)
        c->ops->release(c->ctx, DIST_VEC_KEPT, c->items, c->cap * c->len);
    free(c->kind);
    free(c->head);
    memset(c, 0, sizeof *c);
}
