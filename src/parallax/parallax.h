/* parallax.h — the parallax (tilt-corrected bright-field) estimate; public API in ssb4d.h. */
#ifndef SSB4D_PARALLAX_PARALLAX_H
#define SSB4D_PARALLAX_PARALLAX_H
#include "common/workspace.h"
#include "ssb4d_advanced.h"

#include <stddef.h>

/* Whether bin (i, j) of the stored half-plane (ny × (nx/2+1)) may carry the parallax: off the
 * 3×3 bins at DC, off an even axis's Nyquist row and column, and inside 2α/λ (qmax2 = its square,
 * 1/Å²). Shared with the memory planner, which must count the same bins. */
int parallax_bin_eligible(size_t i, size_t j, size_t ny, size_t nx, const ssb4d_geometry *g, double qmax2);

/* ---- workspace (common/workspace.h) ---- */

/* The bins the estimate keeps at most for n_bf BF pixels: o->max_bins, fewer when their spectra
 * would pass o->max_bytes, at least 16. */
size_t parallax_want_bins(const ssb4d_parallax_opts *o, size_t n_bf);
/* The bins select_bins keeps on an ny x nx scan (the eligible ones, at most parallax_want_bins);
 * without a geometry every bin of the half-plane counts (an upper bound). */
size_t parallax_bins_of(size_t ny, size_t nx, size_t n_bf, const ssb4d_geometry *g, const ssb4d_parallax_opts *o);
/* The per-pixel spectra at nb bins. */
size_t parallax_spectra_bytes(size_t n_bf, size_t nb);
/* ssb4d_parallax_estimate once it runs (8 or more stored pixels): the bins' power over G (a pass);
 * with nb >= 4 bins, the spectra, live through a second pass and freed at the end. */
void parallax_workspace(size_t n_bf, size_t nb, ws_sink *out);
#endif
