/* calfile.h — the calibration JSON file (versioned schema, SPEC §8): read, write, layer. */
#ifndef SSB4D_IO_CALFILE_H
#define SSB4D_IO_CALFILE_H
#include "ssb4d_advanced.h"

/* The file's struct (ssb4d_calfile) and its constants are public (include/ssb4d.h, "Calibration
 * files"): the clients read and write whole files through ssb4d_calfile_*. */

void ssb_calfile_init(ssb4d_calfile *c);          /* everything unset */
void ssb_calfile_free(ssb4d_calfile *c);
/* Fills from a measured calibration (copies the flagged list). */
ssb4d_status ssb_calfile_from_calibration(ssb4d_calfile *c, const ssb4d_calibration *cal,
                                          ssb4d_err *err);
/* Records a standard fit (ssb4d_fit with parameters p): the geometry it kept, the aberrations,
 * the loss, the branch check, how the rotation was obtained (given_by: who stated a given
 * rotation, e.g. "--rotation"; may be NULL) and the "fit" section (objective, φ12 in both frames,
 * confidence, parallax estimate). loss_n_bf: the BF pixels of the exact loss. Search settings,
 * trials, region and thick model are the caller's. */
void ssb_calfile_set_fit(ssb4d_calfile *c, const ssb4d_fit_result *r, const ssb4d_fit_params *p,
                         const char *given_by, size_t loss_n_bf);
/* JSON text (caller frees with free()). */
char *ssb_calfile_to_json(const ssb4d_calfile *c);
/* Atomic write (temp + rename). */
ssb4d_status ssb_calfile_write(const char *path, const ssb4d_calfile *c, ssb4d_err *err);
/* Reads; refuses malformed files and future versions with a clear message (SSB4D_EFORMAT, or
 * SSB4D_EIO when it cannot be read). c is initialised either way and must be freed. */
ssb4d_status ssb_calfile_read(const char *path, ssb4d_calfile *c, ssb4d_err *err);
/* 1 when both data identities are known (not "" or NULL) and differ, else 0. */
int ssb_calfile_identity_differs(const char *a, const char *b);
/* The pixel model c records (detector.edge_model) as ssb4d_calib_params.edge_pixel_S (S x S
 * samples per pixel: 1, 3, 5; 6 the area-integrated edge); 0 when it records none. */
int ssb_calfile_edge_pixel_S(const ssb4d_calfile *c);
#endif
