/* public.c — the io folder's calls for clients (include/ssb4d.h: "Calibration files", "Writing
 * results"): calibration files, the calibration picture, .npy arrays. */
#include "io/calfile.h"
#include "io/image.h"
#include "io/npy.h"

void ssb4d_calfile_init(ssb4d_calfile *c) { ssb_calfile_init(c); }

void ssb4d_calfile_free(ssb4d_calfile *c) { ssb_calfile_free(c); }

ssb4d_status ssb4d_calfile_from_calibration(ssb4d_calfile *c, const ssb4d_calibration *cal, ssb4d_err *err)
{
    return ssb_calfile_from_calibration(c, cal, err);
}

void ssb4d_calfile_set_fit(ssb4d_calfile *c, const ssb4d_fit_result *r, const ssb4d_fit_params *p,
                           const char *given_by, size_t loss_n_bf)
{
    ssb_calfile_set_fit(c, r, p, given_by, loss_n_bf);
}

char *ssb4d_calfile_to_json(const ssb4d_calfile *c) { return ssb_calfile_to_json(c); }

ssb4d_status ssb4d_calfile_write(const char *path, const ssb4d_calfile *c, ssb4d_err *err)
{
    return ssb_calfile_write(path, c, err);
}

ssb4d_status ssb4d_calfile_read(const char *path, ssb4d_calfile *c, ssb4d_err *err)
{
    return ssb_calfile_read(path, c, err);
}

int ssb4d_calfile_identity_differs(const char *a, const char *b) { return ssb_calfile_identity_differs(a, b); }

ssb4d_status ssb4d_image_check_path(const char *path, ssb4d_err *err) { return ssb_image_check_path(path, err); }

ssb4d_status ssb4d_calibration_picture(const char *path, const ssb4d_calibration *cal, ssb4d_err *err)
{
    return ssb_calibration_picture(path, cal, err);
}

ssb4d_status ssb4d_npy_save(const char *path, const char *descr, int ndim, const size_t *shape,
                            const void *data, ssb4d_err *err)
{
    return ssb_npy_save(path, descr, ndim, shape, data, err);
}

ssb4d_status ssb4d_npy_write_header(FILE *f, const char *descr, int ndim, const size_t *shape, ssb4d_err *err)
{
    return ssb_npy_write_header(f, descr, ndim, shape, err);
}
