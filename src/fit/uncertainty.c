/* uncertainty.c — standard errors of a fit (fit.h, fit_uncertainty; docs/fit.md "Standard
 * errors").
 *
 * The band objective is not a likelihood, so its curvature alone has no noise scale. The fit
 * pixels are split into FIT_SE_GROUPS disjoint groups instead, and each group's optimum near the
 * fit is found. The groups are the inner and the outer half of the disk (by radius), each dealt
 * into four in BF order. The spread of the optima within each ring, divided by √groups, is the
 * standard error of the whole fit (a split-sample estimate: each group has 1/K of the pixels, so
 * K times the variance): the counting noise. The difference between the rings' means is a model
 * check, not noise: a model that fits the disk's centre and its edge with different aberrations
 * (a crystal's dynamical scattering; on thin specimens C10 differs by about 0.1 nm).
 *
 * Each group's optimum is one Newton step from the fit: the gradient of a quadratic through
 * 1 + 2d + d(d−1)/2 points around it (exact for a quadratic), on the groups' mean curvature, so
 * all groups cost about one evaluation pass over the fit pixels per point. The astigmatism is stepped in Cartesian form (C12 cos 2φ12,
 * C12 sin 2φ12), which stays regular as C12 → 0 where φ12 does not. */
#include "common/err.h"
#include "fit/fit.h"
#include "gbuild/gbuild.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SE_MAX_D 4
#define SE_MAX_POINTS (1 + 2 * SE_MAX_D + SE_MAX_D * (SE_MAX_D - 1) / 2)

/* The free coordinates u of a fit point and how they map back to (C10, C12, φ12, rotation). */
typedef struct {
    int d;
    int c10, rot;       /* index in u, or −1 */
    int astig;          /* 0 none, 1 C12 alone (φ12 locked), 2 Cartesian (a1, a2) */
    int a;              /* index of C12 or a1 in u */
    double h[SE_MAX_D]; /* Newton design steps */
} coords;

static void coords_of(const int locked[3], int fit_rotation, coords *c)
{
    memset(c, 0, sizeof *c);
    c->c10 = c->rot = -1;
    if (!locked[FIT_C10])
        c->c10 = c->d, c->h[c->d++] = 0.25;
    if (!locked[FIT_C12]) {
        c->astig = locked[FIT_PHI12] ? 1 : 2;
        c->a = c->d;
        for (int k = 0; k < c->astig; k++)
            c->h[c->d++] = 0.25;
    }
    if (fit_rotation)
        c->rot = c->d, c->h[c->d++] = 0.5;
}

int fit_se_dims(const int locked[3], int fit_rotation)
{
    coords c;
    coords_of(locked, fit_rotation, &c);
    return c.d;
}

static void to_u(const coords *c, const double x[4], double *u)
{
    if (c->c10 >= 0)
        u[c->c10] = x[FIT_C10];
    if (c->astig == 1)
        u[c->a] = x[FIT_C12];
    else if (c->astig == 2) {
        double t = 2.0 * x[FIT_PHI12] * M_PI / 180.0;
        u[c->a] = x[FIT_C12] * cos(t);
        u[c->a + 1] = x[FIT_C12] * sin(t);
    }
    if (c->rot >= 0)
        u[c->rot] = x[FIT_ROT];
}

static void to_x(const coords *c, const double x0[4], const double *u, double x[4])
{
    memcpy(x, x0, 4 * sizeof *x);
    if (c->c10 >= 0)
        x[FIT_C10] = u[c->c10];
    if (c->astig == 1)
        x[FIT_C12] = u[c->a];
    else if (c->astig == 2) {
        x[FIT_C12] = hypot(u[c->a], u[c->a + 1]);
        x[FIT_PHI12] = 0.5 * atan2(u[c->a + 1], u[c->a]) * 180.0 / M_PI;
    }
    if (c->rot >= 0)
        x[FIT_ROT] = u[c->rot];
}

/* The design around u0: the centre, ±h along each axis, +h on each pair of axes. */
static size_t design(const coords *c, const double *u0, double pts[][SE_MAX_D])
{
    size_t n = 0;
    memcpy(pts[n++], u0, sizeof pts[0]);
    for (int j = 0; j < c->d; j++)
        for (int s = 1; s >= -1; s -= 2) {
            memcpy(pts[n], u0, sizeof pts[0]);
            pts[n++][j] += s * c->h[j];
        }
    for (int i = 0; i < c->d; i++)
        for (int j = i + 1; j < c->d; j++) {
            memcpy(pts[n], u0, sizeof pts[0]);
            pts[n][i] += c->h[i];
            pts[n++][j] += c->h[j];
        }
    return n;
}

/* The gradient b and Hessian H of the quadratic through the design's values f. */
static void quadratic(const coords *c, const double *f, double *b, double H[SE_MAX_D][SE_MAX_D])
{
    int d = c->d;
    for (int j = 0; j < d; j++) {
        double fp = f[1 + 2 * j], fm = f[2 + 2 * j], h = c->h[j];
        b[j] = (fp - fm) / (2.0 * h);
        H[j][j] = (fp + fm - 2.0 * f[0]) / (h * h);
    }
    size_t k = 1 + 2 * (size_t)d;
    for (int i = 0; i < d; i++)
        for (int j = i + 1; j < d; j++, k++) {
            double hi = c->h[i], hj = c->h[j];
            double rest = f[k] - f[0] - b[i] * hi - b[j] * hj - 0.5 * H[i][i] * hi * hi - 0.5 * H[j][j] * hj * hj;
            H[i][j] = H[j][i] = rest / (hi * hj);
        }
}

/* L with H = L Lᵀ; 0 when H is not positive definite (no minimum near the centre). */
static int cholesky(int d, double H[SE_MAX_D][SE_MAX_D], double L[SE_MAX_D][SE_MAX_D])
{
    memset(L, 0, sizeof(double) * SE_MAX_D * SE_MAX_D);
    for (int i = 0; i < d; i++)
        for (int j = 0; j <= i; j++) {
            double s = H[i][j];
            for (int m = 0; m < j; m++)
                s -= L[i][m] * L[j][m];
            if (i == j) {
                if (!(s > 0))
                    return 0;
                L[i][i] = sqrt(s);
            } else
                L[i][j] = s / L[j][j];
        }
    return 1;
}

/* The Newton step δ = −H⁻¹b, each |δ_j| clamped to 8 design steps (a group whose optimum lies
 * farther is a large spread already). */
static void newton(const coords *c, double L[SE_MAX_D][SE_MAX_D], const double *b, double *delta)
{
    int d = c->d;
    double y[SE_MAX_D];
    for (int i = 0; i < d; i++) { /* L y = −b, then Lᵀ δ = y */
        double s = -b[i];
        for (int m = 0; m < i; m++)
            s -= L[i][m] * y[m];
        y[i] = s / L[i][i];
    }
    for (int i = d - 1; i >= 0; i--) {
        double s = y[i];
        for (int m = i + 1; m < d; m++)
            s -= L[m][i] * delta[m];
        delta[i] = s / L[i][i];
    }
    for (int j = 0; j < d; j++)
        delta[j] = fmax(-8.0 * c->h[j], fmin(8.0 * c->h[j], delta[j]));
}

/* The groups: F's pixels sorted by distance from the centre (ties by index), the nearer half
 * dealt into groups 0–3 and the farther into 4–7, each in BF order. */
static int cmp_rank(const void *a, const void *b)
{
    const double *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : (x[1] > y[1]) - (x[1] < y[1]);
}

static ssb4d_status groups_of(const ssb4d_G *F, const ssb4d_geometry *g, int *group, ssb4d_err *err)
{
    size_t n = F->n_bf, cols = F->det_shape[1];
    double (*rk)[2] = malloc((n ? n : 1) * sizeof *rk);
    if (!rk)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory (fit standard errors)");
    for (size_t i = 0; i < n; i++) {
        double r = (double)(F->bf_pix[i] / (int32_t)cols) - g->centre_px[0];
        double c = (double)(F->bf_pix[i] % (int32_t)cols) - g->centre_px[1];
        rk[i][0] = r * r + c * c;
        rk[i][1] = (double)i;
    }
    qsort(rk, n, sizeof *rk, cmp_rank);
    for (size_t i = 0; i < n; i++)
        group[(size_t)rk[i][1]] = i < n / 2 ? 0 : 4;
    free(rk);
    size_t dealt[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
        int ring = group[i] / 4;
        group[i] += (int)(dealt[ring]++ % 4);
    }
    return SSB4D_OK;
}

ssb4d_status fit_uncertainty(const ssb4d_G *F, const ssb4d_geometry *g, const fit_thin_params *p, const double x[4],
                             ssb4d_mem *mem, double se[4], double split[4], size_t *n_evals, ssb4d_err *err)
{
    for (int j = 0; j < 4; j++)
        se[j] = split[j] = NAN;
    *n_evals = 0;
    coords c;
    coords_of(p->locked, p->fit_rotation && !p->locked[FIT_ROT], &c);
    const size_t K = FIT_SE_GROUPS;
    if (c.d == 0 || F->n_bf < 8 * K) /* too few pixels for eight groups: no estimate */
        return SSB4D_OK;
    int np = p->fit_rotation ? 4 : 3;
    double u0[SE_MAX_D] = {0}, pts[SE_MAX_POINTS][SE_MAX_D], xs[SE_MAX_POINTS * 4], f[SE_MAX_POINTS];
    to_u(&c, x, u0);
    size_t npts = design(&c, u0, pts);
    for (size_t i = 0; i < npts; i++) {
        double xi[4];
        to_x(&c, x, pts[i], xi);
        memcpy(xs + (size_t)np * i, xi, (size_t)np * sizeof *xi);
    }
    int *group = malloc(F->n_bf * sizeof *group);
    size_t *idx = malloc(F->n_bf * sizeof *idx);
    ssb4d_status st = group && idx ? groups_of(F, g, group, err)
                                   : ssb_fail(err, SSB4D_ENOMEM, "out of memory (fit standard errors)");
    fit_thin_params q = *p;
    q.band_power = 0; /* each group's own: the fraction of its power explained */
    double est[FIT_SE_GROUPS][4], bg[FIT_SE_GROUPS][SE_MAX_D], Hm[SE_MAX_D][SE_MAX_D] = {{0}};
    for (size_t k = 0; k < K && !st; k++) {
        size_t n = 0;
        for (size_t i = 0; i < F->n_bf; i++)
            if (group[i] == (int)k)
                idx[n++] = i;
        ssb4d_G *S = NULL;
        st = ssb_G_subset(F, idx, n, &S, err);
        if (!st)
            st = fit_thin_eval(S, g, &q, xs, npts, mem, f, err);
        ssb4d_G_free(S);
        *n_evals += npts;
        double H[SE_MAX_D][SE_MAX_D];
        if (!st)
            quadratic(&c, f, bg[k], H);
        for (int i = 0; !st && i < c.d; i++)
            for (int j = 0; j < c.d; j++)
                Hm[i][j] += H[i][j] / (double)K;
    }
    /* Each group's step on the groups' mean curvature: a group's own curvature is noisy at a low
     * dose (an eighth of the pixels), its gradient is what differs between groups. */
    double L[SE_MAX_D][SE_MAX_D];
    int ok = !st && cholesky(c.d, Hm, L);
    for (size_t k = 0; ok && k < K; k++) {
        double delta[SE_MAX_D] = {0}, u[SE_MAX_D];
        newton(&c, L, bg[k], delta);
        for (int j = 0; j < c.d; j++)
            u[j] = u0[j] + delta[j];
        to_x(&c, x, u, est[k]);
    }
    free(group);
    free(idx);
    if (st)
        return st;
    if (p->fit_rotation && ok) /* φ12 in the scan frame, each group at its own rotation */
        for (size_t k = 0; k < K; k++)
            est[k][FIT_PHI12] = fit_phi_probe_to_scan(g->flip, est[k][FIT_PHI12], est[k][FIT_ROT]);
    /* Per ring, the mean of its four groups (φ12, period 180°, circularly) and the spread about
     * it; the noise's standard error from the spread within the rings (K − 2 degrees of freedom),
     * the model check from the difference between them. */
    for (int j = 0; j < 4; j++) {
        int free_j = j == FIT_C10 ? c.c10 >= 0 : j == FIT_C12 ? c.astig > 0 : j == FIT_PHI12 ? c.astig == 2 : c.rot >= 0;
        if (!free_j)
            continue;
        if (!ok) {
            se[j] = split[j] = INFINITY;
            continue;
        }
        double mean[2], ss = 0;
        for (int ring = 0; ring < 2; ring++) {
            const size_t k0 = (size_t)ring * K / 2, k1 = k0 + K / 2;
            double m = 0, sc = 0, sn = 0;
            for (size_t k = k0; k < k1; k++) {
                m += est[k][j] / (double)(K / 2);
                sc += cos(est[k][j] * M_PI / 90.0), sn += sin(est[k][j] * M_PI / 90.0);
            }
            mean[ring] = j == FIT_PHI12 ? atan2(sn, sc) * 90.0 / M_PI : m;
            for (size_t k = k0; k < k1; k++) {
                double dv = est[k][j] - mean[ring];
                if (j == FIT_PHI12)
                    dv = dv - 180.0 * floor((dv + 90.0) / 180.0);
                ss += dv * dv;
            }
        }
        se[j] = sqrt(ss / (double)(K - 2) / (double)K);
        double dm = mean[0] - mean[1];
        split[j] = j == FIT_PHI12 ? dm - 180.0 * floor((dm + 90.0) / 180.0) : dm;
    }
    return SSB4D_OK;
}
