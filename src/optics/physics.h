/* physics.h — the SSB model written once, for the host (C17, gcc) and the device (nvcc):
 * χ, the aperture A, the probe P = A·e^{−iχ}, the sinc, γ's unit conjugate n(q,k) with its
 * degenerate-bin rule, the thick model (defocus spread over the thickness, tilt) and the band
 * objective's conj(γ) (SPEC 5.2, 5.4, 5.6; docs/ssb-math.md).
 *
 * Every function is static inline and SSB_HD, so the C passes (src/ssb/) and the CUDA kernels
 * (src/cuda/kernels.cu) evaluate the same expressions in the same order and types. Each side's
 * bits are its own (the host's libm is not the device's, and nvcc fuses a·b + c into one FMA where
 * gcc on x86-64 does not), so the rule is: an expression here is written exactly as each side
 * evaluated it before it moved here. Where the two sides differed, the difference is kept, marked
 * "per side" and selected by SSB_DEVICE_PASS (common/hd.h: 1 only in a GPU compiler's device pass).
 *
 * Only plain C: no <complex.h> (nvcc compiles this as C++), no compound literals, no library
 * headers of ssb4d but common/hd.h; the host-only helpers that fill ssb_phys from the public structs are in
 * optics.h. */
#ifndef SSB4D_OPTICS_PHYSICS_H
#define SSB4D_OPTICS_PHYSICS_H
#include "common/hd.h" /* SSB_HD, SSB_DEVICE_PASS: neutral, for any GPU compiler */

#include <math.h>

#define SSB_PI 3.14159265358979323846 /* M_PI's digits (nvcc's headers need not define M_PI) */
#define SSB_N_ABERR 14                 /* SSB4D_N_ABERR (optics.c checks they agree) */

/* A complex value as a plain pair, the layout of double complex and double2 (the float passes
 * keep their own cfloat / float2). */
typedef struct {
    double re, im;
} ssb_c64;

/* One parameter set of the model: the probe, the detector sampling, the aberrations and the thick
 * model. Plain data, copied as is to the device. */
typedef struct {
    double C[SSB_N_ABERR], phi[SSB_N_ABERR]; /* Å, rad */
    double m[3];                             /* χ(v) = πλ (m0 vx² + 2 m1 vx vy + m2 vy²) when quadratic */
    int an[SSB_N_ABERR], am[SSB_N_ABERR];    /* each coefficient's radial and azimuthal order */
    int quadratic;                           /* only C10 and C12 are non-zero */
    int thick;                               /* the thick model's weights are applied */
    double t, tau[2];                        /* thickness (Å), tilt (row, col; rad) */
    double lambda, alpha0, ang[2];           /* Å; probe semiangle, detector sampling (row, col), rad */
} ssb_phys; /* (field order: C, φ, m and the orders where the band kernel read them before) */

SSB_HD static inline ssb_c64 ssb_c64_make(double re, double im)
{
    ssb_c64 z;
    z.re = re, z.im = im;
    return z;
}

/* a·b written out (the host's complex multiply has the same terms; it calls __muldc3 only when
 * both results are NaN, which finite inputs never give). */
SSB_HD static inline ssb_c64 ssb_cmul(ssb_c64 a, ssb_c64 b)
{
    return ssb_c64_make(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re);
}
SSB_HD static inline ssb_c64 ssb_conj(ssb_c64 a) { return ssb_c64_make(a.re, -a.im); }
SSB_HD static inline double ssb_cabs(ssb_c64 a) { return hypot(a.re, a.im); } /* glibc's cabs */

/* sin x, cos x: one sincos on the device; on the host two calls, as the passes made them (gcc
 * pairs them into one sincos itself). Per side. */
SSB_HD static inline void ssb_sincos(double x, double *s, double *c)
{
#if SSB_DEVICE_PASS
    sincos(x, s, c);
#else
    *s = sin(x);
    *c = cos(x);
#endif
}

/* χ(v) in rad (SPEC 5.2, the section-2 series): the quadratic form, or the series in C, φ, at
 * wavelength lambda (p->lambda; a pass whose λ is its geometry's passes that one, so that the
 * device compiler sees one loop-invariant value). */
SSB_HD static inline double ssb_chi_l(const ssb_phys *p, double lambda, double vx, double vy)
{
    if (p->quadratic)
        return SSB_PI * lambda * (p->m[0] * vx * vx + 2 * p->m[1] * vx * vy + p->m[2] * vy * vy);
    double r2 = vx * vx + vy * vy;
    if (r2 == 0.0)
        return 0.0;
    double alpha = lambda * sqrt(r2), ph = atan2(vy, vx), sum = 0.0, ap = alpha;
    for (int n = 1; n <= 5; n++) {
        ap *= alpha; /* alpha^(n+1) */
        for (int i = 0; i < SSB_N_ABERR; i++) {
            if (p->an[i] != n || p->C[i] == 0.0)
                continue;
            int mm = p->am[i];
            sum += p->C[i] * ap / (n + 1) * (mm ? cos(mm * (ph - p->phi[i])) : 1.0);
        }
    }
    return 2.0 * SSB_PI / lambda * sum;
}
SSB_HD static inline double ssb_chi(const ssb_phys *p, double vx, double vy) { return ssb_chi_l(p, p->lambda, vx, vy); }

/* A(v): the soft aperture with a one-pixel linear edge (SPEC 5.2); ang0, ang1 the detector
 * sampling in rad. */
SSB_HD static inline double ssb_aperture(double lambda, double alpha0, double ang0, double ang1, double vx,
                                         double vy)
{
    double r = sqrt(vx * vx + vy * vy);
    double w = r > 0 ? sqrt(vx * vx * ang0 * ang0 + vy * vy * ang1 * ang1) / r : ang0;
    double A = (alpha0 - lambda * r) / w + 0.5;
    return A < 0 ? 0 : A > 1 ? 1 : A;
}

/* P(v) = A(v)·e^{−iχ(v)}, *A = A(v). */
SSB_HD static inline ssb_c64 ssb_probe(const ssb_phys *p, double vx, double vy, double *A)
{
    *A = ssb_aperture(p->lambda, p->alpha0, p->ang[0], p->ang[1], vx, vy);
    if (*A == 0.0)
        return ssb_c64_make(0, 0);
    double sn, cs;
    ssb_sincos(ssb_chi(p, vx, vy), &sn, &cs);
    return ssb_c64_make(*A * cs, -*A * sn);
}

SSB_HD static inline double ssb_sinc(double x) { return fabs(x) < 1e-6 ? 1.0 : sin(x) / x; }

/* The tilt's phase 2π q·τ of the thick model. */
SSB_HD static inline double ssb_tilt_phase(const ssb_phys *p, double qx, double qy)
{
    return 2 * SSB_PI * (qx * p->tau[0] + qy * p->tau[1]);
}

/* The thick model's sinc arguments (before the factor t/2) of the two trotters at (q, k), from
 * |q|², q·k and the tilt phase qt: r1,2 = ∓πλ(|q|² ∓ 2q·k) − qt (the band objective's form). */
SSB_HD static inline double ssb_thick_r1(double lambda, double q2, double qk, double qt)
{
    return -SSB_PI * lambda * (q2 - 2 * qk) - qt;
}
SSB_HD static inline double ssb_thick_r2(double lambda, double q2, double qk, double qt)
{
    return SSB_PI * lambda * (q2 + 2 * qk) - qt;
}

/* conj(γ)/|γ| with the degenerate-bin rule (docs/ssb-math.md, "degenerate bins"): where both
 * trotter terms are present and cancel exactly (|γ| < 1e-8: χ(q) = 0 on a grid bin, or every bin
 * of the triple overlap at zero aberration), γ's direction as the aberrations leave that point,
 * −i·t1/|t1|. t1 and t2 are the two weighted terms, γ = t1 − t2. */
SSB_HD static inline ssb_c64 ssb_unit_conj(ssb_c64 t1, ssb_c64 t2)
{
    ssb_c64 gam = ssb_c64_make(t1.re - t2.re, t1.im - t2.im);
    double mag = ssb_cabs(gam);
    if (mag >= 1e-8)
        return ssb_c64_make(gam.re / mag, -gam.im / mag);
    double m1 = ssb_cabs(t1), m2 = ssb_cabs(t2);
    if (m1 > 0) { /* conj(−i·t1)/|t1| */
#if SSB_DEVICE_PASS
        return ssb_c64_make(t1.im / m1, t1.re / m1);
#else
        /* Per side: the host's −I·t1, a full complex multiply by (−0, −1), whose zeros' signs
         * can differ from (t1.im, −t1.re)'s. */
        double xr = -0.0 * t1.re - -1.0 * t1.im, xi = -0.0 * t1.im + -1.0 * t1.re;
        return ssb_c64_make(xr / m1, -xi / m1);
#endif
    }
    return m2 > 0 ? ssb_c64_make(-t2.re / m2, t2.im / m2) : ssb_c64_make(0, 0);
}

/* n(q,k) = conj(γ)/|γ| in double at one frequency vector q for the BF pixel at k with A(k) = Ak,
 * P(k) = Pk. fast (only C10/C12, thin, square pixels): the separable form, two exponentials
 * (a, b: the pixel's phasor slopes 2πλ Mk); else P(k∓q) directly, with the thick model's weights
 * when p->thick. */
SSB_HD static inline ssb_c64 ssb_n_at(const ssb_phys *p, int fast, double kx, double ky, double Ak, ssb_c64 Pk,
                                      double a, double b, double qx, double qy)
{
    if (Ak == 0.0)
        return ssb_c64_make(0, 0);
    if (fast) {
        double k2 = kx * kx + ky * ky, q2 = qx * qx + qy * qy, dot = qx * kx + qy * ky;
        double chq = SSB_PI * p->lambda * (p->m[0] * qx * qx + 2 * p->m[1] * qx * qy + p->m[2] * qy * qy);
        double r1 = sqrt(fmax(q2 - 2 * dot + k2, 0.0)), r2 = sqrt(fmax(q2 + 2 * dot + k2, 0.0));
        double A1 = fmin(fmax((p->alpha0 - p->lambda * r1) / p->ang[0] + 0.5, 0.0), 1.0);
        double A2 = fmin(fmax((p->alpha0 - p->lambda * r2) / p->ang[0] + 0.5, 0.0), 1.0);
        double sn, cs, ps, pc;
        ssb_sincos(chq, &sn, &cs);
        ssb_sincos(a * qx + b * qy, &ps, &pc);
        ssb_c64 e = ssb_c64_make(cs, -sn), ph = ssb_c64_make(Ak * pc, Ak * ps);
#if SSB_DEVICE_PASS
        ssb_c64 pe = ssb_cmul(ph, e), pce = ssb_cmul(ph, ssb_conj(e));
        return ssb_unit_conj(ssb_c64_make(A1 * pe.re, A1 * pe.im), ssb_c64_make(A2 * pce.re, A2 * pce.im));
#else
        /* Per side: the host's p·A1·e, (p·A1)·e. */
        return ssb_unit_conj(ssb_cmul(ssb_c64_make(ph.re * A1, ph.im * A1), e),
                             ssb_cmul(ssb_c64_make(ph.re * A2, ph.im * A2), ssb_conj(e)));
#endif
    }
    double A1, A2;
    ssb_c64 P1 = ssb_probe(p, kx - qx, ky - qy, &A1); /* P(k−q) (SPEC 5.4) */
    ssb_c64 P2 = ssb_probe(p, kx + qx, ky + qy, &A2); /* P(k+q) */
    ssb_c64 t1 = ssb_cmul(P1, ssb_conj(Pk)), t2 = ssb_cmul(ssb_conj(P2), Pk);
    if (p->thick) {
        double k2 = kx * kx + ky * ky, qt = ssb_tilt_phase(p, qx, qy);
        double r1 = -SSB_PI * p->lambda * ((qx - kx) * (qx - kx) + (qy - ky) * (qy - ky) - k2) - qt;
        double r2 = SSB_PI * p->lambda * ((qx + kx) * (qx + kx) + (qy + ky) * (qy + ky) - k2) - qt;
        double w1 = ssb_sinc(r1 * p->t / 2), w2 = ssb_sinc(r2 * p->t / 2);
        t1 = ssb_c64_make(t1.re * w1, t1.im * w1);
        t2 = ssb_c64_make(t2.re * w2, t2.im * w2);
    }
    return ssb_unit_conj(t1, t2);
}

/* The band objective's conj(γ) = conj(t1 − t2) at bin q (|q|² = q2, q·k = qk, tilt phase qt) of
 * the BF pixel at k with P(k) = (Pkr, Pki), for any χ: t1 = A1·e^{−iχ(k−q)}·conj(P(k)),
 * t2 = A2·e^{iχ(k+q)}·P(k), weighted by the thick model's sincs when p->thick. A1, A2 = A(q∓k);
 * lambda as ssb_chi_l's. */
SSB_HD static inline ssb_c64 ssb_band_cgamma(const ssb_phys *p, double lambda, double kx, double ky, double Pkr,
                                             double Pki, double A1, double A2, double qx, double qy, double q2,
                                             double qk, double qt)
{
    double x1 = ssb_chi_l(p, lambda, kx - qx, ky - qy);
    double x2 = ssb_chi_l(p, lambda, kx + qx, ky + qy), s1, c1, s2, c2;
    ssb_sincos(x1, &s1, &c1);
    ssb_sincos(x2, &s2, &c2);
    double ar = A1 * c1, ai = -A1 * s1, br = A2 * c2, bi = A2 * s2;
    double t1r = ar * Pkr + ai * Pki, t1i = ai * Pkr - ar * Pki;
    double t2r = br * Pkr - bi * Pki, t2i = br * Pki + bi * Pkr;
    if (p->thick) {
        double r1 = ssb_thick_r1(lambda, q2, qk, qt), r2 = ssb_thick_r2(lambda, q2, qk, qt);
        double w1 = ssb_sinc(r1 * p->t / 2), w2 = ssb_sinc(r2 * p->t / 2);
        t1r *= w1, t1i *= w1, t2r *= w2, t2i *= w2;
    }
    return ssb_c64_make(t1r - t2r, -(t1i - t2i));
}
#endif
