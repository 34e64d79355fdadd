/* test_fft_pass.c — the fused GPU loss's inverse FFT (src/cuda/fft_pass.h), run on the CPU: the
 * same Stockham passes the kernels run, each size 8 … 4096 against a direct transform in double,
 * and the real-output inverse through its M-point pre-step against the direct real inverse (the
 * imaginary parts of DC and Nyquist ignored, as real-output transforms do). Needs no GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#include "cuda/fft_pass.h"

static double urand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 32768.0 - 1.0;
}

/* max |fft − direct| / max |direct| over the N outputs of the complex inverse */
static double complex_err(int N, unsigned seed)
{
    fft_c *x = malloc(N * sizeof *x), *y = malloc(FFT_PADDED(N) * sizeof *y), *tw = malloc(N * sizeof *tw),
          *sc = malloc(N * sizeof *sc);
    for (int n = 0; n < N; n++)
        x[n] = fft_make((float)urand(&seed), (float)urand(&seed)), y[fft_ix(n)] = x[n];
    fft_twiddles(tw, N);
    fft_inverse_serial(y, N, tw, 1, sc);
    double emax = 0, vmax = 0;
    for (int m = 0; m < N; m++) {
        double re = 0, im = 0;
        for (int k = 0; k < N; k++) {
            double a = 2 * SSB_PI * (double)((long long)k * m % N) / N;
            re += x[k].x * cos(a) - x[k].y * sin(a);
            im += x[k].x * sin(a) + x[k].y * cos(a);
        }
        fft_c got = y[fft_ix(m)];
        emax = fmax(emax, hypot(re - got.x, im - got.y));
        vmax = fmax(vmax, hypot(re, im));
    }
    free(x), free(y), free(tw), free(sc);
    return emax / vmax;
}

/* the real inverse of NX points from X[0..NX/2] through fft_c2r_pre and an NX/2-point inverse */
static double real_err(int NX, unsigned seed)
{
    const int M = NX / 2;
    fft_c *X = malloc((M + 1) * sizeof *X), *z = malloc(FFT_PADDED(M) * sizeof *z), *tw = malloc(NX * sizeof *tw),
          *sc = malloc(M * sizeof *sc);
    for (int k = 0; k <= M; k++)
        X[k] = fft_make((float)urand(&seed), (float)urand(&seed));
    fft_twiddles(tw, NX);
    for (int k = 0; k < M; k++)
        z[fft_ix(k)] = fft_c2r_pre(X[k], X[M - k], k, tw);
    fft_inverse_serial(z, M, tw, 2, sc);
    double emax = 0, vmax = 0;
    for (int n = 0; n < NX; n++) {
        /* direct: X[0].re + X[M].re·(−1)^n + 2 Σ_{0<k<M} Re(X[k] e^{2πikn/NX}) */
        double v = X[0].x + ((n & 1) ? -X[M].x : X[M].x);
        for (int k = 1; k < M; k++) {
            double a = 2 * SSB_PI * (double)((long long)k * n % NX) / NX;
            v += 2 * (X[k].x * cos(a) - X[k].y * sin(a));
        }
        double got = (n & 1) ? z[fft_ix(n / 2)].y : z[fft_ix(n / 2)].x;
        emax = fmax(emax, fabs(got - v));
        vmax = fmax(vmax, fabs(v));
    }
    free(X), free(z), free(tw), free(sc);
    return emax / vmax;
}

static void test_complex_sizes(void **state)
{
    (void)state;
    for (int N = 8; N <= 4096; N *= 2) {
        double e = complex_err(N, 7u + (unsigned)N);
        if (e > 2e-6)
            fail_msg("N = %d: relative error %.3g", N, e);
    }
}

static void test_real_sizes(void **state)
{
    (void)state;
    for (int NX = 16; NX <= 4096; NX *= 2) {
        double e = real_err(NX, 11u + (unsigned)NX);
        if (e > 2e-6)
            fail_msg("NX = %d: relative error %.3g", NX, e);
    }
}

static void test_radices(void **state)
{
    (void)state;
    /* 512 = 8·8·8, 256 = 8·8·4, 128 = 8·8·2 */
    assert_int_equal(fft_radix(512, 1), 8);
    assert_int_equal(fft_radix(512, 64), 8);
    assert_int_equal(fft_radix(256, 64), 4);
    assert_int_equal(fft_radix(128, 64), 2);
    assert_true(fft_size_ok(512, 16, 4096));
    assert_false(fft_size_ok(384, 16, 4096));
    assert_false(fft_size_ok(8, 16, 4096));
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_complex_sizes), cmocka_unit_test(test_real_sizes),
                                       cmocka_unit_test(test_radices)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
