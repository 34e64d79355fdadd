/* frames.c — results in both frames: the scan frame the fit works in, and the probe (detector)
 * frame, under a geometry's rotation and handedness (SPEC §2). One conversion for every client
 * (the command line's summary, JSON and calibration file; the fit's phi12_probe_deg). */
#include "fit/fit.h"

#include <math.h>

double ssb4d_phi12_to_probe(const ssb4d_geometry *g, double phi12_scan_deg)
{
    double r = fmod(fit_phi_scan_to_probe(g->flip, phi12_scan_deg, g->rotation_deg) + 90.0, 180.0);
    if (r < 0)
        r += 180.0;
    return r - 90.0;
}

void ssb4d_vector_to_probe(const ssb4d_geometry *g, const double scan[2], double probe[2])
{
    /* A detector vector d lies at R(rotation)·swap(d) in the scan frame (ssb_bf_k): undo both. */
    double a = g->rotation_deg * M_PI / 180.0, c = cos(a), s = sin(a);
    double p0 = c * scan[0] + s * scan[1], p1 = -s * scan[0] + c * scan[1];
    probe[0] = g->flip ? p1 : p0;
    probe[1] = g->flip ? p0 : p1;
}
