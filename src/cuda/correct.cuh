/* correct.cuh — the correction of one bin for one BF pixel on the device (kernels.cu's
 * correction kernels and loss_fused.cu's fused loss share it, so both make the same bits). */
#ifndef SSB4D_CUDA_CORRECT_CUH
#define SSB4D_CUDA_CORRECT_CUH
#include "kernels.h"

#include <cuda_runtime.h>
#include <math.h>

#define PI SSB_PI

/* The SSB model in double (χ, A, P, γ, n(q,k), the thick model) is optics/physics.h's, the C
 * passes' own; what follows is the device's: the fast kernel in float, the grids, the sums. */

/* ---- the fast kernel in float (correct.c corr_fast), its phasors evaluated directly ------- */

/* e^{iθ} for a double θ: reduced to [−π, π] in double, then sincos in float. */
__device__ static float2 phasor(double th)
{
    th -= 2 * PI * rint(th * (1.0 / (2 * PI)));
    float sn, cs;
    sincosf((float)th, &sn, &cs);
    return make_float2(cs, sn);
}

/* e^{−iχ(q)} of the fast kernel: a function of the bin alone, the same for every BF pixel. */
__device__ static float2 f_chi_phasor(const cu_set &s, double qrd, double qcd)
{
    return phasor(-PI * s.p.lambda * (s.p.m[0] * qrd * qrd + 2 * s.p.m[1] * qrd * qcd + s.p.m[2] * qcd * qcd));
}

/* The fast kernel's n(q,k) given E = f_chi_phasor(q). */
__device__ static float2 f_n_fast_e(const cu_set &s, float2 E, double kxd, double kyd, float Ak, double a, double b,
                                    double qrd, double qcd)
{
    const float qr = (float)qrd, qc = (float)qcd, kx = (float)kxd, ky = (float)kyd;
    const float k2 = kx * kx + ky * ky;
    const float dot = qr * kx + qc * ky, base = qr * qr + k2 + qc * qc;
    float v1 = fmaxf(base - 2 * dot, 0.0f), v2 = fmaxf(base + 2 * dot, 0.0f);
    const float a0 = (float)s.p.alpha0, lam = (float)s.p.lambda, invw = s.inv_w;
    float A1 = fminf(fmaxf((a0 - lam * sqrtf(v1)) * invw + 0.5f, 0.0f), 1.0f);
    float A2 = fminf(fmaxf((a0 - lam * sqrtf(v2)) * invw + 0.5f, 0.0f), 1.0f);
    const float er = E.x, ei = E.y; /* e^{−iχ(q)} */
    const float2 P = phasor(a * qrd + b * qcd);
    const float pr = Ak * P.x, pi = Ak * P.y;
    float dr = (A1 - A2) * er, di = (A1 + A2) * ei;
    float gr = pr * dr - pi * di, gi = pr * di + pi * dr;
    float m2 = gr * gr + gi * gi;
    if (m2 < 1e-16f && A1 + A2 > 0.0f) { /* degenerate: −i·p·e */
        float xr = pr * er - pi * ei, xi = pr * ei + pi * er;
        gr = xi, gi = -xr;
        m2 = gr * gr + gi * gi;
    }
    m2 = fmaxf(m2, 1e-16f);
    float inv = rsqrtf(m2);
    return make_float2(gr * inv, -gi * inv);
}

/* G at fine bin (i, j): the native half plane continued periodically, mirrored for the other half. */
__device__ static float2 g_at(const float2 *plane, const cu_grid &g, int i, int j)
{
    int r = i, col = j;
    if (g.f != 1) /* the fine grid: no integer division on the native one */
        r = i % g.ny, col = j % g.nx;
    if (col < g.nxh)
        return plane[(size_t)r * g.nxh + col];
    float2 v = plane[(size_t)((g.ny - r) % g.ny) * g.nxh + (g.nx - col)];
    return make_float2(v.x, -v.y);
}

/* n(q,k) in double with the Nyquist alias average (correct.c n_bin): the generic kernel's every
 * bin, and the fast kernel's Nyquist row and column. */
__device__ static float2 n_bin(const cu_set &s, double kx, double ky, double Ak, ssb_c64 Pk, double a, double b,
                               double qx, double qy, int nyq_row, int nyq_col)
{
    int ar = nyq_row ? 2 : 1, ac = nyq_col ? 2 : 1;
    double2 acc = make_double2(0, 0);
    for (int u = 0; u < ar; u++)
        for (int v = 0; v < ac; v++) {
            ssb_c64 w = ssb_n_at(&s.p, s.fast, kx, ky, Ak, Pk, a, b, u ? -qx : qx, v ? -qy : qy);
            acc.x += w.re, acc.y += w.im;
        }
    return make_float2((float)(acc.x / (ar * ac)), (float)(acc.y / (ar * ac)));
}

/* −i·(G·n) */
__device__ static float2 corrected(float2 gv, float2 n)
{
    float yr = gv.x * n.x - gv.y * n.y, yi = gv.x * n.y + gv.y * n.x;
    return make_float2(yi, -yr);
}
#endif
