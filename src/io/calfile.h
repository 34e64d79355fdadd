/* calfile.h — the calibration JSON file (versioned schema, SPEC §8): read, write, layer. */
#ifndef SSB4D_IO_CALFILE_H
#define SSB4D_IO_CALFILE_H
#include "ssb4d.h"

#define SSB4D_CALFILE_SCHEMA "ssb4d.calibration"
#define SSB4D_CALFILE_VERSION 1

/* One recorded trial of a fit (the best ones are kept in the file). */
typedef struct {
    int stage;                   /* as ssb4d_fit_trial.stage (0 global, 1..3 Nelder–Mead) */
    size_t number;               /* position in the fit's trace */
    double C10_nm, C12_nm, phi12_deg, loss;
} ssb4d_calfile_trial;

/* The fit of one scan region (half-open rectangle [r0, r1) × [c0, c1) of scan positions). */
typedef struct {
    size_t r0, r1, c0, c1;
    double C10_nm, C12_nm, phi12_deg, loss;
} ssb4d_calfile_region;

/* Every double is NaN when the file does not give it; counts are 0. A thick model (has_thick)
 * has finite tilt and thickness. rotation_deg is the rotation to reconstruct with (the branch,
 * if flipped, already included). best[] is written only with the search settings (has_search). */
typedef struct {
    int version;
    ssb4d_geometry geom;
    double bf_radius_px;         /* selection radius */
    double disk_radius_px;
    size_t det_shape[2], scan_shape[2];
    int has_ab;
    ssb4d_aberrations ab;
    double loss;
    char data_identity[96];      /* "sha256:<hex>" of the data file, "qem-body-sha256:<hex>" of a
                                    .qem's encoded body (cli_data_identity), or "" (unknown) */
    int32_t *flagged;            /* malloc'ed; n_flagged entries */
    size_t n_flagged;
    size_t n_bf;                 /* selected BF pixels (0 unknown) */
    /* Thick-sample model (fit --tilt); has_thick = 0: thin. gain = fit / standard fit. */
    int has_thick;
    ssb4d_thick thick;
    double gain;
    /* 180° branch check (SPEC §6.3): 1 if the fit flipped the rotation; skewness of the kept
     * phase and of the other branch (NaN when not evaluated). */
    int branch_flipped;
    double skewness, skewness_other;
    /* Search settings of the fit that produced the aberrations (has_search = 0: none). */
    int has_search;
    size_t trials;
    uint64_t seed;
    double range_lo[3], range_hi[3]; /* C10 nm, C12 nm, φ12 deg */
    int locked[3];
    size_t evaluations;
    ssb4d_calfile_trial *best;   /* malloc'ed; the best trials, lowest loss first (<= 50) */
    size_t n_best;
    /* The fit ran on this scan region only (has_region = 0: the full field). */
    int has_region;
    size_t region[4];            /* r0, r1, c0, c1 */
    ssb4d_calfile_region *regions; /* malloc'ed; fit-regions results */
    size_t n_regions;
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
/* Reads; refuses malformed files and future versions with a clear message (SSB4D_EFORMAT, or
 * SSB4D_EIO when it cannot be read). c is initialised either way and must be freed. */
ssb4d_status ssb4d_calfile_read(const char *path, ssb4d_calfile *c, ssb4d_err *err);
/* 1 when both data identities are known (not "" or NULL) and differ, else 0. */
int ssb4d_calfile_identity_differs(const char *a, const char *b);
#endif
