/* correct.c — the SSB correction n(q,k) (SPEC 5.2, 5.4, 5.6; docs/ssb-math.md). */
#include "ssb/ssb_internal.h"

#include "common/err.h"
#include "optics/optics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double complex ssb_probe(const ssb_ctx *c, double vx, double vy, double *A);

ssb4d_status ssb_ctx_init(ssb_ctx *c, const struct ssb4d_G *G, const ssb4d_geometry *g,
                          const ssb4d_aberrations *ab, const ssb4d_thick *thick, int f,
                          ssb4d_err *err)
{
    memset(c, 0, sizeof *c);
    ssb4d_status gst = ssb_geometry_check(g, err);
    if (gst)
        return gst;
    if (f != 1 && f != 2 && f != 3 && f != 4 && f != 8)
        return ssb_fail(err, SSB4D_EINVAL, "upsampling factor must be 1, 2, 3, 4 or 8 (got %d)", f);
    for (int i = 0; i < SSB4D_N_ABERR; i++)
        if (!isfinite(ab->C_nm[i]) || !isfinite(ab->phi_deg[i]) || fabs(ab->C_nm[i]) > 1e9)
            return ssb_fail(err, SSB4D_EINVAL, "aberration %s is not a finite value", ssb4d_aberr_name(i));
    c->G = G;
    c->lambda = ssb4d_wavelength_A(g->kv);
    c->alpha0 = g->semiangle_mrad * 1e-3;
    c->ang[0] = g->det_sampling_mrad[0] * 1e-3;
    c->ang[1] = g->det_sampling_mrad[1] * 1e-3;
    ssb_coefficients(ab, c->C, c->phi, c->m, &c->quadratic_only);
    if (thick && thick->thickness_nm != 0.0) {
        if (!(thick->thickness_nm > 0) || !isfinite(thick->tilt_mrad[0]) || !isfinite(thick->tilt_mrad[1]))
            return ssb_fail(err, SSB4D_EINVAL, "thickness must be >= 0 and tilt finite");
        c->thick = 1;
        c->t_A = thick->thickness_nm * 10.0;
        c->tau[0] = thick->tilt_mrad[0] * 1e-3;
        c->tau[1] = thick->tilt_mrad[1] * 1e-3;
    }
    c->fast = c->quadratic_only && !c->thick && c->ang[0] == c->ang[1];
    c->inv_w = (float)(1.0 / c->ang[0]);

    c->f = f;
    c->nyf = (size_t)f * G->ny;
    c->nxf = (size_t)f * G->nx;
    c->dc = G->dc;
    c->qr = malloc(c->nyf * sizeof *c->qr);
    c->qc = malloc(c->nxf * sizeof *c->qc);
    c->qcf = malloc(c->nxf * sizeof *c->qcf);
    c->kx = malloc(G->n_bf * sizeof *c->kx);
    c->ky = malloc(G->n_bf * sizeof *c->ky);
    c->Ak = malloc(G->n_bf * sizeof *c->Ak);
    c->Pk = malloc(G->n_bf * sizeof *c->Pk);
    if (!c->qr || !c->qc || !c->qcf || !c->kx || !c->ky || !c->Ak || !c->Pk) {
        ssb_ctx_free(c);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < c->nyf; i++)
        c->qr[i] = ssb_fftfreq(i, c->nyf, g->scan_step_A[0] / f);
    for (size_t j = 0; j < c->nxf; j++)
        c->qcf[j] = (float)(c->qc[j] = ssb_fftfreq(j, c->nxf, g->scan_step_A[1] / f));
    for (size_t ib = 0; ib < G->n_bf; ib++)
        ssb_bf_k(g, c->lambda, G->det_shape[1], G->bf_pix[ib], &c->kx[ib], &c->ky[ib]);
    for (size_t ib = 0; ib < G->n_bf; ib++) {
        double A;
        c->Pk[ib] = ssb_probe(c, c->kx[ib], c->ky[ib], &A);
        c->Ak[ib] = A;
    }
    return SSB4D_OK;
}

void ssb_ctx_free(ssb_ctx *c)
{
    free(c->qr);
    free(c->qc);
    free(c->qcf);
    free(c->kx);
    free(c->ky);
    free(c->Ak);
    free(c->Pk);
    memset(c, 0, sizeof *c);
}

static double chi(const ssb_ctx *c, double vx, double vy)
{
    return ssb_chi(c->lambda, c->C, c->phi, c->quadratic_only, c->m, vx, vy);
}

static double aperture(const ssb_ctx *c, double vx, double vy)
{
    return ssb_aperture(c->lambda, c->alpha0, c->ang, vx, vy);
}

double complex ssb_probe(const ssb_ctx *c, double vx, double vy, double *A)
{
    *A = aperture(c, vx, vy);
    if (*A == 0.0)
        return 0.0;
    double x = chi(c, vx, vy);
    return *A * (cos(x) - I * sin(x));
}

static double sinc(double x) { return fabs(x) < 1e-6 ? 1.0 : sin(x) / x; }

/* conj(γ)/|γ|, on every bin the apertures open (docs/ssb-math.md, "degenerate bins"): where both
 * trotter terms are present and cancel exactly (|γ| < 1e-8: χ(q) = 0 on a grid bin, or every bin
 * of the triple overlap at zero aberration), γ's direction as the aberrations leave that point,
 * −i·t1/|t1|. A threshold that dropped those bins made the loss jump at degenerate points (a false
 * basin at C10 = C12 = 0); the bins that enter now depend on the apertures only. t1 = w1·t1 and
 * t2 = w2·t2 are the two weighted terms, γ = t1 − t2. */
static double complex unit_conj(double complex t1, double complex t2)
{
    double complex gam = t1 - t2;
    double mag = cabs(gam);
    if (mag >= 1e-8)
        return conj(gam) / mag;
    double m1 = cabs(t1), m2 = cabs(t2);
    if (m1 > 0)
        return conj(-I * t1) / m1;
    return m2 > 0 ? conj(-t2) / m2 : 0.0;
}

/* n(q,k) at one frequency vector, double precision. */
static double complex n_at(const ssb_ctx *c, size_t ib, double qx, double qy)
{
    double kx = c->kx[ib], ky = c->ky[ib], A1, A2;
    double complex Pk = c->Pk[ib];
    if (c->Ak[ib] == 0.0)
        return 0.0;
    if (c->fast) {
        /* Separable form (see ssb_internal.h), two exponentials instead of four. */
        double a, b, k2 = kx * kx + ky * ky, q2 = qx * qx + qy * qy, dot = qx * kx + qy * ky;
        ssb_pixel_ab(c, ib, &a, &b);
        double chq = M_PI * c->lambda * (c->m[0] * qx * qx + 2 * c->m[1] * qx * qy + c->m[2] * qy * qy);
        double r1 = sqrt(fmax(q2 - 2 * dot + k2, 0.0)), r2 = sqrt(fmax(q2 + 2 * dot + k2, 0.0));
        A1 = fmin(fmax((c->alpha0 - c->lambda * r1) / c->ang[0] + 0.5, 0.0), 1.0);
        A2 = fmin(fmax((c->alpha0 - c->lambda * r2) / c->ang[0] + 0.5, 0.0), 1.0);
        double complex e = cos(chq) - I * sin(chq), p = c->Ak[ib] * cexp(I * (a * qx + b * qy));
        return unit_conj(p * A1 * e, p * A2 * conj(e));
    }
    double complex P1 = ssb_probe(c, kx - qx, ky - qy, &A1); /* P(k−q) (SPEC 5.4) */
    double complex P2 = ssb_probe(c, kx + qx, ky + qy, &A2); /* P(k+q) */
    double complex t1 = P1 * conj(Pk), t2 = conj(P2) * Pk;
    if (c->thick) {
        double k2 = kx * kx + ky * ky, qt = 2 * M_PI * (qx * c->tau[0] + qy * c->tau[1]);
        double r1 = -M_PI * c->lambda * ((qx - kx) * (qx - kx) + (qy - ky) * (qy - ky) - k2) - qt;
        double r2 = M_PI * c->lambda * ((qx + kx) * (qx + kx) + (qy + ky) * (qy + ky) - k2) - qt;
        t1 *= sinc(r1 * c->t_A / 2);
        t2 *= sinc(r2 * c->t_A / 2);
    }
    return unit_conj(t1, t2);
}

/* n at fine bin (i, j) with the Nyquist alias average. */
static double complex n_bin(const ssb_ctx *c, size_t ib, size_t i, size_t j)
{
    int nyq_r = (c->nyf % 2 == 0) && i == c->nyf / 2;
    int nyq_c = (c->nxf % 2 == 0) && j == c->nxf / 2;
    double qx = c->qr[i], qy = c->qc[j];
    if (!nyq_r && !nyq_c)
        return n_at(c, ib, qx, qy);
    double complex s = 0;
    int cnt = 0;
    for (int a = 0; a < (nyq_r ? 2 : 1); a++)
        for (int b = 0; b < (nyq_c ? 2 : 1); b++) {
            s += n_at(c, ib, a ? -qx : qx, b ? -qy : qy);
            cnt++;
        }
    return s / cnt;
}

cfloat ssb_eq(const ssb_ctx *c, size_t i, size_t j)
{
    double x = chi(c, c->qr[i], c->qc[j]);
    return (cfloat)(cos(x) - I * sin(x));
}

void ssb_pixel_ab(const ssb_ctx *c, size_t ib, double *a, double *b)
{
    double s = 2 * M_PI * c->lambda;
    *a = s * (c->m[0] * c->kx[ib] + c->m[1] * c->ky[ib]);
    *b = s * (c->m[1] * c->kx[ib] + c->m[2] * c->ky[ib]);
}

/* e^{iθ·k} for the bins of an n-point fftfreq grid (k the bin's integer), from two small tables
 * of exponentials (k = 32h + m: lo[m]·hi[h]) instead of one complex exponential per bin. The
 * basis holds θ, lo[32] and hi[n/32 + 2]; an absurdly long axis (no hi table) takes the direct
 * exponential. Every caller reads e^{iθ·k} through ssb_phasor_at, so the values are the same bits
 * whether a whole line is made at once (the loss) or one row at a time (the object). */
size_t ssb_phasor_basis_len(size_t n)
{
    size_t nh = n / 32 + 2;
    return nh > SSB_PHASOR_MAX_HI ? 1 : 1 + 32 + nh;
}

void ssb_phasor_basis(double theta, size_t n, double complex *basis)
{
    basis[0] = theta;
    size_t nh = n / 32 + 2;
    if (nh > SSB_PHASOR_MAX_HI)
        return;
    for (int m = 0; m < 32; m++)
        basis[1 + m] = cexp(I * theta * m);
    for (size_t h = 0; h < nh; h++)
        basis[33 + h] = cexp(I * theta * 32.0 * (double)h);
}

cfloat ssb_phasor_at(const double complex *basis, size_t n, size_t i)
{
    long k = (i < (n + 1) / 2) ? (long)i : (long)i - (long)n;
    if (n / 32 + 2 > SSB_PHASOR_MAX_HI)
        return (cfloat)cexp(I * creal(basis[0]) * (double)k);
    unsigned long ak = (unsigned long)(k < 0 ? -k : k);
    double complex v = basis[1 + ak % 32] * basis[33 + ak / 32];
    return (cfloat)(k < 0 ? conj(v) : v);
}

static void phasor_line(double theta, size_t n, size_t count, cfloat *out)
{
    double complex basis[1 + 32 + SSB_PHASOR_MAX_HI];
    ssb_phasor_basis(theta, n, basis);
    for (size_t i = 0; i < count; i++)
        out[i] = ssb_phasor_at(basis, n, i);
}

/* Row phasor basis of BF pixel ib (ssb_phasor_basis_len(nyf) values): R[i] = ssb_phasor_at(basis,
 * nyf, i), the same bits as ssb_pixel_phasors' R. */
void ssb_pixel_row_basis(const ssb_ctx *c, size_t ib, double complex *basis)
{
    double a, b;
    ssb_pixel_ab(c, ib, &a, &b);
    ssb_phasor_basis(a * c->qr[1], c->nyf, basis);
}

void ssb_pixel_phasors(const ssb_ctx *c, size_t ib, cfloat *R, size_t nrows, cfloat *Ctab, size_t ncols)
{
    double a, b;
    ssb_pixel_ab(c, ib, &a, &b);
    /* q(i) = k_i·qr[1] on the fftfreq grid; a half plane holds the first ncols column bins. */
    if (R && nrows)
        phasor_line(a * c->qr[1], c->nyf, nrows, R);
    if (Ctab && ncols)
        phasor_line(b * c->qc[1], c->nxf, ncols, Ctab);
}

/* G on the fine grid: the native spectrum continued periodically (mirror for the unstored half). */
static inline cfloat g_at(const struct ssb4d_G *G, const cfloat *plane, size_t i, size_t j)
{
    size_t r = i % G->ny, col = j % G->nx;
    if (col < G->nxh)
        return plane[r * G->nxh + col];
    return conjf(plane[((G->ny - r) % G->ny) * G->nxh + (G->nx - col)]);
}

/* g_at for the columns [0, ncols) of fine row i at once: the row and its mirror row are found
 * once, and columns run in segments of one period, so there is no division per bin (an
 * upsampled preview spent most of its time in g_at's two modulos). The same values as g_at. */
static void g_row(const struct ssb4d_G *G, const cfloat *plane, size_t i, size_t ncols, cfloat *out)
{
    size_t r = i % G->ny, rm = (G->ny - r) % G->ny, nx = G->nx, nxh = G->nxh;
    const cfloat *row = plane + r * nxh, *mrow = plane + rm * nxh;
    for (size_t j0 = 0; j0 < ncols; j0 += nx) {
        size_t seg = ncols - j0 < nx ? ncols - j0 : nx; /* columns 0..seg-1 of one period */
        size_t direct = seg < nxh ? seg : nxh;
        memcpy(out + j0, row, direct * sizeof *out);
        for (size_t col = nxh; col < seg; col++)
            out[j0 + col] = conjf(mrow[nx - col]);
    }
}

/* −i·v when rot: (im, −re), exact (the loss's real-output path transforms −i·Ĉ). */
static inline cfloat rot_i(cfloat v, int rot) { return rot ? CMPLXF(cimagf(v), -crealf(v)) : v; }

/* The fast kernel's loop over one row: o[j] = v[j]·n(q,k) (times −i when rot). A literal rot at
 * each call site gives two loops without a select in them. */
static inline __attribute__((always_inline)) void corr_fast(const ssb_ctx *c, size_t ib, size_t i, size_t ncols,
                                                            const float *src, const cfloat *Eq_row, cfloat R,
                                                            const cfloat *Ctab, float *o, const int rot)
{
    const float qr = (float)c->qr[i], kx = (float)c->kx[ib], ky = (float)c->ky[ib];
    const float k2 = kx * kx + ky * ky, Ak = (float)c->Ak[ib];
    const float q2r = qr * qr + k2, dotr = qr * kx;
    const float Rr = crealf(R) * Ak, Ri = cimagf(R) * Ak;
    const float a0 = (float)c->alpha0, lam = (float)c->lambda, invw = c->inv_w;
    const float *restrict eq = (const float *)Eq_row, *restrict ct = (const float *)Ctab;
    const float *restrict qc = c->qcf;
    for (size_t j = 0; j < ncols; j++) {
        float dot = dotr + qc[j] * ky, base = q2r + qc[j] * qc[j];
        float v1 = base - 2 * dot, v2 = base + 2 * dot;                /* |q−k|², |q+k|² */
        v1 = v1 > 0.0f ? v1 : 0.0f;
        v2 = v2 > 0.0f ? v2 : 0.0f;
        float A1 = (a0 - lam * sqrtf(v1)) * invw + 0.5f, A2 = (a0 - lam * sqrtf(v2)) * invw + 0.5f;
        A1 = A1 < 0.0f ? 0.0f : A1;
        A1 = A1 > 1.0f ? 1.0f : A1;
        A2 = A2 < 0.0f ? 0.0f : A2;
        A2 = A2 > 1.0f ? 1.0f : A2;
        float er = eq[2 * j], ei = eq[2 * j + 1];
        float dr = (A1 - A2) * er, di = (A1 + A2) * ei;                 /* A1·e − A2·conj(e) */
        float pr = Rr * ct[2 * j] - Ri * ct[2 * j + 1];                   /* Ak·R·C */
        float pi = Rr * ct[2 * j + 1] + Ri * ct[2 * j];
        float gr = pr * dr - pi * di, gi = pr * di + pi * dr;             /* γ */
        float m2 = gr * gr + gi * gi;
        /* |γ| < 1e-8 with a trotter open: γ's direction −i·p·e (unit_conj); blended branch-free */
        float deg = (m2 < 1e-16f ? 1.0f : 0.0f) * (A1 + A2 > 0.0f ? 1.0f : 0.0f);
        float xr = pr * er - pi * ei, xi = pr * ei + pi * er;             /* p·e, |p·e| = Ak */
        float hr = xi, hi = -xr;                                          /* −i·p·e */
        gr = deg * hr + (1.0f - deg) * gr;
        gi = deg * hi + (1.0f - deg) * gi;
        m2 = gr * gr + gi * gi;
        m2 = m2 > 1e-16f ? m2 : 1e-16f;
        float inv = 1.0f / sqrtf(m2);
        float nr = gr * inv, ni = -gi * inv;                              /* conj(γ)/|γ| */
        float vr = src[2 * j], vi = src[2 * j + 1];
        float yr = vr * nr - vi * ni, yi = vr * ni + vi * nr;
        o[2 * j] = rot ? yi : yr;
        o[2 * j + 1] = rot ? -yr : yi;
    }
}

SSB_HOT void ssb_corr_row(const ssb_ctx *c, size_t ib, const cfloat *plane, size_t i, size_t ncols,
                          const cfloat *Eq_row, cfloat R, const cfloat *Ctab, int rot, cfloat *out)
{
    const struct ssb4d_G *G = c->G;
    if (!plane || c->Ak[ib] == 0.0) {
        memset(out, 0, ncols * sizeof *out);
        return;
    }
    int nyq_row = (c->nyf % 2 == 0) && i == c->nyf / 2;
    size_t nyq_col = (c->nxf % 2 == 0) ? c->nxf / 2 : (size_t)-1;
    int direct = (c->f == 1); /* native grid: columns of the half plane map one to one */
    if (!c->fast || nyq_row) {
        for (size_t j = 0; j < ncols; j++) {
            cfloat gv = (direct && j < G->nxh) ? plane[i * G->nxh + j] : g_at(G, plane, i, j);
            out[j] = rot_i(gv * (cfloat)n_bin(c, ib, i, j), rot);
        }
        return;
    }
    /* G on this row: the stored row itself on the native grid, else gathered into out (in
     * place); then one branch-free loop that vectorises. */
    const float *src = (const float *)out;
    if (direct && ncols <= G->nxh)
        src = (const float *)(plane + (i % G->ny) * G->nxh);
    else
        g_row(G, plane, i, ncols, out);
    if (rot)
        corr_fast(c, ib, i, ncols, src, Eq_row, R, Ctab, (float *)out, 1);
    else
        corr_fast(c, ib, i, ncols, src, Eq_row, R, Ctab, (float *)out, 0);
    if (nyq_col < ncols)
        out[nyq_col] = rot_i(g_at(G, plane, i, nyq_col) * (cfloat)n_bin(c, ib, i, nyq_col), rot);
}
