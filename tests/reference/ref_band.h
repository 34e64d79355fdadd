/* ref_band.h — float64 reference of the thick-sample band objective (SPEC §5.6), tests only.
 *
 * Straight from the formula: γ from ref_gamma (ref_ssb.c, the SPEC 5.6 weights whenever a thick
 * model is given), G from ref_data (full-plane double DFT of each BF image), sums in double. */
#ifndef SSB4D_REF_BAND_H
#define SSB4D_REF_BAND_H

#include "ref_ssb.h"

/* fit(θ) = Σ_{q∈band} w_q (|Σ_k G(q,k)·conj(γ(q,k))|² − Σ_k T_k|γ(q,k)|²) / Σ_k |γ(q,k)|²,
 * band lo < |q| < hi (1/Å), T_k = G(0,k) the pixel's total counts (the counting noise's share),
 * q at its fftfreq value. full_plane = 0: the SPEC's stored half-plane (columns 0..nx/2) with
 * w_q = 2 except columns 0 and nx/2; full_plane = 1: every bin of the full plane with w_q = 1
 * (equal to the half-plane form when χ is even-m and the band lies inside Nyquist).
 * th may be NULL (thin). */
double ref_band_fit(const ref_data *d, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                    const ssb4d_thick *th, double lo, double hi, int full_plane);

/* Σ_{q∈band} w_q Σ_k |G(q,k)|² over the pixels with A(k) > 0 (half-plane weights). */
double ref_band_power(const ref_data *d, const ssb4d_geometry *g, double lo, double hi);
#endif
