/* image_fft.c — the viewer's FFT panel of a phase image (ssb4d_image_fft_logmag). */
#include "common/fftw_lock.h"
#include "ssb4d_advanced.h"

#include <fftw3.h>
#include <math.h>

/* log(1 + |FFT|), the zero frequency in the middle: what the FFT view shows. */
ssb4d_status ssb4d_image_fft_logmag(ssb4d_mem *mem, float *img, size_t ny, size_t nx, ssb4d_err *err)
{
    size_t nxc = nx / 2 + 1;
    /* Under the session's budget (64-byte aligned, as FFTW likes). */
    float *in = ssb4d_mem_alloc(mem, ny * nx * sizeof *in, "the viewer's FFT input", err);
    fftwf_complex *out = in ? ssb4d_mem_alloc(mem, ny * nxc * sizeof *out, "the viewer's FFT", err) : NULL;
    if (!in || !out) {
        ssb4d_mem_free(mem, in, 0);
        return err->code;
    }
    ssb_fftw_lock(); /* FFTW's planner is not thread-safe; the library plans too */
    fftwf_plan pl = fftwf_plan_dft_r2c_2d((int)ny, (int)nx, in, out, FFTW_ESTIMATE);
    ssb_fftw_unlock();
    double mean = 0;
    for (size_t i = 0; i < ny * nx; i++)
        mean += img[i];
    mean /= (double)(ny * nx);
    for (size_t i = 0; i < ny * nx; i++) /* the mean removed: the DC peak would flatten the rest */
        in[i] = (float)(img[i] - mean);
    fftwf_execute(pl);
    for (size_t r = 0; r < ny; r++)
        for (size_t c = 0; c < nx; c++) {
            /* the r2c half plane holds columns 0..nx/2; the others are conjugate-symmetric */
            size_t rr = r, cc = c;
            if (c >= nxc)
                rr = (ny - r) % ny, cc = nx - c;
            const float *z = out[rr * nxc + cc];
            float m = log1pf(sqrtf(z[0] * z[0] + z[1] * z[1]));
            img[((r + ny / 2) % ny) * nx + (c + nx / 2) % nx] = m;
        }
    ssb_fftw_lock();
    fftwf_destroy_plan(pl);
    ssb_fftw_unlock();
    ssb4d_mem_free(mem, in, 0);
    ssb4d_mem_free(mem, out, 0);
    return SSB4D_OK;
}
