/* hotpix.h — which detector pixels are hot or dead, from their totals over a scan (SPEC §4).
 * One rule for the calibration and the importer (a .qem's correction and the calibration's flags
 * must agree), so it lives below both. */
#ifndef SSB4D_DETECTOR_HOTPIX_H
#define SSB4D_DETECTOR_HOTPIX_H
#include <stddef.h>
#include <stdint.h>

/* Hot-pixel rule: a pixel is flagged hot when its total over the scan exceeds
 * HOT_FACTOR * m + HOT_SIGMAS * sqrt(m) + HOT_FLOOR, m = median of its (up to 8) 3x3 neighbours'
 * totals; dead when its total is 0 while m >= DEAD_MIN (Poisson P(0) = e^-m is negligible). */
#define SSB4D_HOT_FACTOR 10.0
#define SSB4D_HOT_SIGMAS 5.0
#define SSB4D_HOT_FLOOR 10.0
#define SSB4D_DEAD_MIN 50.0

/* Median of the in-detector 3x3 neighbours' totals of pixel (r, c) (the pixel itself excluded;
 * pixels with skip[p] != 0 are left out unless every neighbour is skipped). skip may be NULL. */
double ssb_hotpix_neighbour_median(const double *tot, const unsigned char *skip, size_t rows,
                                   size_t cols, size_t r, size_t c);

/* Totals are float64: exact for counts (below 2^53), the float sums of float data otherwise.
 * Flags hot (and dead) pixels from per-pixel totals. Writes flat indices, ascending, into out
 * (room for rows*cols) and returns their count. */
size_t ssb_hotpix_find_flagged(const double *tot, size_t rows, size_t cols, int32_t *out);
#endif
