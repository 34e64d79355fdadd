/* params.c — the parameter table: every operation's parameters declared once (name, command-line
 * option, type, unit, range, default, help, the field it fills), with the checks that store a
 * value into its struct. The command line (its options, checks and --help lines), the viewer (its
 * JSON checks) and Python (its keyword checks and docstrings) all read these rows. */
#include "common/err.h"
#include "ssb4d.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define ROW(st, field, name, opt, type, unit, lo, hi, def, choices, flags, help) \
    {name, opt, type, unit, lo, hi, def, choices, help, offsetof(st, field), flags}

/* ---- fit: ssb4d_fit_params (the search box, start and locks are arrays the clients parse) ---- */
#define FIT(field, name, opt, type, unit, lo, hi, def, choices, flags, help) \
    ROW(ssb4d_fit_params, field, name, opt, type, unit, lo, hi, def, choices, flags, help)
static const ssb4d_param FIT_ROWS[] = {
    FIT(objective, "objective", "objective", SSB4D_PARAM_ENUM, "", 0, 1, 0, "band|loss", 0,
        "what the search minimises: band (the fraction of the spectra's power the model explains, on "
        "the fit pixels) or loss (the exact SSB loss); the loss reported is always the exact SSB loss "
        "over all BF pixels"),
    FIT(trials, "trials", "trials", SSB4D_PARAM_SIZE, "", 1, 1e6, 64, NULL, 0,
        "global candidates around the parallax estimate (default {default}; at least 200 over the whole "
        "box when there is no parallax estimate)"),
    FIT(seed, "seed", "seed", SSB4D_PARAM_U64, "", 0, INFINITY, 42, NULL, 0,
        "search seed; same seed => same trial trace"),
    FIT(batch, "batch", "batch", SSB4D_PARAM_SIZE, "", 1, 64, 8, NULL, 0,
        "candidates per batch sharing each read of G"),
    FIT(fit_radius, "fit_radius", "fit-radius", SSB4D_PARAM_DOUBLE, "", 0, 1, 1, NULL, SSB4D_PARAM_MIN_OPEN,
        "fit on the BF pixels within F x the selection radius"),
    FIT(coarse_bf, "coarse_bf", NULL, SSB4D_PARAM_SIZE, "", 0, INFINITY, 256, NULL, 0,
        "BF pixels of the coarse subset (0: no coarse stage)"),
    FIT(branch_check, "branch_check", "no-branch-check", SSB4D_PARAM_BOOL, "", 0, 1, 1, NULL, SSB4D_PARAM_NEGATED,
        "the 180-degree branch check"),
    FIT(use_parallax, "use_parallax", NULL, SSB4D_PARAM_BOOL, "", 0, 1, 1, NULL, 0,
        "start from the parallax (tilt-corrected bright-field) estimate"),
};

/* ---- aberrations: ssb4d_aberrations, C in nm, φ in degrees (φ only where m > 0) ---------------- */
#define CNM(i, name, opt, lim, help) \
    ROW(ssb4d_aberrations, C_nm[i], name, opt, SSB4D_PARAM_DOUBLE, "nm", -(lim), lim, 0, NULL, 0, help)
#define PHI(i, name, opt, help) \
    ROW(ssb4d_aberrations, phi_deg[i], name, opt, SSB4D_PARAM_DOUBLE, "deg", -1e4, 1e4, 0, NULL, 0, help)
#define CMAX 1e8 /* nm: 0.1 m, beyond any lens; keeps χ finite */
static const ssb4d_param ABERR_ROWS[] = {
    CNM(SSB4D_C10, "C10_nm", "c10", 1e5, "defocus coefficient C10 (nm; C10 = -defocus)"),
    CNM(SSB4D_C12, "C12_nm", "c12", 1e5, "two-fold astigmatism C12 (nm)"),
    PHI(SSB4D_C12, "phi12_deg", "phi12", "the angle phi12 of C12 in the scan frame (degrees)"),
    CNM(SSB4D_C21, "C21_nm", NULL, CMAX, "axial coma C21 (nm)"),
    PHI(SSB4D_C21, "phi21_deg", NULL, "its angle phi21 (degrees)"),
    CNM(SSB4D_C23, "C23_nm", NULL, CMAX, "three-fold astigmatism C23 (nm)"),
    PHI(SSB4D_C23, "phi23_deg", NULL, "its angle phi23 (degrees)"),
    CNM(SSB4D_C30, "C30_nm", NULL, CMAX, "spherical aberration C30 (nm)"),
    CNM(SSB4D_C32, "C32_nm", NULL, CMAX, "star aberration C32 (nm)"),
    PHI(SSB4D_C32, "phi32_deg", NULL, "its angle phi32 (degrees)"),
    CNM(SSB4D_C34, "C34_nm", NULL, CMAX, "four-fold astigmatism C34 (nm)"),
    PHI(SSB4D_C34, "phi34_deg", NULL, "its angle phi34 (degrees)"),
    CNM(SSB4D_C41, "C41_nm", NULL, CMAX, "fourth-order axial coma C41 (nm)"),
    PHI(SSB4D_C41, "phi41_deg", NULL, "its angle phi41 (degrees)"),
    CNM(SSB4D_C43, "C43_nm", NULL, CMAX, "three-lobe aberration C43 (nm)"),
    PHI(SSB4D_C43, "phi43_deg", NULL, "its angle phi43 (degrees)"),
    CNM(SSB4D_C45, "C45_nm", NULL, CMAX, "five-fold astigmatism C45 (nm)"),
    PHI(SSB4D_C45, "phi45_deg", NULL, "its angle phi45 (degrees)"),
    CNM(SSB4D_C50, "C50_nm", NULL, CMAX, "fifth-order spherical aberration C50 (nm)"),
    CNM(SSB4D_C52, "C52_nm", NULL, CMAX, "fifth-order star aberration C52 (nm)"),
    PHI(SSB4D_C52, "phi52_deg", NULL, "its angle phi52 (degrees)"),
    CNM(SSB4D_C54, "C54_nm", NULL, CMAX, "rosette aberration C54 (nm)"),
    PHI(SSB4D_C54, "phi54_deg", NULL, "its angle phi54 (degrees)"),
    CNM(SSB4D_C56, "C56_nm", NULL, CMAX, "six-fold astigmatism C56 (nm)"),
    PHI(SSB4D_C56, "phi56_deg", NULL, "its angle phi56 (degrees)"),
};

/* ---- the thick-sample model: ssb4d_thick --------------------------------------------------- */
static const ssb4d_param THICK_ROWS[] = {
    ROW(ssb4d_thick, tilt_mrad, "tilt_mrad", "tilt", SSB4D_PARAM_PAIR, "mrad", -1000, 1000, 0, NULL, 0,
        "thick-sample tilt (row, col) in the scan frame (mrad), with the thickness"),
    ROW(ssb4d_thick, thickness_nm, "thickness_nm", "thickness", SSB4D_PARAM_DOUBLE, "nm", 0, 1e4, 0, NULL, 0,
        "thick-sample model thickness (nm); 0 = standard SSB"),
};

/* ---- a preview: ssb4d_preview_req ---------------------------------------------------------- */
#define PRE(field, name, opt, type, unit, lo, hi, def, choices, flags, help) \
    ROW(ssb4d_preview_req, field, name, opt, type, unit, lo, hi, def, choices, flags, help)
static const ssb4d_param PREVIEW_ROWS[] = {
    PRE(rotation_deg, "rotation_deg", "rotation", SSB4D_PARAM_DOUBLE, "deg", -1e4, 1e4, NAN, NULL, 0,
        "scan-detector rotation (degrees; unset: the current one)"),
    PRE(upsample, "upsample", "upsample", SSB4D_PARAM_INT, "", 1, 8, 1, "1|2|3|4|8", SSB4D_PARAM_AUTO,
        "upsampling of the phase image (auto: the smallest that samples the object's band)"),
    PRE(subset, "subset", "subset", SSB4D_PARAM_SIZE, "", 0, 1e7, 0, NULL, 0,
        "0: all BF pixels; n: every (N_bf/n)-th (a drag preview)"),
    PRE(estimator, "estimator", "estimator", SSB4D_PARAM_ENUM, "", 0, 2, 0, "object|mean_phase|transfer", 0,
        "object: the phase of the mean corrected spectrum (the image); mean_phase: the mean of the BF "
        "pixels' phases (what the loss measures); transfer: the object divided by its own transfer, "
        "flatter to 2 alpha/lambda (docs/ssb-math.md)"),
    PRE(want_loss, "want_loss", NULL, SSB4D_PARAM_BOOL, "", 0, 1, 0, NULL, 0,
        "also the exact loss over the same BF pixels"),
};

/* ---- calibration's microscope values: ssb4d_calib_params ------------------------------------- */
#define CAL(field, name, opt, type, unit, lo, hi, def, flags, help) \
    ROW(ssb4d_calib_params, field, name, opt, type, unit, lo, hi, def, NULL, flags, help)
static const ssb4d_param CALIBRATE_ROWS[] = {
    CAL(kv, "kv", "kv", SSB4D_PARAM_DOUBLE, "kV", 1, 5000, NAN, 0,
        "accelerating voltage (kV)"),
    CAL(semiangle_mrad, "semiangle_mrad", "semiangle", SSB4D_PARAM_DOUBLE, "mrad", 0, 1e3, NAN,
        SSB4D_PARAM_MIN_OPEN, "probe convergence semi-angle (mrad)"),
    CAL(scan_step_A, "scan_step_A", "scan-step", SSB4D_PARAM_PAIR, "Å", 0, 1e6, NAN, SSB4D_PARAM_MIN_OPEN,
        "scan step (Angstrom), one value or ROW,COL"),
    CAL(det_sampling_mrad, "det_sampling_mrad", "det-sampling", SSB4D_PARAM_PAIR, "mrad", 0, 1e3, 0, SSB4D_PARAM_MIN_OPEN,
        "detector sampling (mrad/pixel), one value or ROW,COL; fitted from the BF disk when absent"),
    CAL(rotation_deg, "rotation_deg", "rotation", SSB4D_PARAM_DOUBLE, "deg", -1e4, 1e4, NAN, 0,
        "scan-detector rotation (degrees); from the centre-of-mass curl when absent"),
    CAL(bf_radius_px, "bf_radius_px", "bf-radius", SSB4D_PARAM_DOUBLE, "px", 0, 1e4, 0, SSB4D_PARAM_MIN_OPEN,
        "BF selection radius (pixels); default the disk radius"),
    CAL(centre_px, "centre_px", "centre", SSB4D_PARAM_PAIR, "px", -1e5, 1e5, NAN, 0,
        "BF disk centre (pixels); default the disk centroid"),
    CAL(hot_pixels, "hot_pixels", "no-hot-pixels", SSB4D_PARAM_BOOL, "", 0, 1, 1, SSB4D_PARAM_NEGATED,
        "hot-pixel detection (the file's own masks still apply)"),
    CAL(threads, "threads", "threads", SSB4D_PARAM_INT, "", 0, 1024, 0, 0,
        "worker threads (default: all cores)"),    CAL(edge_pixel_S, "edge_pixel_S", NULL, SSB4D_PARAM_INT, "", 0, 63, 0, 0,
        "the detector's pixel model, stated: S x S samples of the aperture's edge per pixel (the "
        "simulator's det_oversample, read from its sidecar); 0: the edge fit's residual chooses"),
};

/* ---- multislice refinement: ssb4d_refine_params (SPEC §13) ------------------------------------ */
#define REF(field, name, opt, type, unit, lo, hi, def, choices, flags, help) \
    ROW(ssb4d_refine_params, field, name, opt, type, unit, lo, hi, def, choices, flags, help)
static const ssb4d_param REFINE_ROWS[] = {
    REF(slices, "slices", "slices", SSB4D_PARAM_INT, "", 1, 64, 0, NULL, SSB4D_PARAM_AUTO,
        "slices of the object (auto: about one per 1.5 nm of the thickness, at most 64)"),
    REF(thickness_nm, "thickness_nm", "thickness", SSB4D_PARAM_DOUBLE, "nm", 0, 1e4, NAN, NULL, SSB4D_PARAM_MIN_OPEN,
        "the start's total thickness (nm; default the middle of the thickness range)"),
    REF(iterations, "iterations", "iterations", SSB4D_PARAM_INT, "", 1, 100000, 30, NULL, 0,
        "passes over the positions in all"),
    REF(batch, "batch", "batch", SSB4D_PARAM_SIZE, "", 1, 1e7, 0, NULL, SSB4D_PARAM_AUTO,
        "positions per minibatch (auto: the library's choice)"),
    REF(loss, "loss", "loss", SSB4D_PARAM_ENUM, "", 0, 1, 0, "poisson|amplitude", 0,
        "the likelihood: poisson (the counts' negative log-likelihood) or amplitude (the square-root "
        "residual)"),
    REF(refine_aberrations, "refine_aberrations", "no-aberrations", SSB4D_PARAM_BOOL, "", 0, 1, 1, NULL,
        SSB4D_PARAM_NEGATED, "refining C10, C12, phi12 after the object stage (they stay at the seed's)"),
    REF(refine_tilt, "refine_tilt", "no-tilt", SSB4D_PARAM_BOOL, "", 0, 1, 1, NULL, SSB4D_PARAM_NEGATED,
        "refining the tilt (it stays at the seed's)"),
    REF(refine_thickness, "refine_thickness", NULL, SSB4D_PARAM_BOOL, "", 0, 1, 1, NULL, 0,
        "refine the thickness within its range (when the range is not a point)"),
    REF(refine_probe, "refine_probe", NULL, SSB4D_PARAM_BOOL, "", 0, 1, 0, NULL, 0,
        "free the probe's pixels in the last stage"),
    REF(modes, "modes", NULL, SSB4D_PARAM_INT, "", 1, 16, 1, NULL, 0, "incoherent probe modes"),
    REF(bin, "bin", "bin", SSB4D_PARAM_INT, "", 1, 4, 0, "1|2|4", SSB4D_PARAM_AUTO,
        "detector binning (auto: the library's choice for speed)"),
    REF(seed, "seed", "seed", SSB4D_PARAM_U64, "", 0, INFINITY, 1, NULL, 0,
        "the seed of the minibatch order; same seed => same bits"),
    REF(threads, "threads", NULL, SSB4D_PARAM_INT, "", 0, 1024, 0, NULL, 0,
        "worker threads (0: all cores; the result does not depend on it)"),
};

#define N(a) (sizeof(a) / sizeof((a)[0]))
static const struct {
    const ssb4d_param *rows;
    size_t n;
} TABLE[SSB4D_OP_COUNT] = {
    [SSB4D_OP_FIT] = {FIT_ROWS, N(FIT_ROWS)},
    [SSB4D_OP_ABERRATIONS] = {ABERR_ROWS, N(ABERR_ROWS)},
    [SSB4D_OP_THICK] = {THICK_ROWS, N(THICK_ROWS)},
    [SSB4D_OP_PREVIEW] = {PREVIEW_ROWS, N(PREVIEW_ROWS)},
    [SSB4D_OP_CALIBRATE] = {CALIBRATE_ROWS, N(CALIBRATE_ROWS)},
    [SSB4D_OP_REFINE] = {REFINE_ROWS, N(REFINE_ROWS)},
};

const ssb4d_param *ssb4d_params(ssb4d_op op, size_t *n)
{
    int ok = (int)op >= 0 && op < SSB4D_OP_COUNT;
    if (n)
        *n = ok ? TABLE[op].n : 0;
    return ok ? TABLE[op].rows : NULL;
}

const ssb4d_param *ssb4d_param_find(ssb4d_op op, const char *name)
{
    size_t n;
    const ssb4d_param *p = ssb4d_params(op, &n);
    for (size_t i = 0; name && i < n; i++)
        if (!strcmp(p[i].name, name) || (p[i].option && !strcmp(p[i].option, name)))
            return &p[i];
    return NULL;
}

/* The i-th '|'-separated word of list (or NULL) into buf. */
static const char *choice(const char *list, int i, char *buf, size_t n)
{
    for (; list && i > 0; i--)
        list = strchr(list, '|') ? strchr(list, '|') + 1 : NULL;
    if (!list)
        return NULL;
    size_t k = strcspn(list, "|");
    snprintf(buf, n, "%.*s", (int)(k < n ? k : n - 1), list);
    return buf;
}

static int n_choices(const char *list)
{
    int k = 0;
    char w[64];
    while (choice(list, k, w, sizeof w))
        k++;
    return k;
}

/* "a, b, c or d" of the choices (and "auto"). */
static void words(const ssb4d_param *p, char *buf, size_t n)
{
    int k = n_choices(p->choices), all = k + !!(p->flags & SSB4D_PARAM_AUTO);
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < all && used < n; i++) {
        char w[64];
        const char *s = i < k ? choice(p->choices, i, w, sizeof w) : "auto";
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i == 0 ? "" : i == all - 1 ? " or " : ", ", s);
    }
}

static int whole_type(ssb4d_param_type t)
{
    return t == SSB4D_PARAM_INT || t == SSB4D_PARAM_SIZE || t == SSB4D_PARAM_U64;
}

const char *ssb4d_param_describe(const ssb4d_param *p, char *buf, size_t n)
{
    if (!buf || !n)
        return buf;
    if (p->type == SSB4D_PARAM_ENUM || p->choices)
        words(p, buf, n);
    else if (p->type == SSB4D_PARAM_BOOL)
        snprintf(buf, n, "true or false");
    else if (whole_type(p->type))
        isinf(p->max) ? snprintf(buf, n, "a whole number >= %.0f", p->min)
                      : snprintf(buf, n, "a whole number in %.0f..%.0f", p->min, p->max);
    else
        snprintf(buf, n, "%s in %c%g, %g]", p->type == SSB4D_PARAM_PAIR ? "a number or a row,col pair" : "a number",
                 p->flags & SSB4D_PARAM_MIN_OPEN ? '(' : '[', p->min, p->max);
    return buf;
}

static int in_range(const ssb4d_param *p, double v)
{
    if (!isfinite(v))
        return 0;
    if (p->flags & SSB4D_PARAM_MIN_OPEN ? !(v > p->min) : !(v >= p->min))
        return 0;
    if (!(v <= p->max))
        return 0;
    if ((whole_type(p->type) || p->type == SSB4D_PARAM_ENUM || p->type == SSB4D_PARAM_BOOL) && v != floor(v))
        return 0;
    if (p->type == SSB4D_PARAM_U64 && v >= 18446744073709551616.0)
        return 0;
    if (p->type != SSB4D_PARAM_ENUM && p->choices) {
        int k = n_choices(p->choices), ok = 0;
        for (int i = 0; i < k; i++) {
            char w[64];
            ok |= atof(choice(p->choices, i, w, sizeof w)) == v;
        }
        return ok;
    }
    return 1;
}

static ssb4d_status refuse(const ssb4d_param *p, const char *got, ssb4d_err *err)
{
    char what[160];
    return ssb_fail(err, SSB4D_EINVAL, "%s must be %s; got '%s'", p->name, ssb4d_param_describe(p, what, sizeof what),
                    got);
}

static void store(const ssb4d_param *p, void *target, const double *v, uint64_t u)
{
    char *f = (char *)target + p->offset;
    switch (p->type) {
    case SSB4D_PARAM_DOUBLE: *(double *)f = v[0]; break;
    case SSB4D_PARAM_PAIR: ((double *)f)[0] = v[0], ((double *)f)[1] = v[1]; break;
    case SSB4D_PARAM_SIZE: *(size_t *)f = (size_t)v[0]; break;
    case SSB4D_PARAM_U64: *(uint64_t *)f = u; break;
    default: *(int *)f = (int)v[0]; break; /* INT, BOOL, ENUM */
    }
}

ssb4d_status ssb4d_param_set(const ssb4d_param *p, void *target, const double *v, ssb4d_err *err)
{
    if (!p || !target || !v)
        return ssb_fail(err, SSB4D_EINVAL, "ssb4d_param_set: NULL argument");
    int pair = p->type == SSB4D_PARAM_PAIR;
    int auto0 = (p->flags & SSB4D_PARAM_AUTO) && v[0] == 0;
    if (!auto0 && (!in_range(p, v[0]) || (pair && !in_range(p, v[1])))) {
        char got[64];
        pair ? snprintf(got, sizeof got, "%g,%g", v[0], v[1]) : snprintf(got, sizeof got, "%g", v[0]);
        return refuse(p, got, err);
    }
    store(p, target, v, (uint64_t)v[0]);
    return SSB4D_OK;
}

/* A whole number of text, exactly (a u64 seed beyond 2^53 too): 0 or -1. */
static int parse_u64(const char *s, uint64_t *out)
{
    char *e;
    errno = 0;
    unsigned long long u = strtoull(s, &e, 10);
    if (errno || *e || !*s || s[0] == '-' || s[0] == '+' || s[0] == ' ')
        return -1;
    *out = (uint64_t)u;
    return 0;
}

static int parse_num(const char *s, double *out)
{
    char *e;
    errno = 0;
    double d = strtod(s, &e);
    if (e == s || *e || errno == ERANGE || !isfinite(d))
        return -1;
    *out = d;
    return 0;
}

ssb4d_status ssb4d_param_parse(const ssb4d_param *p, void *target, const char *text, ssb4d_err *err)
{
    if (!p || !target || !text)
        return ssb_fail(err, SSB4D_EINVAL, "ssb4d_param_parse: NULL argument");
    double v[2] = {NAN, NAN};
    if ((p->flags & SSB4D_PARAM_AUTO) && !strcasecmp(text, "auto")) {
        v[0] = 0;
        return ssb4d_param_set(p, target, v, err);
    }
    switch (p->type) {
    case SSB4D_PARAM_ENUM: {
        int k = n_choices(p->choices);
        for (int i = 0; i < k; i++) {
            char w[64];
            if (!strcmp(choice(p->choices, i, w, sizeof w), text)) {
                v[0] = i;
                return ssb4d_param_set(p, target, v, err);
            }
        }
        return refuse(p, text, err);
    }
    case SSB4D_PARAM_BOOL:
        if (!strcmp(text, "true") || !strcmp(text, "1"))
            v[0] = 1;
        else if (!strcmp(text, "false") || !strcmp(text, "0"))
            v[0] = 0;
        else
            return refuse(p, text, err);
        return ssb4d_param_set(p, target, v, err);
    case SSB4D_PARAM_U64: {
        uint64_t u;
        if (parse_u64(text, &u) || (double)u < p->min || (double)u > p->max)
            return refuse(p, text, err);
        store(p, target, v, u);
        return SSB4D_OK;
    }
    case SSB4D_PARAM_PAIR: {
        char a[64];
        const char *comma = strchr(text, ',');
        if (!comma) {
            if (parse_num(text, &v[0]))
                return refuse(p, text, err);
            v[1] = v[0];
        } else {
            size_t k = (size_t)(comma - text);
            if (k >= sizeof a)
                return refuse(p, text, err);
            memcpy(a, text, k);
            a[k] = 0;
            if (parse_num(a, &v[0]) || parse_num(comma + 1, &v[1]))
                return refuse(p, text, err);
        }
        break;
    }
    default:
        if (parse_num(text, &v[0]))
            return refuse(p, text, err);
    }
    if (!in_range(p, v[0]) || (p->type == SSB4D_PARAM_PAIR && !in_range(p, v[1])))
        return refuse(p, text, err);
    store(p, target, v, 0);
    return SSB4D_OK;
}

void ssb4d_param_get(const ssb4d_param *p, const void *target, double *out)
{
    const char *f = (const char *)target + p->offset;
    switch (p->type) {
    case SSB4D_PARAM_DOUBLE: out[0] = *(const double *)f; break;
    case SSB4D_PARAM_PAIR: out[0] = ((const double *)f)[0], out[1] = ((const double *)f)[1]; break;
    case SSB4D_PARAM_SIZE: out[0] = (double)*(const size_t *)f; break;
    case SSB4D_PARAM_U64: out[0] = (double)*(const uint64_t *)f; break;
    default: out[0] = *(const int *)f; break;
    }
}
