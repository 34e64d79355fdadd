/* mrc.c — the MRC2014 header and the Thermo Fisher extended header, from bytes (mrc.h). */
#include "formats/mrc.h"

#include "common/err.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* Words in either byte order                                                                 */

static uint32_t u32_at(const uint8_t *p, int be)
{
    return be ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
              : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

static int32_t i32_at(const uint8_t *p, int be) { return (int32_t)u32_at(p, be); }

static float f32_at(const uint8_t *p, int be)
{
    uint32_t u = u32_at(p, be);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double f64_at(const uint8_t *p, int be)
{
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u = u << 8 | p[be ? i : 7 - i];
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* A fixed-width text field: printable bytes up to the first NUL, unprintable ones as '?',
 * trailing blanks cut. out holds n + 1 bytes. */
static void text_at(const uint8_t *p, size_t n, char *out)
{
    size_t k = 0;
    for (; k < n && p[k]; k++)
        out[k] = p[k] >= 32 && p[k] < 127 ? (char)p[k] : '?';
    while (k > 0 && out[k - 1] == ' ')
        k--;
    out[k] = '\0';
}

/* ---------------------------------------------------------------------------------------- */
/* Main header                                                                                */

#define IMOD_STAMP 1146047817 /* "IMOD" read as a little-endian int32 */
#define IMOD_SIGNED_BYTES 1
#define IMOD_4BIT_BYTES 16

static int mul(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }

static int mode_known(int32_t m)
{
    return m == 0 || m == 1 || m == 2 || m == 3 || m == 4 || m == 6 || m == 12 || m == 101;
}

static size_t mode_bytes(int32_t m)
{
    switch (m) {
    case 0: return 1;
    case 1: case 6: case 12: return 2;
    case 2: case 3: return 4;
    case 4: return 8;
    default: return 0;
    }
}

/* Whether the header read in this byte order looks like one: a known mode, sizes >= 1. */
static int plausible(const uint8_t *b, int be)
{
    return mode_known(i32_at(b + 12, be)) && i32_at(b, be) >= 1 && i32_at(b + 4, be) >= 1 &&
           i32_at(b + 8, be) >= 1 && i32_at(b + 92, be) >= 0;
}

/* 1 when the data of this header (read in this order) fill a file of size bytes exactly. */
static int fills(const uint8_t *b, int be, size_t size)
{
    size_t n = (size_t)i32_at(b, be) * (size_t)i32_at(b + 4, be), v;
    return !__builtin_mul_overflow(n, (size_t)i32_at(b + 8, be), &v) &&
           !__builtin_mul_overflow(v, mode_bytes(i32_at(b + 12, be)), &v) &&
           !__builtin_add_overflow(v, (size_t)MRC_HEADER_BYTES + (size_t)i32_at(b + 92, be), &v) &&
           v == size;
}

/* The byte order: the machine stamp's when it names one, else the order in which the header
 * makes sense (and, when both do, fills the file), else little-endian. */
static int byte_order(const uint8_t *b, size_t size, int *known)
{
    *known = 1;
    if (b[212] == 0x44 && (b[213] == 0x44 || b[213] == 0x41))
        return 0;
    if (b[212] == 0x11 && b[213] == 0x11)
        return 1;
    *known = 0;
    int le = plausible(b, 0), be = plausible(b, 1);
    if (le && be)
        return !fills(b, 0, size) && fills(b, 1, size);
    return be && !le;
}

static const char *mode_refusal(int32_t mode)
{
    switch (mode) {
    case 3: return "mode 3 (complex 16-bit integers) holds Fourier transforms, not frames of counts";
    case 4: return "mode 4 (complex 32-bit reals) holds Fourier transforms, not frames of counts";
    case 12: return "mode 12 (float16) is not read: convert to float32 (mode 2) or integer counts "
                    "(mode 6 or 1)";
    case 101: return "mode 101 (4-bit values, two per byte) is not read: convert to mode 0 or 6";
    default: return NULL;
    }
}

ssb4d_status mrc_parse_header(const uint8_t *b, size_t len, size_t file_size, mrc_header *h,
                              ssb4d_err *err)
{
    memset(h, 0, sizeof *h);
    if (len < MRC_HEADER_BYTES || file_size < MRC_HEADER_BYTES)
        return ssb_fail(err, SSB4D_EFORMAT, "the file is %zu bytes, shorter than the %d-byte MRC "
                        "header", file_size < len ? file_size : len, MRC_HEADER_BYTES);
    int be = h->big_endian = byte_order(b, file_size, &h->stamp_known);
    h->has_map = memcmp(b + 208, "MAP ", 4) == 0;
    int32_t *ints[] = {&h->nx, &h->ny, &h->nz, &h->mode, &h->nxstart, &h->nystart, &h->nzstart,
                       &h->mx, &h->my, &h->mz};
    for (int i = 0; i < 10; i++)
        *ints[i] = i32_at(b + 4 * i, be);
    for (int i = 0; i < 3; i++) {
        h->cella[i] = f32_at(b + 40 + 4 * i, be);
        h->cellb[i] = f32_at(b + 52 + 4 * i, be);
        h->origin[i] = f32_at(b + 196 + 4 * i, be);
    }
    h->mapc = i32_at(b + 64, be);
    h->mapr = i32_at(b + 68, be);
    h->maps = i32_at(b + 72, be);
    h->dmin = f32_at(b + 76, be);
    h->dmax = f32_at(b + 80, be);
    h->dmean = f32_at(b + 84, be);
    h->ispg = i32_at(b + 88, be);
    h->nsymbt = i32_at(b + 92, be);
    text_at(b + 104, 4, h->exttyp);
    h->nversion = i32_at(b + 108, be);
    h->rms = f32_at(b + 216, be);
    h->nlabl = i32_at(b + 220, be);
    for (int i = 0; i < 10; i++)
        text_at(b + 224 + 80 * i, 80, h->labels[i]);
    h->imod = i32_at(b + 152, be) == IMOD_STAMP;
    int32_t imod_flags = h->imod ? i32_at(b + 156, be) : 0;

    /* sizes first: every later message may quote them */
    static const char *const axis[3] = {"nx (columns, byte 0)", "ny (rows, byte 4)",
                                        "nz (sections, byte 8)"};
    const int32_t n3[3] = {h->nx, h->ny, h->nz};
    for (int i = 0; i < 3; i++)
        if (n3[i] < 1)
            return ssb_fail(err, SSB4D_EFORMAT, "header field %s is %d; it must be at least 1%s",
                            axis[i], (int)n3[i], h->stamp_known ? "" : " (no machine stamp "
                            "at byte 212 names the byte order; both orders were tried)");
    const char *no = mode_refusal(h->mode);
    if (no)
        return ssb_fail(err, SSB4D_EFORMAT, "%s", no);
    switch (h->mode) {
    case 0:
        if (imod_flags & IMOD_4BIT_BYTES)
            return ssb_fail(err, SSB4D_EFORMAT, "mode 0 with IMOD's 4-bit flag (two 4-bit values "
                            "per byte) is not read: convert to mode 0 or 6");
        /* MRC2014: signed bytes; IMOD writes unsigned ones unless its flag says signed */
        h->dtype_signed = !(h->imod && !(imod_flags & IMOD_SIGNED_BYTES));
        h->dtype_bytes = 1;
        h->mode_name = h->dtype_signed ? "int8" : "uint8";
        break;
    case 1: h->dtype_bytes = 2; h->dtype_signed = 1; h->mode_name = "int16"; break;
    case 2: h->dtype_bytes = 4; h->is_float = 1; h->mode_name = "float32"; break;
    case 6: h->dtype_bytes = 2; h->mode_name = "uint16"; break;
    default:
        return ssb_fail(err, SSB4D_EFORMAT, "header field mode (byte 12) is %d, not an MRC data "
                        "mode (0 int8, 1 int16, 2 float32 and 6 uint16 are read)", (int)h->mode);
    }
    if (!((h->mapc == 1 && h->mapr == 2 && h->maps == 3) || (!h->mapc && !h->mapr && !h->maps)))
        return ssb_fail(err, SSB4D_EFORMAT, "the axis order mapc, mapr, maps (bytes 64..72) is "
                        "%d,%d,%d; only 1,2,3 (columns x, rows y, sections z) is read",
                        (int)h->mapc, (int)h->mapr, (int)h->maps);
    if (h->nsymbt < 0)
        return ssb_fail(err, SSB4D_EFORMAT, "header field nsymbt (extended header bytes, byte 92) "
                        "is %d", (int)h->nsymbt);
    size_t room = file_size - MRC_HEADER_BYTES;
    if ((size_t)h->nsymbt > room)
        return ssb_fail(err, SSB4D_EFORMAT, "header field nsymbt (byte 92) says %d bytes of "
                        "extended header, but the file ends %zu bytes after the header",
                        (int)h->nsymbt, room);
    h->data_offset = MRC_HEADER_BYTES + (size_t)h->nsymbt;
    size_t have = file_size - h->data_offset, values;
    if (!mul((size_t)h->nx, (size_t)h->ny, &values) ||
        !mul(values, (size_t)h->dtype_bytes, &h->frame_bytes) ||
        !mul(h->frame_bytes, (size_t)h->nz, &h->data_bytes))
        return ssb_fail(err, SSB4D_EFORMAT, "nx x ny x nz = %d x %d x %d values of %d bytes do not "
                        "fit in memory sizes", (int)h->nx, (int)h->ny, (int)h->nz, h->dtype_bytes);
    if (h->data_bytes != have)
        return ssb_fail(err, SSB4D_EFORMAT, "nx x ny x nz = %d x %d x %d values of mode %d (%s, %d "
                        "byte%s each) need %zu bytes after the header and the %d-byte extended "
                        "header (nsymbt), but the file has %zu (%zu %s)", (int)h->nx, (int)h->ny,
                        (int)h->nz, (int)h->mode, h->mode_name, h->dtype_bytes,
                        h->dtype_bytes > 1 ? "s" : "", h->data_bytes, (int)h->nsymbt, have,
                        have < h->data_bytes ? h->data_bytes - have : have - h->data_bytes,
                        have < h->data_bytes ? "missing: truncated?" : "too many");
    /* a stack of volumes records its volume size in mz: the scan shape of a 4-D array */
    if (h->ispg >= 401 && h->ispg <= 630 && h->mz >= 1 && h->nz % h->mz == 0) {
        h->vol_count = (size_t)(h->nz / h->mz);
        h->vol_sections = (size_t)h->mz;
    }
    return SSB4D_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Thermo Fisher extended header (one record per frame; field offsets of its MRC2014 notes)   */

#define FEI1_BYTES 768
#define FEI2_BYTES 888

int mrc_parse_fei(const uint8_t *e, size_t n, int be, int fei2, mrc_fei *f)
{
    memset(f, 0, sizeof *f);
    f->ht_V = f->pixel_size[0] = f->pixel_size[1] = f->camera_length_m = f->convergence_rad = NAN;
    f->magnification = f->dwell_s = f->frame_time_s = f->full_fov_m[0] = f->full_fov_m[1] = NAN;
    f->scan_rotation_rad = f->diffraction_rotation_rad = NAN;
    f->beam_center[0] = f->beam_center[1] = -1;
    if (!e || n < FEI1_BYTES)
        return 0;
    f->record_bytes = i32_at(e, be);
    f->version = i32_at(e + 4, be);
    if (f->record_bytes < FEI1_BYTES || (size_t)f->record_bytes > n)
        return 0;
    text_at(e + 20, 16, f->microscope);
    text_at(e + 52, 16, f->application);
    text_at(e + 68, 16, f->application_version);
    f->ht_V = f64_at(e + 84, be);
    f->pixel_size[0] = f64_at(e + 156, be);
    f->pixel_size[1] = f64_at(e + 164, be);
    f->magnification = f64_at(e + 289, be);
    f->camera_length_m = f64_at(e + 301, be);
    f->convergence_rad = f64_at(e + 329, be);
    f->binning[0] = i32_at(e + 427, be);
    f->binning[1] = i32_at(e + 431, be);
    text_at(e + 435, 16, f->camera);
    text_at(e + 519, 16, f->stem_detector);
    f->dwell_s = f64_at(e + 571, be);
    f->frame_time_s = f64_at(e + 579, be);
    f->scan_left = i32_at(e + 587, be);
    f->scan_top = i32_at(e + 591, be);
    f->scan_right = i32_at(e + 595, be);
    f->scan_bottom = i32_at(e + 599, be);
    f->full_fov_m[0] = f64_at(e + 603, be);
    f->full_fov_m[1] = f64_at(e + 611, be);
    if (fei2 && f->record_bytes >= FEI2_BYTES) {
        f->scan_rotation_rad = f64_at(e + 768, be);
        f->diffraction_rotation_rad = f64_at(e + 776, be);
        text_at(e + 804, 16, f->detector_commercial);
        f->beam_center[0] = i32_at(e + 852, be);
        f->beam_center[1] = i32_at(e + 856, be);
    }
    return 1;
}
