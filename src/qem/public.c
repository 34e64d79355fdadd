/* public.c — the .qem folder's calls for clients (include/ssb4d.h). */
#include "codec/codec.h"
#include "qem/qem.h"
#include "ssb4d_advanced.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <string.h>

size_t ssb4d_qem_index_check_bytes(size_t det_rows, size_t det_cols)
{
    return qem_spatial_fields(det_rows, det_cols) * QEM_INTERVAL * sizeof(uint32_t);
}

/* The public handle is the reader's own: ssb4d_qem is qem_file under its public name. */
static const qem_file *F(const ssb4d_qem *q) { return (const qem_file *)(const void *)q; }

ssb4d_status ssb4d_qem_open(const char *path, int verify_body, int threads, ssb4d_qem **out, ssb4d_err *err)
{
    qem_file *f = NULL;
    ssb4d_status st = qem_open(path, verify_body, threads, &f, err);
    *out = (ssb4d_qem *)(void *)f;
    return st;
}

void ssb4d_qem_close(ssb4d_qem *q)
{
    qem_close((qem_file *)(void *)q);
}

void ssb4d_qem_get_info(const ssb4d_qem *q, ssb4d_qem_info *info)
{
    const qem_info *in = qem_get_info(F(q));
    memcpy(info->shape, in->shape, sizeof info->shape);
    info->dtype_bytes = in->dtype_bytes;
    info->n_scans = in->n_scans;
    info->n_pix = in->n_pix;
    info->n_chunks = in->n_chunks;
    info->n_blocks = in->n_blocks;
    info->file_bytes = in->file_bytes;
    info->header_bytes = in->header_bytes;
    info->body_bytes = in->body_bytes;
    info->payload_bytes = in->payload_bytes;
}

const uint8_t *ssb4d_qem_valid_mask(const ssb4d_qem *q)
{
    return qem_valid_mask(F(q));
}

void ssb4d_qem_calibration_of(const ssb4d_qem *q, ssb4d_qem_calibration *cal)
{
    qem_calibration c;
    qem_effective_calibration(F(q), &c);
    cal->kv = c.kv;
    cal->semiangle_mrad = c.semiangle_mrad;
    memcpy(cal->scan_step_A, c.scan_step_A, sizeof cal->scan_step_A);
    memcpy(cal->det_sampling, c.det_sampling, sizeof cal->det_sampling);
    cal->camera_length_mm = c.camera_length_mm;
    cal->dwell_us = c.dwell_us;
    cal->det_sampling_inverse_A = c.det_sampling_inverse_A;
}

void ssb4d_qem_flags_of(const ssb4d_qem *q, ssb4d_qem_flags *flags)
{
    qem_flag_handling h;
    qem_get_flag_handling(F(q), &h);
    flags->policy = h.policy;
    flags->flagged_recorded = h.flagged_recorded;
    flags->flagged_by_file = h.flagged_by_file;
    flags->flagged_by_totals = h.flagged_by_totals;
    flags->replaced = h.replaced;
    flags->method = h.method;
    flags->replaced_pixels = h.replaced_pixels;
    flags->markers_zeroed = h.markers_zeroed;
}

char *ssb4d_qem_header_text(const ssb4d_qem *q)
{
    return cJSON_PrintUnformatted(qem_header_json(F(q)));
}

ssb4d_status ssb4d_qem_check_index(const ssb4d_qem *q, int threads, ssb4d_err *err)
{
    return qem_check_spatial_index(F(q), threads, err);
}

ssb4d_status ssb4d_qem_read_region(const ssb4d_qem *q, const size_t lo[4], const size_t hi[4], uint16_t *out,
                                   int threads, ssb4d_err *err)
{
    return qem_read_region(F(q), lo, hi, out, threads, err);
}
