/* rng.c — counter-based seeding (SplitMix64 hash of seed and position), xoshiro256** streams and
 * the Poisson sampler (inversion below λ = 10, PTRS of Hörmann 1993 above). */
#include "sim/sim.h"

#include "common/splitmix.h"

#include <math.h>

void sim_rng_seed(sim_rng *r, uint64_t seed, uint64_t index)
{
    uint64_t x = seed;
    uint64_t h = ssb4d_splitmix64(&x);          /* hash(seed) */
    x = h ^ (index * 0xD1B54A32D192ED03ull + 0x8CB92BA72F3D8DD7ull);
    (void)ssb4d_splitmix64(&x);                 /* decorrelate neighbouring indices */
    for (int i = 0; i < 4; i++)
        r->s[i] = ssb4d_splitmix64(&x);
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3]))
        r->s[0] = 1;
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t sim_rng_next(sim_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double sim_rng_uniform(sim_rng *r) { return (double)(sim_rng_next(r) >> 11) * 0x1.0p-53; }

static uint64_t poisson_inversion(sim_rng *r, double lam)
{
    double u = sim_rng_uniform(r);
    double p = exp(-lam), cdf = p;
    uint64_t k = 0;
    while (u > cdf && k < 1000) {
        k++;
        p *= lam / (double)k;
        cdf += p;
        if (p == 0.0 && cdf < u) /* rounding left u above the reachable cdf: restart */
            return poisson_inversion(r, lam);
    }
    return k;
}

/* PTRS: transformed rejection with squeeze (Hörmann 1993), valid for lam >= 10. */
static uint64_t poisson_ptrs(sim_rng *r, double lam)
{
    double slam = sqrt(lam), loglam = log(lam);
    double b = 0.931 + 2.53 * slam;
    double a = -0.059 + 0.02483 * b;
    double invalpha = 1.1239 + 1.1328 / (b - 3.4);
    double vr = 0.9277 - 3.6224 / (b - 2.0);
    for (;;) {
        double U = sim_rng_uniform(r) - 0.5;
        double V = sim_rng_uniform(r);
        double us = 0.5 - fabs(U);
        double k = floor((2.0 * a / us + b) * U + lam + 0.43);
        if (us >= 0.07 && V <= vr)
            return (uint64_t)k;
        if (k < 0.0 || (us < 0.013 && V > us))
            continue;
        if (log(V) + log(invalpha) - log(a / (us * us) + b) <= -lam + k * loglam - lgamma(k + 1.0))
            return (uint64_t)k;
    }
}

uint64_t sim_poisson(sim_rng *r, double lam)
{
    if (!(lam > 0.0))
        return 0;
    return lam < 10.0 ? poisson_inversion(r, lam) : poisson_ptrs(r, lam);
}
