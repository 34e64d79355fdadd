/* hotpix.c — the hot / dead pixel rule (hotpix.h), shared by the calibration, which flags
 * pixels, and the importer, which corrects them while writing a .qem. */
#include "detector/hotpix.h"

#include <math.h>
#include <string.h>

static void sort_d(double *v, int n)
{
    for (int i = 1; i < n; i++) { /* insertion sort: n <= 8 */
        double x = v[i];
        int j = i - 1;
        while (j >= 0 && v[j] > x) {
            v[j + 1] = v[j];
            j--;
        }
        v[j + 1] = x;
    }
}

double ssb_hotpix_neighbour_median(const double *tot, const unsigned char *skip, size_t rows,
                                   size_t cols, size_t r, size_t c)
{
    double v[8], all[8];
    int n = 0, na = 0;
    for (int dr = -1; dr <= 1; dr++)
        for (int dc = -1; dc <= 1; dc++) {
            if (!dr && !dc)
                continue;
            long rr = (long)r + dr, cc = (long)c + dc;
            if (rr < 0 || cc < 0 || rr >= (long)rows || cc >= (long)cols)
                continue;
            size_t q = (size_t)rr * cols + (size_t)cc;
            all[na++] = tot[q];
            if (!skip || !skip[q])
                v[n++] = tot[q];
        }
    if (n == 0) {
        memcpy(v, all, sizeof all);
        n = na;
    }
    if (n == 0)
        return 0.0;
    sort_d(v, n);
    return (n & 1) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Smallest total among the (up to 8) neighbours on the detector. */
static double neighbour_min(const double *tot, size_t rows, size_t cols, size_t r, size_t c)
{
    double m = INFINITY;
    for (int dr = -1; dr <= 1; dr++)
        for (int dc = -1; dc <= 1; dc++) {
            long rr = (long)r + dr, cc = (long)c + dc;
            if ((dr || dc) && rr >= 0 && cc >= 0 && rr < (long)rows && cc < (long)cols &&
                tot[(size_t)rr * cols + (size_t)cc] < m)
                m = tot[(size_t)rr * cols + (size_t)cc];
        }
    return m;
}

size_t ssb_hotpix_find_flagged(const double *tot, size_t rows, size_t cols, int32_t *out)
{
    size_t n = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            double m = ssb_hotpix_neighbour_median(tot, NULL, rows, cols, r, c);
            double t = tot[r * cols + c];
            int hot = t > SSB4D_HOT_FACTOR * m + SSB4D_HOT_SIGMAS * sqrt(fmax(m, 0.0)) + SSB4D_HOT_FLOOR;
            /* Dead: zero among neighbours that all saw counts. A zero pixel on the rim of a
             * region that is dark anyway (beyond the scattering or a simulation's band limit) is
             * not a fault. */
            int dead = tot[r * cols + c] == 0 && m >= SSB4D_DEAD_MIN &&
                       neighbour_min(tot, rows, cols, r, c) >= SSB4D_DEAD_MIN;
            if (hot || dead)
                out[n++] = (int32_t)(r * cols + c);
        }
    return n;
}
