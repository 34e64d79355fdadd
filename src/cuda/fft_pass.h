/* fft_pass.h — the fused loss's inverse FFT (loss_fused.cu), one Stockham pass at a time.
 *
 * Plain C with SSB_HD, so the kernels and the CPU test (tests/test_fft_pass.c) run this very code.
 * An unnormalised inverse transform of N = 2^m points (8 ≤ N ≤ 4096) is a sequence of radix-R
 * Stockham passes (R = 8 while 8 or more points remain per group, then 4 or 2); each pass reads
 * every butterfly's R inputs (fft_load), then, after the threads' barrier, twiddles, transforms and
 * writes them (fft_store) into the same buffer. The output is in natural order. Twiddles come from
 * a table tw[m] = e^{+2πi·m/N'} made in double on the host (fft_twiddles), read with a stride so
 * an N'/2-point transform uses the N'-point table. Point x lives at buf[fft_ix(x)] (padded). Fixed order throughout: the same bits for the
 * same input, whatever runs beside it. */
#ifndef SSB4D_CUDA_FFT_PASS_H
#define SSB4D_CUDA_FFT_PASS_H
#include "optics/physics.h" /* SSB_HD, SSB_PI */

#include <math.h>
#include <stddef.h>

#ifdef __cplusplus
typedef struct alignas(8) { float x, y; } fft_c;
#else
typedef struct { _Alignas(8) float x; float y; } fft_c;
#endif

#define FFT_MAX_R 8 /* the largest radix: a thread holds 8 points */

SSB_HD static inline fft_c fft_make(float x, float y)
{
    fft_c z;
    z.x = x, z.y = y;
    return z;
}

/* The radix of the pass that starts with Ns (the product of the radices so far). */
SSB_HD static inline int fft_radix(int N, int Ns) { return N / Ns >= 8 ? 8 : N / Ns; }

/* A power of two in [lo, hi]. */
SSB_HD static inline int fft_size_ok(long long n, long long lo, long long hi)
{
    return n >= lo && n <= hi && (n & (n - 1)) == 0;
}

/* Point x's place in a buffer padded by one point every 16 (shared memory: the passes' strided
 * stores then fall on different banks); a padded N-point buffer holds FFT_PADDED(N) points. */
SSB_HD static inline int fft_ix(int x) { return x + (x >> 4); }
#define FFT_PADDED(N) ((N) + (N) / 16)

/* Butterfly j's R inputs: v[r] = buf[j + r·N/R]. */
SSB_HD static inline void fft_load(const fft_c *buf, int j, int R, int N, fft_c *v)
{
    const int s = N / R;
    for (int r = 0; r < R; r++)
        v[r] = buf[fft_ix(j + r * s)];
}

/* ×i */
SSB_HD static inline fft_c fft_i(fft_c a) { return fft_make(-a.y, a.x); }
SSB_HD static inline fft_c fft_add(fft_c a, fft_c b) { return fft_make(a.x + b.x, a.y + b.y); }
SSB_HD static inline fft_c fft_sub(fft_c a, fft_c b) { return fft_make(a.x - b.x, a.y - b.y); }
SSB_HD static inline fft_c fft_mul(fft_c a, fft_c b)
{
    return fft_make(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

/* The inverse 4-point DFT of a[0], a[s], a[2s], a[3s] in place (ω = +i). */
SSB_HD static inline void fft_dft4(fft_c *a, int s)
{
    fft_c s02 = fft_add(a[0], a[2 * s]), d02 = fft_sub(a[0], a[2 * s]);
    fft_c s13 = fft_add(a[s], a[3 * s]), d13 = fft_i(fft_sub(a[s], a[3 * s]));
    a[0] = fft_add(s02, s13), a[2 * s] = fft_sub(s02, s13);
    a[s] = fft_add(d02, d13), a[3 * s] = fft_sub(d02, d13);
}

/* The inverse R-point DFT of v in place, R = 2, 4 or 8 (y[k] = Σ v[n] e^{+2πi·nk/R}). */
SSB_HD static inline void fft_dft(fft_c *v, int R)
{
    if (R == 2) {
        fft_c a = v[0], b = v[1];
        v[0] = fft_add(a, b), v[1] = fft_sub(a, b);
        return;
    }
    if (R == 4) {
        fft_dft4(v, 1);
        return;
    }
    /* R = 8: the even and odd points' 4-point DFTs, then y[k] = E[k] + w^k O[k], y[k+4] = E[k] − w^k O[k] */
    const float c = 0.70710678118654752f;
    fft_c e[4] = {v[0], v[2], v[4], v[6]}, o[4] = {v[1], v[3], v[5], v[7]};
    fft_dft4(e, 1), fft_dft4(o, 1);
    fft_c w1 = fft_make(c * (o[1].x - o[1].y), c * (o[1].x + o[1].y)); /* e^{iπ/4}·o1 */
    fft_c w2 = fft_i(o[2]);                                             /* e^{iπ/2}·o2 */
    fft_c w3 = fft_make(-c * (o[3].x + o[3].y), c * (o[3].x - o[3].y)); /* e^{3iπ/4}·o3 */
    v[0] = fft_add(e[0], o[0]), v[4] = fft_sub(e[0], o[0]);
    v[1] = fft_add(e[1], w1), v[5] = fft_sub(e[1], w1);
    v[2] = fft_add(e[2], w2), v[6] = fft_sub(e[2], w2);
    v[3] = fft_add(e[3], w3), v[7] = fft_sub(e[3], w3);
}

/* Butterfly j of the pass (Ns, R) over N points: its inputs v twiddled by e^{2πi·r·(j mod Ns)/(Ns·R)},
 * transformed, and written to buf[(j/Ns)·Ns·R + j mod Ns + r·Ns]. tw: e^{+2πi·m/(N·tws)} at m·tws. */
SSB_HD static inline void fft_store(fft_c *buf, int j, int Ns, int R, int N, const fft_c *tw, int tws, fft_c *v)
{
    const int k = j % Ns, step = (N / (Ns * R)) * k * tws;
    for (int r = 1; r < R; r++)
        v[r] = fft_mul(v[r], tw[r * step]);
    fft_dft(v, R);
    const int d = (j / Ns) * Ns * R + k;
    for (int r = 0; r < R; r++)
        buf[fft_ix(d + r * Ns)] = v[r];
}

/* tw[m] = e^{+2πi·m/N}, m < N, rounded from double. */
static inline void fft_twiddles(fft_c *tw, int N)
{
    for (int m = 0; m < N; m++) {
        double a = 2 * SSB_PI * (double)m / (double)N;
        tw[m] = fft_make((float)cos(a), (float)sin(a));
    }
}

/* The whole transform by one caller (the CPU test; the kernels split the butterflies among their
 * threads with a barrier between load and store): buf's N points in place (padded: point x at
 * buf[fft_ix(x)], FFT_PADDED(N) points). */
static inline void fft_inverse_serial(fft_c *buf, int N, const fft_c *tw, int tws, fft_c *scratch)
{
    for (int Ns = 1; Ns < N;) {
        const int R = fft_radix(N, Ns), nb = N / R;
        for (int j = 0; j < nb; j++)
            fft_load(buf, j, R, N, scratch + (size_t)j * R);
        for (int j = 0; j < nb; j++)
            fft_store(buf, j, Ns, R, N, tw, tws, scratch + (size_t)j * R);
        Ns *= R;
    }
}

/* The real inverse's pre-step (a c2r of NX = 2M points as an M-point complex inverse): from the
 * half spectrum X[0..M] (imaginary parts of X[0] and X[M] taken as 0, as real-output transforms
 * do), Z[k] = E + i·O with E = X[k] + conj(X[M−k]), O = (X[k] − conj(X[M−k]))·e^{2πi·k/NX}; the
 * M-point inverse of Z is x[2m] + i·x[2m+1]. twx: the NX-point table. */
SSB_HD static inline fft_c fft_c2r_pre(fft_c a, fft_c b, int k, const fft_c *twx)
{
    if (k == 0)
        a.y = 0, b.y = 0;
    fft_c E = fft_make(a.x + b.x, a.y - b.y), D = fft_make(a.x - b.x, a.y + b.y);
    fft_c O = fft_mul(D, twx[k]);
    return fft_make(E.x - O.y, E.y + O.x);
}
#endif
