/* calfile.h — the calibration JSON file (versioned schema, SPEC §8): read, write, layer. */
#ifndef SSB4D_IO_CALFILE_H
#define SSB4D_IO_CALFILE_H
#include "ssb4d_advanced.h"

#define SSB4D_CALFILE_SCHEMA "ssb4d.calibration"
#define SSB4D_CALFILE_VERSION 1

/* rotation_source.method: how rotation_deg was obtained. */
#define SSB4D_CALFILE_ROT_GIVEN "given"          /* stated: --rotation, a sidecar, a calibration file */
#define SSB4D_CALFILE_ROT_COM "centre of mass"   /* measured by `ssb4d calibrate`; 180° branch open */
#define SSB4D_CALFILE_ROT_UNDETERMINED "undetermined" /* nothing measured it (calibrate set 0) */
#define SSB4D_CALFILE_ROT_FIT "fit"              /* fitted with the aberrations, branch checked */

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
    char trials_phi12_frame[8];  /* the trials' φ12: "scan", or "probe" when the fit searched the
                                    rotation (φ12 − rotation); "" not recorded (scan) */
    size_t n_best;
    /* How rotation_deg was obtained (rotation_source; "" when the file does not say): method one
     * of SSB4D_CALFILE_ROT_*; from: who stated it ("--rotation", "sidecar", ...) for "given",
     * what gave the fit its start and error ("parallax", "centre of mass", "undetermined") for
     * "fit"; sigma: its standard error in degrees (NaN unknown). */
    /* Stated beats measured (SPEC §4): the sampling and the centre above are the ones used;
     * method "stated" (a flag, a calibration file, a sidecar, the file's metadata) or "measured"
     * ("" not recorded: older files), with what calibration measured beside it (NaN unknown):
     * detector.sampling_source and detector.centre_source. */
    char sampling_method[12];
    double sampling_measured_mrad, sampling_sigma_mrad;
    char centre_method[12];
    double centre_measured_px[2];
    char rotation_method[24];
    char rotation_from[32];
    double rotation_sigma_deg;
    /* The detector's handedness (SPEC §2): geom.flip, and whether the file states it ("flip"
     * present; older files do not: unmirrored) and how it was found ("given", "objective",
     * "centre of mass", "assumed", "undetermined"; "" not recorded). */
    int flip_stated;
    char flip_source[24];
    /* What the acquisition's file records beyond the geometry (NaN / "" unknown). */
    char source_format[32];
    double camera_length_mm, dwell_us;
    /* The standard fit's record ("fit" section, has_fit): the objective it minimised ("band" or
     * "loss"), φ12 in the scan frame (= aberrations.phi12_deg) and in the probe (detector) frame,
     * the BF pixels of the exact loss, its confidence (confident: 1, 0; -1 not recorded), the
     * warning ("" none) and the objective's contrast; the parallax estimate (has_parallax). */
    int has_fit;
    char objective[8];
    double phi12_scan_deg, phi12_probe_deg;
    size_t loss_n_bf, fit_n_bf;
    int confident;
    char warning[256];
    double loss_contrast;
    double se[4];                /* standard errors of C10 nm, C12 nm, φ12 deg (scan frame) and the
                                    rotation deg ("standard_errors"; NaN: none, or undetermined) */
    int has_parallax;
    double px_C10_nm, px_C12_nm, px_phi12_scan_deg, px_rotation_deg;
    double px_sigma[4];          /* C10 nm, C12 nm, φ12 deg, rotation deg (NaN unknown) */
    double px_residual_A, px_seconds;
    /* The fit ran on this scan region only (has_region = 0: the full field). */
    int has_region;
    size_t region[4];            /* r0, r1, c0, c1 */
    ssb4d_calfile_region *regions; /* malloc'ed; fit-regions results */
    size_t n_regions;
} ssb4d_calfile;

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
#endif
