/* view_internal.h — the server context shared by the files of src/view/ (one concept each:
 * server.c the HTTP daemon and signals, auth.c the token and Host check, worker.c the one thread
 * that owns the session, api.c the routes and their strict JSON, static.c the embedded page). */
#ifndef SSB4D_VIEW_INTERNAL_H
#define SSB4D_VIEW_INTERNAL_H
#include "ssb4d_view.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stddef.h>

#define VIEW_BODY_LIMIT (64 * 1024) /* a request body larger than this is refused (413) */
#define VIEW_TRIALS_SHOWN 50
#define VIEW_IDLE_S 2.0 /* quiet this long after the last request before idle work starts */

/* An HTTP answer built by a route or a job: status, type, body (owned unless body_static) and a
 * few extra headers (X-Width, X-Height, X-Loss, X-Seq, X-Seconds). */
typedef struct {
    int status;
    const char *ctype;
    char *body;
    size_t len;
    int body_static;
    ssb4d_mem *mem;        /* non-NULL: body came from this budget (ssb4d_mem_alloc) */
    int n_hdr;
    char hdr[8][2][256];
} view_resp;

void view_resp_text(view_resp *r, int status, const char *fmt, ...);
void view_resp_json(view_resp *r, int status, cJSON *j); /* takes j */
void view_resp_header(view_resp *r, const char *name, const char *fmt, ...);
/* A float32 image (little-endian, rows x cols) as the answer, with X-Width and X-Height; takes
 * img, which came from mem's budget (ssb4d_mem_alloc) or, mem NULL, from malloc. */
void view_resp_image(view_resp *r, float *img, size_t rows, size_t cols, ssb4d_mem *mem);
void view_resp_free(view_resp *r);

typedef enum {
    JOB_START, JOB_PREVIEW, JOB_FIT, JOB_FIT_TILT, JOB_REGION, JOB_REGIONS, JOB_APPLY, JOB_RESET,
    JOB_SAVE, JOB_VIRTUAL, JOB_REFINE
} job_kind;

/* GET /api/virtual?kind=: the images of ssb4d_session_virtual, in this order. */
typedef enum { VIRT_BF, VIRT_ADF, VIRT_COM_X, VIRT_COM_Y, VIRT_IDPC, VIRT_N } virt_kind;

typedef enum { VIEW_PHASE = 0, VIEW_FFT = 1, VIEW_AMPLITUDE = 2 } view_image;

/* What a request asks, validated by api.c before it reaches the worker. */
typedef struct {
    ssb4d_aberrations ab;
    unsigned c_mask, phi_mask; /* the coefficients given (bit i: coefficient i); others: current */
    double rotation_deg;   /* NaN: the current one */
    ssb4d_thick thick;
    int has_tilt, has_thickness;
    int upsample;
    size_t subset;
    ssb4d_estimator estimator;
    int want_loss;
    view_image view;
    double seq;
    size_t rect[4];
    size_t rows, cols;
    char path[1024];
    int force;
    int apply_region;      /* /api/apply {"region": true}: the last region refit */
    virt_kind virt;        /* /api/virtual?kind= */
    int refine_slices;     /* /api/refine: slices (0 auto), iterations (0 the default), the */
    int refine_iterations; /* thickness range (NaN: the default) */
    double refine_range_nm[2];
} job_params;

typedef struct view_job {
    job_kind kind;
    job_params p;
    struct view_job *next;
    int done;              /* set under the server's mutex; the handler waits for it */
    int superseded;        /* a newer preview replaced it: answered 204 (X-Superseded) */
    int idle;              /* the worker's own idle work (the virtual images): nobody waits */
    int cancelled;         /* cancelled while it waited behind the idle work: answered 409 unrun */
    view_resp resp;
} view_job;

/* The calibration as the page shows it, copied once calibrated (read without the worker). */
typedef struct {
    int ready;
    size_t det[2], scan[2];
    float *mean;           /* det[0]*det[1] */
    double centre[2], radius, selection_radius;
    int32_t *flagged;
    size_t n_flagged, n_bf;
    double kv, semiangle_mrad, scan_step_A[2], det_sampling_mrad[2], rotation_deg;
    int flip;              /* the calibration's detector handedness */
    char sampling[320];    /* the sampling as `ssb4d calibrate` reports it (the library's words) */
    char sampling_warning[320]; /* its warning on one line ("" none): measured > 3 sigma from stated */
} view_cal;

struct view_server {
    view_config cfg;
    char token[33];
    int port;
    ssb4d_session *s;
    void *daemon;          /* struct MHD_Daemon */
    pthread_t worker;
    int worker_started;

    pthread_mutex_t mu;    /* guards everything below */
    pthread_cond_t wake;   /* the worker's: a job arrived, or stop */
    pthread_cond_t done;   /* the handlers': a job finished */
    view_job *fifo_head, *fifo_tail; /* long jobs and commands, in order */
    view_job *pending;     /* the one drag preview waiting (only the latest is kept) */
    view_job *pending_release; /* the one release waiting: runs before a waiting drag */
    view_job *running;
    int stop;

    /* What GET /api/state reports (kept current by the worker). */
    char job_name[64];     /* "" when idle */
    char stage[48];
    double fraction;
    char last_error[512];
    ssb4d_aberrations ab;  /* current parameters */
    ssb4d_thick thick;
    double rotation_deg;
    int has_fit;
    ssb4d_aberrations fit_ab;
    ssb4d_thick fit_thick;
    double fit_rotation_deg, fit_loss, fit_seconds;
    int fit_flip;          /* the fit's detector handedness (SPEC §2) */
    char fit_flip_source[24];
    char fit_warning[256];
    int fit_confident;
    char fit_rotation_source[24];
    double fit_rotation_sigma_deg;
    double fit_se[4];               /* standard errors: C10 nm, C12 nm, φ12 deg (scan frame), rotation deg */
    cJSON *trials;         /* best trials of the last fit (array) */
    cJSON *region;         /* last region refit (object) or NULL */
    ssb4d_fit_result region_res;
    int has_region_res;
    cJSON *regions;        /* last Fit Regions map (object) or NULL */
    cJSON *refine;         /* the last refinement's record (object, `ssb4d refine --json`'s keys) or NULL */
    ssb4d_refine_result refine_res; /* its images (GET /api/refine/image); has_refine_res */
    int has_refine_res;
    ssb4d_virtual_images virt; /* the virtual images, made on the first request (the worker's) */
    int has_virt, virt_failed;
    double last_request_s;    /* ssb4d_clock_s() of the last request submitted */
    double virt_rotation_deg; /* the rotation and handedness they were made with: CoM and iDPC */
    int virt_flip;            /* depend on them, so a new rotation makes them again */
    size_t shape[4];
    size_t image[2];       /* native image rows, cols */
    view_cal cal;
    double latest_seq;     /* the highest preview seq seen: a lower one arrived late (the browser's
                              requests can overtake each other on separate connections) */
    unsigned long n_previews, n_superseded, n_cancels, n_stale;
    int cancel_job;        /* the person cancelled the running job: one of several calls
                              (calibrate then fit, a grid of regions) stops before its next call */
};

/* auth.c */
int view_token_new(char out[33]);
/* 0: allowed; else the HTTP status to answer (401 no token, 403 wrong token or foreign Host). */
int view_check_host(const view_server *v, const char *host);
int view_check_token(const view_server *v, const char *token);

/* worker.c */
int view_worker_start(view_server *v);
void view_worker_stop(view_server *v);
/* Queues j and waits until it is answered (j->resp). A preview replaces the waiting one (204,
 * superseded); a release also cancels a running preview. */
void view_submit(view_server *v, view_job *j);
void view_cancel_running(view_server *v);

/* api.c: one request (method, url under the base URL, the query's kind= (NULL: none), token and
 * body already read) → resp. */
void view_api(view_server *v, const char *method, const char *url, const char *kind, const char *body, size_t len,
              view_resp *r);
/* GET /api/state's JSON (takes the mutex). */
cJSON *view_state_json(view_server *v);

/* static.c: the embedded page; NULL for a name not in the list. */
typedef struct {
    const char *url;
    const char *ctype;
    const unsigned char *data;
    size_t len;
} view_asset;
const view_asset *view_static_find(const char *url);
#endif
