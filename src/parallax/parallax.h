/* parallax.h — the parallax (tilt-corrected bright-field) estimate; public API in ssb4d.h. */
#ifndef SSB4D_PARALLAX_PARALLAX_H
#define SSB4D_PARALLAX_PARALLAX_H
#include "ssb4d_advanced.h"

#include <stddef.h>

/* Whether bin (i, j) of the stored half-plane (ny × (nx/2+1)) may carry the parallax: off the
 * 3×3 bins at DC, off an even axis's Nyquist row and column, and inside 2α/λ (qmax2 = its square,
 * 1/Å²). Shared with the memory planner, which must count the same bins. */
int parallax_bin_eligible(size_t i, size_t j, size_t ny, size_t nx, const ssb4d_geometry *g, double qmax2);
#endif
