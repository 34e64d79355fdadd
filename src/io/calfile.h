/* calfile.h — the calibration JSON file (versioned schema, SPEC §8): read, write, layer. */
#ifndef SSB4D_IO_CALFILE_H
#define SSB4D_IO_CALFILE_H
#include "ssb4d.h"

#define SSB4D_CALFILE_SCHEMA "ssb4d.calibration"
#define SSB4D_CALFILE_VERSION 1

/* Every double is NaN when the file does not give it. */
typedef struct {
    int version;
    ssb4d_geometry geom;
    double bf_radius_px;         /* selection radius */
    double disk_radius_px;
    size_t det_shape[2], scan_shape[2];
    int has_ab;
    ssb4d_aberrations ab;
    double loss;
    char data_identity[96];      /* "sha256:<hex>" of the source file, or "" */
    int32_t *flagged;            /* malloc'ed; n_flagged entries */
    size_t n_flagged;
} ssb4d_calfile;

void ssb4d_calfile_init(ssb4d_calfile *c);          /* everything unset */
void ssb4d_calfile_free(ssb4d_calfile *c);
/* Fills from a measured calibration (copies the flagged list). */
ssb4d_status ssb4d_calfile_from_calibration(ssb4d_calfile *c, const ssb4d_calibration *cal,
                                            ssb4d_err *err);
/* JSON text (caller frees with free()). */
char *ssb4d_calfile_to_json(const ssb4d_calfile *c);
/* Atomic write (temp + rename). */
ssb4d_status ssb4d_calfile_write(const char *path, const ssb4d_calfile *c, ssb4d_err *err);
/* Reads; refuses malformed files and future versions with a clear message. */
ssb4d_status ssb4d_calfile_read(const char *path, ssb4d_calfile *c, ssb4d_err *err);
#endif
