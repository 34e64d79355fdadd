/* abi.c — what bindings ask of the library they load: its version, and the size of each public
 * struct, so that a binding mirroring them (python/ssb4d/_lib.py) refuses a library whose layout
 * differs instead of reading the wrong fields. */
#include "ssb4d_advanced.h"

#include <string.h>

const char *ssb4d_version(void) { return SSB4D_VERSION_STRING; }

#define T(name) {#name, sizeof(name)}
static const struct {
    const char *name;
    size_t size;
} TYPES[] = {
    T(ssb4d_err),           T(ssb4d_stage_record),   T(ssb4d_aberrations),   T(ssb4d_thick),
    T(ssb4d_geometry),      T(ssb4d_calib_params),   T(ssb4d_calibration),   T(ssb4d_values),
    T(ssb4d_parallax),      T(ssb4d_fit_trial),      T(ssb4d_fit_params),    T(ssb4d_fit_result),
    T(ssb4d_session_script), T(ssb4d_plan_stage),    T(ssb4d_plan),          T(ssb4d_plan_input),
    T(ssb4d_session_opts),  T(ssb4d_tilt_result),    T(ssb4d_preview_req),   T(ssb4d_import_params),
    T(ssb4d_import_report), T(ssb4d_sim_params),     T(ssb4d_sim_info),      T(ssb4d_machine_profile),
    T(ssb4d_virtual_params), T(ssb4d_virtual_images), T(ssb4d_refine_params), T(ssb4d_refine_result),
};
#undef T

size_t ssb4d_abi_sizeof(const char *type)
{
    if (!type)
        return 0;
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (!strcmp(TYPES[i].name, type))
            return TYPES[i].size;
    return 0;
}
