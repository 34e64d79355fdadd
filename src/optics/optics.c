/* optics.c — wavelength, aberration function χ and the coefficient table (SPEC §2, §5.2). */
#include "optics/optics.h"

#include "common/err.h"

#include <ctype.h>
#include <math.h>
#include <string.h>
#include <strings.h>

double ssb4d_wavelength_A(double kv)
{
    /* CODATA 2018 exact/recommended values. */
    const double h = 6.62607015e-34, m = 9.1093837015e-31, e = 1.602176634e-19, c = 299792458.0;
    double V = kv * 1e3;
    double lambda_m = h / sqrt(2.0 * m * e * V * (1.0 + e * V / (2.0 * m * c * c)));
    return lambda_m * 1e10;
}

static const struct {
    const char *name;
    int n, m;
} aberr_table[SSB4D_N_ABERR] = {
    {"C10", 1, 0}, {"C12", 1, 2}, {"C21", 2, 1}, {"C23", 2, 3}, {"C30", 3, 0},
    {"C32", 3, 2}, {"C34", 3, 4}, {"C41", 4, 1}, {"C43", 4, 3}, {"C45", 4, 5},
    {"C50", 5, 0}, {"C52", 5, 2}, {"C54", 5, 4}, {"C56", 5, 6},
};

const char *ssb4d_aberr_name(int i) { return (i >= 0 && i < SSB4D_N_ABERR) ? aberr_table[i].name : "?"; }
int ssb4d_aberr_n(int i) { return (i >= 0 && i < SSB4D_N_ABERR) ? aberr_table[i].n : 0; }
int ssb4d_aberr_m(int i) { return (i >= 0 && i < SSB4D_N_ABERR) ? aberr_table[i].m : 0; }

int ssb4d_aberr_index(const char *name)
{
    for (int i = 0; i < SSB4D_N_ABERR; i++)
        if (strcasecmp(name, aberr_table[i].name) == 0)
            return i;
    return -1;
}

double ssb4d_chi(const ssb4d_aberrations *ab, double lambda, double vx, double vy)
{
    double r2 = vx * vx + vy * vy;
    if (r2 == 0.0)
        return 0.0;
    double alpha = lambda * sqrt(r2);
    double phi = atan2(vy, vx);
    double sum = 0.0;
    for (int i = 0; i < SSB4D_N_ABERR; i++) {
        double C = ab->C_nm[i];
        if (C == 0.0)
            continue;
        int n = aberr_table[i].n, m = aberr_table[i].m;
        double ang = m ? cos(m * (phi - ab->phi_deg[i] * (M_PI / 180.0))) : 1.0;
        sum += C * 10.0 * pow(alpha, n + 1) / (n + 1) * ang; /* nm → Å */
    }
    return 2.0 * M_PI / lambda * sum;
}

_Static_assert(SSB_N_ABERR == SSB4D_N_ABERR, "physics.h's coefficient count");

void ssb_phys_aberrations(ssb_phys *p, const ssb4d_aberrations *ab)
{
    p->quadratic = 1;
    for (int i = 0; i < SSB4D_N_ABERR; i++) {
        p->C[i] = ab->C_nm[i] * 10.0;
        p->phi[i] = ab->phi_deg[i] * (M_PI / 180.0);
        p->an[i] = aberr_table[i].n;
        p->am[i] = aberr_table[i].m;
        if (p->C[i] != 0.0 && i != SSB4D_C10 && i != SSB4D_C12)
            p->quadratic = 0;
    }
    double cs = cos(2 * p->phi[SSB4D_C12]), sn = sin(2 * p->phi[SSB4D_C12]);
    p->m[0] = p->C[SSB4D_C10] + p->C[SSB4D_C12] * cs;
    p->m[1] = p->C[SSB4D_C12] * sn;
    p->m[2] = p->C[SSB4D_C10] - p->C[SSB4D_C12] * cs;
}

ssb4d_status ssb_geometry_check(const ssb4d_geometry *g, ssb4d_err *err)
{
    if (!(g->kv > 0) || !(g->semiangle_mrad > 0) || !(g->scan_step_A[0] > 0) ||
        !(g->scan_step_A[1] > 0) || !(g->det_sampling_mrad[0] > 0) || !(g->det_sampling_mrad[1] > 0) ||
        !isfinite(g->centre_px[0]) || !isfinite(g->centre_px[1]) || !isfinite(g->rotation_deg))
        return ssb_fail(err, SSB4D_EINVAL,
                        "geometry is incomplete or invalid (kV, semiangle, scan step, detector "
                        "sampling must be > 0; centre and rotation finite)");
    return SSB4D_OK;
}
