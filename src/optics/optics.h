/* optics.h — internal optics helpers shared by the stages. */
#ifndef SSB4D_OPTICS_H
#define SSB4D_OPTICS_H
#include "ssb4d_advanced.h"

/* SSB4D_EINVAL with one line unless kV, semiangle, scan steps and detector sampling are > 0 and the
 * centre and rotation are finite. */
ssb4d_status ssb_geometry_check(const ssb4d_geometry *g, ssb4d_err *err);
#endif
