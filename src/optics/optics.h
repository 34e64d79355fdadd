/* optics.h — internal optics helpers shared by the stages. */
#ifndef SSB4D_OPTICS_H
#define SSB4D_OPTICS_H
#include "optics/physics.h"
#include "ssb4d_advanced.h"

/* SSB4D_EINVAL with one line unless kV, semiangle, scan steps and detector sampling are > 0 and the
 * centre and rotation are finite. */
ssb4d_status ssb_geometry_check(const ssb4d_geometry *g, ssb4d_err *err);

/* The aberrations of ab in p (physics.h) in internal units: C in Å, φ in rad, each coefficient's
 * orders, χ's quadratic form m and p->quadratic (only C10 and C12 non-zero). The other fields of
 * p are left as they are. */
void ssb_phys_aberrations(ssb_phys *p, const ssb4d_aberrations *ab);
#endif
