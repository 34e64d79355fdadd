/* reader.c — the formats folder's calls for clients (include/ssb4d.h): ssb4d_reader is framesrc
 * under its public name, its options spelt as the command line's flags. */
#include "formats/framesrc.h"

#include <cjson/cJSON.h>
#include <string.h>

static framesrc *F(const ssb4d_reader *r) { return (framesrc *)(void *)(ssb4d_reader *)r; }

ssb4d_status ssb4d_reader_format_check(const char *name, ssb4d_err *err)
{
    framesrc_format f;
    return framesrc_format_parse(name, &f, err);
}

ssb4d_status ssb4d_reader_open(const char *path, const ssb4d_reader_opts *o, ssb4d_reader **out, ssb4d_err *err)
{
    framesrc_opts fo;
    memset(&fo, 0, sizeof fo);
    *out = NULL;
    if (o->format) {
        ssb4d_status st = framesrc_format_parse(o->format, &fo.format, err);
        if (st)
            return st;
    }
    fo.dataset = o->dataset;
    memcpy(fo.shape, o->shape, sizeof fo.shape);
    fo.dtype_bytes = o->dtype_bytes;
    fo.dtype_float = o->dtype_float;
    fo.big_endian = o->big_endian;
    fo.offset = o->offset;
    fo.more_paths = o->more_paths;
    fo.n_more_paths = o->n_more_paths;
    framesrc *fs = NULL;
    ssb4d_status st = framesrc_open(path, &fo, &fs, err);
    *out = (ssb4d_reader *)(void *)fs;
    return st;
}

void ssb4d_reader_close(ssb4d_reader *r)
{
    framesrc_close(F(r));
}

void ssb4d_reader_shape(const ssb4d_reader *r, size_t shape[4])
{
    framesrc_shape(F(r), shape);
}

int ssb4d_reader_dtype_bytes(const ssb4d_reader *r)
{
    return framesrc_dtype_bytes(F(r));
}

int ssb4d_reader_is_float(const ssb4d_reader *r)
{
    return framesrc_is_float(F(r));
}

const char *ssb4d_reader_format_name(const ssb4d_reader *r)
{
    return framesrc_format_name(F(r));
}

const uint8_t *ssb4d_reader_flag_mask(const ssb4d_reader *r)
{
    return framesrc_flag_mask(F(r));
}

void ssb4d_reader_calibration_of(const ssb4d_reader *r, ssb4d_reader_calibration *cal)
{
    framesrc_calibration c;
    framesrc_calibration_of(F(r), &c);
    cal->kv = c.kv;
    cal->semiangle_mrad = c.semiangle_mrad;
    memcpy(cal->scan_step_A, c.scan_step_A, sizeof cal->scan_step_A);
    memcpy(cal->det_sampling_mrad, c.det_sampling_mrad, sizeof cal->det_sampling_mrad);
    cal->camera_length_mm = c.camera_length_mm;
    cal->dwell_us = c.dwell_us;
}

char *ssb4d_reader_metadata_text(const ssb4d_reader *r)
{
    const cJSON *m = framesrc_source_metadata(F(r));
    return m ? cJSON_PrintUnformatted(m) : NULL;
}

ssb4d_status ssb4d_reader_read(ssb4d_reader *r, size_t pos0, size_t npos, uint32_t *out, ssb4d_err *err)
{
    return framesrc_read(F(r), pos0, npos, out, err);
}

ssb4d_status ssb4d_reader_read_f32(ssb4d_reader *r, size_t pos0, size_t npos, float *out, ssb4d_err *err)
{
    return framesrc_read_f32(F(r), pos0, npos, out, err);
}
