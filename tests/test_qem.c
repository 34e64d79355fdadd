/* test_qem.c — the .qem v1 container: golden files decode exactly, every corrupted copy is
 * refused with a message naming the rule, the writer reproduces the golden bodies bit for bit,
 * round trips, region reads, totals, the spatial index, atomic publication, truncation, hostile
 * headers (duplicate keys, NaN, other codecs and versions) and the scientific-metadata rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "codec/codec.h"
#include "common/sha256.h"
#include "io/npy.h"
#include "qem/qem.h"
#include "qem/qem_internal.h"
#include "ref_ssb.h"

#define GOLDEN SSB4D_SHARED_DATA "/qem-golden/"

/* ---- helpers ---- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint8_t *read_all(const char *path, size_t *size)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *d = malloc((size_t)n + 1);
    assert_non_null(d);
    assert_int_equal(fread(d, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    *size = (size_t)n;
    return d;
}

static void write_all_file(const char *path, const uint8_t *d, size_t n)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(d, 1, n, fp), n);
    fclose(fp);
}

static int contains(const char *s, const char *word) { return strstr(s, word) != NULL; }

/* A file image from header text and body bytes, with a correct envelope. */
static uint8_t *make_image(const char *hdr, size_t hl, const uint8_t *body, size_t bl, size_t *size)
{
    uint8_t *img = malloc(QEM_ENVELOPE + hl + bl);
    assert_non_null(img);
    memcpy(img, QEM_MAGIC, 8);
    qem_st64(img + 8, hl);
    qem_st64(img + 16, QEM_ENVELOPE + hl);
    char hex[65];
    ssb_sha256_hex(hdr, hl, hex);
    for (int i = 0; i < 32; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        img[24 + i] = (uint8_t)v;
    }
    memcpy(img + QEM_ENVELOPE, hdr, hl);
    memcpy(img + QEM_ENVELOPE + hl, body, bl);
    *size = QEM_ENVELOPE + hl + bl;
    return img;
}

/* Recomputes the body checksums in the (compact) header text, same length, and the envelope hash. */
static void reseal(uint8_t *img, size_t size)
{
    size_t hl = (size_t)qem_ld64(img + 8);
    char *hdr = malloc(hl + 1);
    memcpy(hdr, img + QEM_ENVELOPE, hl);
    hdr[hl] = '\0';
    const uint8_t *body = img + QEM_ENVELOPE + hl;
    size_t bl = size - QEM_ENVELOPE - hl;
    char *p = strstr(hdr, "\"sha256\":[");
    assert_non_null(p);
    p += strlen("\"sha256\":[");
    for (size_t b = 0; b * QEM_HASH_BLOCK < bl; b++) {
        size_t n = bl - b * QEM_HASH_BLOCK < QEM_HASH_BLOCK ? bl - b * QEM_HASH_BLOCK : QEM_HASH_BLOCK;
        char hex[65];
        ssb_sha256_hex(body + b * QEM_HASH_BLOCK, n, hex);
        assert_true(*p == '"');
        memcpy(p + 1, hex, 64);
        p += 66;
        if (*p == ',')
            p++;
    }
    memcpy(img + QEM_ENVELOPE, hdr, hl);
    char hex[65];
    ssb_sha256_hex(hdr, hl, hex);
    for (int i = 0; i < 32; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        img[24 + i] = (uint8_t)v;
    }
    free(hdr);
}

/* A copy of img with the first occurrence of `from` in the header replaced by `to`. */
static uint8_t *edit_header(const uint8_t *img, size_t size, const char *from, const char *to, size_t *out_size)
{
    size_t hl = (size_t)qem_ld64(img + 8);
    char *hdr = malloc(hl + 1);
    memcpy(hdr, img + QEM_ENVELOPE, hl);
    hdr[hl] = '\0';
    char *p = strstr(hdr, from);
    assert_non_null(p);
    size_t fl = strlen(from), tl = strlen(to), nl = hl - fl + tl;
    char *nh = malloc(nl + 1);
    memcpy(nh, hdr, (size_t)(p - hdr));
    memcpy(nh + (p - hdr), to, tl);
    memcpy(nh + (p - hdr) + tl, p + fl, hl - (size_t)(p - hdr) - fl);
    uint8_t *r = make_image(nh, nl, img + QEM_ENVELOPE + hl, size - QEM_ENVELOPE - hl, out_size);
    free(hdr);
    free(nh);
    return r;
}

static uint16_t *load_npy_u16(const char *path, size_t shape[4], int *dtype_bytes)
{
    ssb4d_npy_info info;
    void *data = NULL;
    ssb4d_err err = {0};
    assert_int_equal(ssb_npy_load(path, &info, &data, &err), SSB4D_OK);
    assert_int_equal(info.ndim, 4);
    size_t n = 1;
    for (int a = 0; a < 4; a++) {
        shape[a] = info.shape[a];
        n *= info.shape[a];
    }
    uint16_t *v = malloc(n * sizeof *v);
    assert_non_null(v);
    *dtype_bytes = (int)info.item_bytes;
    for (size_t i = 0; i < n; i++)
        v[i] = info.item_bytes == 1 ? ((const uint8_t *)data)[i] : ((const uint16_t *)data)[i];
    free(data);
    return v;
}

typedef struct {
    char dir[256];
} fixture;

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx || ref_tmpdir(fx->dir, sizeof fx->dir, "qem")) {
        free(fx);
        return -1;
    }
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    ref_rmtree(fx->dir);
    free(fx);
    return 0;
}

/* ---- golden files ---- */

typedef struct {
    const char *name;
    size_t chunk_scans;
    const char *body_sha;
    double scan[2], det[2], kv, semi, cam, dwell;
    int inv;
} golden;

static const golden goldens[] = {
    {"u16-mixed-23x24x9x9", 512, "3027e7fc5ac4c8533cec106f39cd2e3208d07b7110714ec7048779a8945a4629",
     {0.41000000000000003, 0.43}, {0.55, 0.57}, 300, 25, NAN, NAN, 0},
    {"u8-poisson-16x16x12x12", 512, "40ec7a35d800b8d1b5ab3352e26a5bc85a772e13afde9e149b85d532382b6279",
     {0.36, 0.37}, {1.95, 1.96}, 200, 21, 95, 20, 0},
    {"u16-masked-20x30x33x17", 1024, "00e26786811ad60d1f6e4fa4fa897e7b0cc3dd3f51e2d2c74a4b38ec0c702d60",
     {0.8, 0.8}, {0.021, 0.022}, 80, 30, NAN, NAN, 1},
};

static void same_or_nan(double got, double want)
{
    if (isnan(want))
        assert_true(isnan(got));
    else
        assert_true(got == want);
}

static void golden_decode(void **state)
{
    (void)state;
    for (size_t g = 0; g < 3; g++) {
        char path[512];
        size_t shape[4];
        int db;
        snprintf(path, sizeof path, GOLDEN "%s.npy", goldens[g].name);
        uint16_t *want = load_npy_u16(path, shape, &db);
        snprintf(path, sizeof path, GOLDEN "%s.qem", goldens[g].name);
        qem_file *f = NULL;
        ssb4d_err err = {0};
        assert_int_equal(qem_open(path, 1, 2, &f, &err), SSB4D_OK);
        const qem_info *in = qem_get_info(f);
        for (int a = 0; a < 4; a++)
            assert_int_equal(in->shape[a], shape[a]);
        assert_int_equal(in->dtype_bytes, db);
        size_t N = in->n_scans, P = in->n_pix;
        uint16_t *got = malloc(N * P * sizeof *got);
        size_t lo[4] = {0, 0, 0, 0};
        assert_int_equal(qem_read_region(f, lo, in->shape, got, 2, &err), SSB4D_OK);
        assert_memory_equal(got, want, N * P * sizeof *got);

        /* block decode of a few pixels */
        int32_t pix[3] = {0, (int32_t)(P / 2), (int32_t)(P - 1)};
        uint16_t blk[3 * 512];
        for (size_t b = 0; b < in->n_blocks; b++) {
            size_t t0, n;
            qem_block_range(f, b, &t0, &n);
            assert_int_equal(qem_decode_block(f, b, pix, 3, blk, &err), SSB4D_OK);
            for (int i = 0; i < 3; i++)
                for (size_t j = 0; j < n; j++)
                    assert_int_equal(blk[i * n + j], want[(t0 + j) * P + (size_t)pix[i]]);
        }
        int32_t badpix = (int32_t)P;
        assert_int_equal(qem_decode_block(f, 0, &badpix, 1, blk, &err), SSB4D_EINVAL);

        /* totals */
        uint64_t *tot = calloc(P, sizeof *tot);
        assert_int_equal(qem_pixel_totals(f, tot, 2, &err), SSB4D_OK);
        for (size_t k = 0; k < P; k++) {
            uint64_t s = 0;
            for (size_t t = 0; t < N; t++)
                s += want[t * P + k];
            assert_int_equal(tot[k], s);
        }
        /* valid mask */
        const uint8_t *valid = qem_valid_mask(f);
        size_t invalid = 0;
        for (size_t k = 0; k < P; k++)
            invalid += !valid[k];
        if (g == 2) {
            assert_int_equal(invalid, 36);
            size_t C = shape[3];
            for (size_t r = 0; r < shape[2]; r++)
                assert_int_equal(valid[r * C + 16], 0);
            assert_int_equal(valid[3 * C + 4], 0);
            assert_int_equal(valid[20 * C + 9], 0);
            assert_int_equal(valid[32 * C + 0], 0);
        } else {
            assert_int_equal(invalid, 0);
        }
        /* spatial index */
        assert_int_equal(qem_check_spatial_index(f, 2, &err), SSB4D_OK);
        /* effective calibration (README) */
        qem_calibration cal;
        qem_effective_calibration(f, &cal);
        const golden *gg = &goldens[g];
        assert_true(cal.scan_step_A[0] == gg->scan[0] && cal.scan_step_A[1] == gg->scan[1]);
        assert_true(cal.det_sampling[0] == gg->det[0] && cal.det_sampling[1] == gg->det[1]);
        assert_true(cal.kv == gg->kv && cal.semiangle_mrad == gg->semi);
        same_or_nan(cal.camera_length_mm, gg->cam);
        same_or_nan(cal.dwell_us, gg->dwell);
        assert_int_equal(cal.det_sampling_inverse_A, gg->inv);
        free(tot);
        free(got);
        free(want);
        qem_close(f);
    }
}

static void golden_bad_files(void **state)
{
    (void)state;
    static const struct {
        const char *file, *word;
    } bad[] = {
        {"truncated", "size"},      {"header-flip", "checksum"},  {"body-flip", "checksum"},
        {"magic", "magic"},         {"layout-resealed", "offset"}, {"stream-resealed", "stream"},
        {"model-resealed", "selector"}, {"offsets-resealed", "offset"}, {"sparse-order-resealed", "sparse"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, GOLDEN "u16-mixed-23x24x9x9.%s.bad.qem", bad[i].file);
        qem_file *f = NULL;
        ssb4d_err err = {0};
        ssb4d_status st = qem_open(path, 1, 1, &f, &err);
        if (st == SSB4D_OK) {
            const qem_info *in = qem_get_info(f);
            uint16_t *out = malloc(in->n_scans * in->n_pix * sizeof *out);
            size_t lo[4] = {0, 0, 0, 0};
            st = qem_read_region(f, lo, in->shape, out, 1, &err);
            free(out);
            ssb4d_err e2 = {0};
            uint64_t tot[81];
            assert_int_not_equal(qem_pixel_totals(f, tot, 2, &e2), SSB4D_OK);
            qem_close(f);
        }
        if (st == SSB4D_OK || !contains(err.msg, bad[i].word) || !contains(err.msg, "u16-mixed"))
            fail_msg("%s: status %d, message \"%s\" (want the word \"%s\")", bad[i].file, st, err.msg, bad[i].word);
        assert_int_equal(st, SSB4D_EFORMAT);
        assert_null(strchr(err.msg, '\n'));
    }
    /* verify_body = 0 skips the checksums (and only them) */
    qem_file *f = NULL;
    ssb4d_err err = {0};
    assert_int_equal(qem_open(GOLDEN "u16-mixed-23x24x9x9.body-flip.bad.qem", 0, 1, &f, &err), SSB4D_OK);
    qem_close(f);
    assert_int_equal(qem_open(GOLDEN "u16-mixed-23x24x9x9.layout-resealed.bad.qem", 0, 1, &f, &err), SSB4D_EFORMAT);
    assert_int_equal(qem_open("/nonexistent/x.qem", 1, 1, &f, &err), SSB4D_EIO);
    assert_null(f);
}

/* The public handle (include/ssb4d.h, what `ssb4d info` and `verify` read a .qem with) gives the
 * golden files' counts, shape, mask, calibration and header, and the reader's refusals. */
static void public_handle(void **state)
{
    (void)state;
    for (size_t g = 0; g < 3; g++) {
        char path[512];
        size_t shape[4];
        int db;
        snprintf(path, sizeof path, GOLDEN "%s.npy", goldens[g].name);
        uint16_t *want = load_npy_u16(path, shape, &db);
        snprintf(path, sizeof path, GOLDEN "%s.qem", goldens[g].name);
        ssb4d_qem *q = NULL;
        ssb4d_err err = {0};
        assert_int_equal(ssb4d_qem_open(path, 1, 2, &q, &err), SSB4D_OK);
        ssb4d_qem_info in;
        ssb4d_qem_get_info(q, &in);
        for (int a = 0; a < 4; a++)
            assert_int_equal(in.shape[a], shape[a]);
        assert_int_equal(in.dtype_bytes, db);
        assert_int_equal(in.n_scans, shape[0] * shape[1]);
        assert_int_equal(in.n_pix, shape[2] * shape[3]);
        struct stat sb;
        assert_int_equal(stat(path, &sb), 0);
        assert_int_equal(in.file_bytes, (size_t)sb.st_size);
        assert_true(in.header_bytes + in.body_bytes <= in.file_bytes); /* plus the fixed preamble */
        assert_true(in.payload_bytes > 0 && in.payload_bytes < in.body_bytes);
        size_t N = in.n_scans, P = in.n_pix;
        uint16_t *got = malloc(N * P * sizeof *got);
        size_t lo[4] = {0, 0, 0, 0};
        assert_int_equal(ssb4d_qem_read_region(q, lo, in.shape, got, 2, &err), SSB4D_OK);
        assert_memory_equal(got, want, N * P * sizeof *got);
        assert_int_equal(ssb4d_qem_check_index(q, 2, &err), SSB4D_OK);
        const uint8_t *valid = ssb4d_qem_valid_mask(q);
        size_t invalid = 0;
        for (size_t k = 0; k < P; k++)
            invalid += !valid[k];
        assert_int_equal(invalid, g == 2 ? 36 : 0);
        ssb4d_qem_calibration cal;
        ssb4d_qem_calibration_of(q, &cal);
        const golden *gg = &goldens[g];
        assert_true(cal.scan_step_A[0] == gg->scan[0] && cal.scan_step_A[1] == gg->scan[1]);
        assert_true(cal.det_sampling[0] == gg->det[0] && cal.det_sampling[1] == gg->det[1]);
        assert_true(cal.kv == gg->kv && cal.semiangle_mrad == gg->semi);
        same_or_nan(cal.camera_length_mm, gg->cam);
        same_or_nan(cal.dwell_us, gg->dwell);
        assert_int_equal(cal.det_sampling_inverse_A, gg->inv);
        ssb4d_qem_flags fl;
        ssb4d_qem_flags_of(q, &fl);
        assert_int_equal(fl.replaced, 0); /* the goldens record no replacement */
        /* the header text is the whole header, numbers exact */
        char *text = ssb4d_qem_header_text(q);
        assert_non_null(text);
        cJSON *h = cJSON_Parse(text);
        qem_file *f = NULL;
        assert_int_equal(qem_open(path, 0, 1, &f, &err), SSB4D_OK);
        assert_true(cJSON_Compare(h, qem_header_json(f), 1));
        qem_close(f);
        cJSON_Delete(h);
        free(text);
        ssb4d_qem_close(q);
        free(got);
        free(want);
    }
    ssb4d_qem *q = NULL;
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_qem_open(GOLDEN "u16-mixed-23x24x9x9.body-flip.bad.qem", 1, 1, &q, &err), SSB4D_EFORMAT);
    assert_null(q);
    assert_int_equal(ssb4d_qem_open(GOLDEN "u16-mixed-23x24x9x9.body-flip.bad.qem", 0, 1, &q, &err), SSB4D_OK);
    ssb4d_qem_close(q);
    assert_int_equal(ssb4d_qem_open("/nonexistent/x.qem", 1, 1, &q, &err), SSB4D_EIO);
    assert_null(q);
    ssb4d_qem_close(NULL);
}

/* ---- writer ---- */

static qem_writer_opts opts_for(const size_t shape[4], int dtype_bytes, size_t chunk)
{
    qem_writer_opts o;
    memset(&o, 0, sizeof o);
    memcpy(o.shape, shape, sizeof o.shape);
    o.dtype_bytes = dtype_bytes;
    o.chunk_scans = chunk;
    o.threads = 2;
    return o;
}

static ssb4d_status write_array(const char *path, qem_writer_opts *o, const uint16_t *v, size_t piece,
                                ssb4d_err *err)
{
    qem_writer *w = NULL;
    ssb4d_status st = qem_writer_open(path, o, &w, err);
    if (st)
        return st;
    size_t N = o->shape[0] * o->shape[1], P = o->shape[2] * o->shape[3];
    for (size_t t = 0; t < N; t += piece) {
        size_t n = N - t < piece ? N - t : piece;
        if ((st = qem_writer_append(w, v + t * P, n, err))) {
            qem_writer_abort(w);
            return st;
        }
    }
    return qem_writer_finish(w, err);
}

static void writer_reproduces_golden_bodies(void **state)
{
    fixture *fx = *state;
    for (size_t g = 0; g < 3; g++) {
        char path[512], out[512];
        size_t shape[4];
        int db;
        snprintf(path, sizeof path, GOLDEN "%s.npy", goldens[g].name);
        uint16_t *v = load_npy_u16(path, shape, &db);
        snprintf(path, sizeof path, GOLDEN "%s.qem", goldens[g].name);
        qem_file *ref = NULL;
        ssb4d_err err = {0};
        assert_int_equal(qem_open(path, 1, 1, &ref, &err), SSB4D_OK);
        const cJSON *rh = qem_header_json(ref);
        qem_writer_opts o = opts_for(shape, db, goldens[g].chunk_scans);
        o.valid = qem_valid_mask(ref);
        o.scientific_metadata = cJSON_Duplicate(cJSON_GetObjectItem(rh, "scientific_metadata"), 1);
        o.metadata = cJSON_Duplicate(cJSON_GetObjectItem(rh, "metadata"), 1);
        snprintf(out, sizeof out, "%s/%s.qem", fx->dir, goldens[g].name);
        assert_int_equal(write_array(out, &o, v, 100, &err), SSB4D_OK);

        size_t size;
        uint8_t *img = read_all(out, &size);
        size_t hl = (size_t)qem_ld64(img + 8);
        char hex[65];
        ssb_sha256_hex(img + QEM_ENVELOPE + hl, size - QEM_ENVELOPE - hl, hex);
        if (strcmp(hex, goldens[g].body_sha) != 0)
            fail_msg("%s: body sha256 %s, golden %s", goldens[g].name, hex, goldens[g].body_sha);
        /* the header matches by meaning */
        qem_file *f = NULL;
        assert_int_equal(qem_open(out, 1, 1, &f, &err), SSB4D_OK);
        const cJSON *h = qem_header_json(f);
        static const char *const keys[] = {"bytes", "chunks", "codec", "container", "container_version", "dtype",
                                           "interval", "metadata", "profile", "scientific_metadata", "sha256",
                                           "shape", "valid", "version"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            if (!cJSON_Compare(cJSON_GetObjectItem(h, keys[k]), cJSON_GetObjectItem(rh, keys[k]), 1))
                fail_msg("%s: header field %s differs", goldens[g].name, keys[k]);
        assert_int_equal(qem_check_spatial_index(f, 2, &err), SSB4D_OK);
        qem_close(f);
        qem_close(ref);
        free(img);
        free(v);
    }
    assert_int_equal(ref_dir_count(fx->dir, ".tmp"), 0);
    assert_int_equal(ref_dir_clear(fx->dir), 0);
}

/* Data that exercises every selector: zeros, constants, sparse, Poisson-like, large values. */
static uint16_t *random_frames(size_t N, size_t P, uint32_t maxval, uint64_t seed)
{
    uint16_t *v = malloc(N * P * sizeof *v);
    uint64_t s = seed;
    for (size_t k = 0; k < P; k++) {
        unsigned kind = (unsigned)(k % 7);
        for (size_t t = 0; t < N; t++) {
            uint64_t r = rng_next(&s);
            uint32_t x;
            switch (kind) {
            case 0: x = 0; break;
            case 1: x = (uint32_t)(k * 37 % (maxval + 1)); break;
            case 2: x = r % 97 == 0 ? (uint32_t)(1 + r % 128) : 0; break;
            case 3: x = (uint32_t)(r % 4 + (r >> 8) % 3); break;
            case 4: x = (uint32_t)(r % 40); break;
            case 5: x = (uint32_t)(r % (maxval + 1)); break;
            default: x = (r & 255) == 0 ? (uint32_t)((r >> 8) % (maxval + 1)) : (uint32_t)((r >> 16) % 3); break;
            }
            v[t * P + k] = (uint16_t)x;
        }
    }
    return v;
}

static void check_region(qem_file *f, const uint16_t *v, const size_t lo[4], const size_t hi[4])
{
    const qem_info *in = qem_get_info(f);
    size_t R = hi[0] - lo[0], C = hi[1] - lo[1], DR = hi[2] - lo[2], DC = hi[3] - lo[3];
    uint16_t *out = malloc((R * C * DR * DC + 1) * sizeof *out);
    ssb4d_err err = {0};
    assert_int_equal(qem_read_region(f, lo, hi, out, 3, &err), SSB4D_OK);
    size_t i = 0;
    for (size_t r = lo[0]; r < hi[0]; r++)
        for (size_t c = lo[1]; c < hi[1]; c++)
            for (size_t dr = lo[2]; dr < hi[2]; dr++)
                for (size_t dc = lo[3]; dc < hi[3]; dc++, i++) {
                    size_t t = r * in->shape[1] + c, k = dr * in->shape[3] + dc;
                    if (out[i] != v[t * in->n_pix + k])
                        fail_msg("region [%zu,%zu)x[%zu,%zu)x[%zu,%zu)x[%zu,%zu) differs at scan (%zu,%zu) pixel "
                                 "(%zu,%zu)",
                                 lo[0], hi[0], lo[1], hi[1], lo[2], hi[2], lo[3], hi[3], r, c, dr, dc);
                }
    free(out);
}

static void round_trip_random(void **state)
{
    fixture *fx = *state;
    /* 2100 scans in chunks of 1024: blocks of 512, 512 | 512, 512 | 52 */
    const size_t shape[4] = {7, 300, 5, 7};
    const size_t N = 2100, P = 35;
    uint16_t *v = random_frames(N, P, 65535, 42);
    uint8_t valid[35];
    for (size_t k = 0; k < P; k++)
        valid[k] = k % 5 != 3;
    char path[512], path1[512];
    snprintf(path, sizeof path, "%s/rt.qem", fx->dir);
    qem_writer_opts o = opts_for(shape, 2, 1024);
    o.valid = valid;
    ssb4d_err err = {0};
    assert_int_equal(write_array(path, &o, v, 333, &err), SSB4D_OK);
    /* the same file with one thread and other append sizes: identical bytes */
    snprintf(path1, sizeof path1, "%s/rt1.qem", fx->dir);
    o = opts_for(shape, 2, 1024);
    o.valid = valid;
    o.threads = 1;
    assert_int_equal(write_array(path1, &o, v, 1000, &err), SSB4D_OK);
    size_t s0, s1;
    uint8_t *a = read_all(path, &s0), *b = read_all(path1, &s1);
    assert_int_equal(s0, s1);
    assert_memory_equal(a, b, s0);
    free(a);
    free(b);

    qem_file *f = NULL;
    assert_int_equal(qem_open(path, 1, 2, &f, &err), SSB4D_OK);
    const qem_info *in = qem_get_info(f);
    assert_int_equal(in->n_chunks, 3);
    assert_int_equal(in->n_blocks, 5);
    size_t t0, n;
    qem_block_range(f, 4, &t0, &n);
    assert_int_equal(t0, 2048);
    assert_int_equal(n, 52);
    for (size_t k = 0; k < P; k++)
        assert_int_equal(qem_valid_mask(f)[k], valid[k]);
    size_t lo[4] = {0, 0, 0, 0};
    check_region(f, v, lo, in->shape);
    uint64_t tot[35];
    assert_int_equal(qem_pixel_totals(f, tot, 3, &err), SSB4D_OK);
    for (size_t k = 0; k < P; k++) {
        uint64_t s = 0;
        for (size_t t = 0; t < N; t++)
            s += v[t * P + k];
        assert_int_equal(tot[k], s);
    }
    assert_int_equal(qem_check_spatial_index(f, 3, &err), SSB4D_OK);
    /* random rectangles, plus ones across the 512-scan block and 1024-scan chunk boundaries */
    uint64_t s = 7;
    for (int it = 0; it < 60; it++) {
        size_t l[4], h[4];
        for (int ax = 0; ax < 4; ax++) {
            size_t x = rng_next(&s) % in->shape[ax], y = rng_next(&s) % in->shape[ax];
            l[ax] = x < y ? x : y;
            h[ax] = (x < y ? y : x) + 1;
        }
        check_region(f, v, l, h);
    }
    const size_t cross[][4] = {{1, 2, 200, 250}, {3, 4, 100, 140}, {6, 7, 0, 300}, {1, 4, 290, 300}, {0, 7, 123, 124}};
    for (size_t i = 0; i < sizeof cross / sizeof cross[0]; i++) {
        size_t l[4] = {cross[i][0], cross[i][2], 1, 2}, h[4] = {cross[i][1], cross[i][3], 4, 7};
        check_region(f, v, l, h);
    }
    size_t l0[4] = {2, 2, 2, 2}, h0[4] = {2, 5, 5, 5}; /* empty */
    assert_int_equal(qem_read_region(f, l0, h0, NULL, 1, &err), SSB4D_OK);
    size_t hbad[4] = {8, 300, 5, 7};
    uint16_t dummy;
    assert_int_equal(qem_read_region(f, lo, hbad, &dummy, 1, &err), SSB4D_EINVAL);
    qem_close(f);

    /* uint8, default chunking (one chunk here) and a partial single block */
    const size_t shape8[4] = {3, 50, 9, 4};
    uint16_t *v8 = random_frames(150, 36, 255, 9);
    snprintf(path, sizeof path, "%s/u8.qem", fx->dir);
    o = opts_for(shape8, 1, 0);
    assert_int_equal(write_array(path, &o, v8, 150, &err), SSB4D_OK);
    assert_int_equal(qem_open(path, 1, 1, &f, &err), SSB4D_OK);
    assert_int_equal(qem_get_info(f)->dtype_bytes, 1);
    check_region(f, v8, lo, qem_get_info(f)->shape);
    assert_int_equal(qem_check_spatial_index(f, 1, &err), SSB4D_OK);
    qem_calibration cal;
    qem_effective_calibration(f, &cal);
    assert_true(isnan(cal.kv) && isnan(cal.scan_step_A[0]) && isnan(cal.det_sampling[1]));
    qem_close(f);
    free(v8);
    free(v);
    assert_int_equal(ref_dir_count(fx->dir, ".tmp"), 0);
    assert_int_equal(ref_dir_clear(fx->dir), 0);
}

static void writer_refusals_leave_nothing(void **state)
{
    fixture *fx = *state;
    const size_t shape[4] = {2, 40, 3, 3};
    uint16_t *v = random_frames(80, 9, 255, 3);
    char path[512];
    snprintf(path, sizeof path, "%s/a.qem", fx->dir);
    ssb4d_err err = {0};
    qem_writer_opts o = opts_for(shape, 1, 0);
    assert_int_equal(write_array(path, &o, v, 80, &err), SSB4D_OK);
    size_t s0;
    uint8_t *orig = read_all(path, &s0);

    /* overwrite refused without force, at open */
    o = opts_for(shape, 1, 0);
    qem_writer *w = NULL;
    assert_int_not_equal(qem_writer_open(path, &o, &w, &err), SSB4D_OK);
    assert_true(contains(err.msg, "exists; use --force to replace it"));
    /* ... and at publication, when the name appears while writing */
    char path2[512];
    snprintf(path2, sizeof path2, "%s/b.qem", fx->dir);
    o = opts_for(shape, 1, 0);
    assert_int_equal(qem_writer_open(path2, &o, &w, &err), SSB4D_OK);
    assert_int_equal(qem_writer_append(w, v, 80, &err), SSB4D_OK);
    write_all_file(path2, (const uint8_t *)"x", 1);
    assert_int_not_equal(qem_writer_finish(w, &err), SSB4D_OK);
    assert_true(contains(err.msg, "exists; use --force"));
    size_t s2;
    uint8_t *x = read_all(path2, &s2);
    assert_int_equal(s2, 1);
    free(x);
    assert_int_equal(ref_dir_count(fx->dir, ".tmp"), 0);
    /* force replaces */
    o = opts_for(shape, 1, 0);
    o.force = 1;
    assert_int_equal(write_array(path2, &o, v, 80, &err), SSB4D_OK);
    x = read_all(path2, &s2);
    assert_int_equal(s2, s0);
    assert_memory_equal(x, orig, s0);
    free(x);

    /* value too large for uint8 */
    v[45] = 256;
    snprintf(path2, sizeof path2, "%s/c.qem", fx->dir);
    o = opts_for(shape, 1, 0);
    assert_int_equal(write_array(path2, &o, v, 20, &err), SSB4D_EINVAL);
    assert_true(contains(err.msg, "uint8"));
    assert_true(contains(err.msg, "scan 5"));
    v[45] = 0;
    /* too few scans, abort, too many scans */
    o = opts_for(shape, 1, 0);
    assert_int_equal(qem_writer_open(path2, &o, &w, &err), SSB4D_OK);
    assert_int_equal(qem_writer_append(w, v, 10, &err), SSB4D_OK);
    assert_int_not_equal(qem_writer_finish(w, &err), SSB4D_OK);
    assert_true(contains(err.msg, "10 of 80"));
    o = opts_for(shape, 1, 0);
    assert_int_equal(qem_writer_open(path2, &o, &w, &err), SSB4D_OK);
    assert_int_equal(qem_writer_append(w, v, 10, &err), SSB4D_OK);
    qem_writer_abort(w);
    qem_writer_abort(NULL);
    o = opts_for(shape, 2, 64);
    assert_int_equal(qem_writer_open(path2, &o, &w, &err), SSB4D_EINVAL); /* chunk not a multiple of 512 */
    o = opts_for(shape, 2, 0);
    assert_int_equal(qem_writer_open(path2, &o, &w, &err), SSB4D_OK);
    assert_int_not_equal(qem_writer_append(w, v, 81, &err), SSB4D_OK);
    assert_int_not_equal(qem_writer_finish(w, &err), SSB4D_OK);
    /* bad scientific metadata is refused at open */
    o = opts_for(shape, 2, 0);
    o.scientific_metadata = cJSON_CreateObject();
    assert_int_equal(qem_writer_open(path2, &o, &w, &err), SSB4D_EINVAL);
    assert_true(contains(err.msg, "schema"));
    /* a missing folder */
    snprintf(path2, sizeof path2, "%s/no/such/dir.qem", fx->dir);
    o = opts_for(shape, 2, 0);
    assert_int_equal(qem_writer_open(path2, &o, &w, &err), SSB4D_EIO);

    assert_int_equal(ref_dir_count(fx->dir, NULL), 2); /* a.qem, b.qem */
    free(orig);
    free(v);
    assert_int_equal(ref_dir_clear(fx->dir), 0);
}

/* A body over 64 MiB: two checksum blocks, written incrementally and verified per block. */
static void body_over_64_mib(void **state)
{
    fixture *fx = *state;
    const size_t shape[4] = {64, 128, 64, 65};
    const size_t N = 8192, P = 4160;
    uint16_t *v = malloc(N * P * sizeof *v);
    assert_non_null(v);
    uint64_t s = 11;
    for (size_t i = 0; i < N * P; i += 4) { /* uniform u16: literal streams, 2 bytes per count */
        uint64_t r = rng_next(&s);
        for (size_t j = 0; j < 4 && i + j < N * P; j++)
            v[i + j] = (uint16_t)(r >> (16 * j));
    }
    char path[512];
    snprintf(path, sizeof path, "%s/big.qem", fx->dir);
    ssb4d_err err = {0};
    qem_writer_opts o = opts_for(shape, 2, 0);
    assert_int_equal(write_array(path, &o, v, 1000, &err), SSB4D_OK);
    qem_file *f = NULL;
    assert_int_equal(qem_open(path, 1, 2, &f, &err), SSB4D_OK);
    const qem_info *in = qem_get_info(f);
    assert_true(in->body_bytes > QEM_HASH_BLOCK);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(qem_header_json(f), "sha256")), 2);
    assert_int_equal(in->n_chunks, 1); /* 8192 scans x 4160 pixels x 2 bytes fit the 128 MiB buffer */
    uint16_t *out = malloc(N * P * sizeof *out);
    size_t lo[4] = {0, 0, 0, 0};
    assert_int_equal(qem_read_region(f, lo, in->shape, out, 2, &err), SSB4D_OK);
    assert_memory_equal(out, v, N * P * sizeof *out);
    size_t at = QEM_ENVELOPE + in->header_bytes + QEM_HASH_BLOCK + 5;
    qem_close(f);
    free(out);
    free(v);
    /* damage in the second block is reported as block 1 */
    size_t size;
    uint8_t *img = read_all(path, &size);
    img[at] ^= 1;
    assert_int_equal(qem_open_memory(img, size, 1, &f, &err), SSB4D_EFORMAT);
    assert_true(contains(err.msg, "checksum mismatch in block 1"));
    free(img);
    assert_int_equal(ref_dir_clear(fx->dir), 0);
}

/* ---- hostile files ---- */

static void spatial_index_corruption_detected(void **state)
{
    (void)state;
    size_t size;
    uint8_t *img = read_all(GOLDEN "u16-masked-20x30x33x17.qem", &size);
    qem_file *f = NULL;
    ssb4d_err err = {0};
    assert_int_equal(qem_open_memory(img, size, 1, &f, &err), SSB4D_OK);
    const cJSON *arrays = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(qem_header_json(f), "chunks"), 0),
                                              "arrays");
    size_t words_off = (size_t)cJSON_GetObjectItem(cJSON_GetArrayItem(arrays, 3), "offset")->valuedouble;
    size_t body = QEM_ENVELOPE + qem_get_info(f)->header_bytes;
    qem_close(f);
    img[body + words_off + 4 * 10] ^= 0x04; /* one spatial word */
    reseal(img, size);
    assert_int_equal(qem_open_memory(img, size, 1, &f, &err), SSB4D_OK);
    assert_int_equal(qem_check_spatial_index(f, 2, &err), SSB4D_EFORMAT);
    assert_true(contains(err.msg, "spatial index"));
    /* the counts themselves are still intact */
    uint64_t tot[561];
    assert_int_equal(qem_pixel_totals(f, tot, 2, &err), SSB4D_OK);
    qem_close(f);
    free(img);
}

static void truncation_always_refused(void **state)
{
    (void)state;
    size_t size;
    uint8_t *img = read_all(GOLDEN "u16-mixed-23x24x9x9.qem", &size);
    size_t hl = (size_t)qem_ld64(img + 8);
    for (size_t n = 0; n < size; n += n < QEM_ENVELOPE + hl + 64 ? 1 : 7) {
        uint8_t *cut = malloc(n ? n : 1); /* exact size: ASan sees any read past the end */
        memcpy(cut, img, n);
        qem_file *f = NULL;
        ssb4d_err err = {0};
        ssb4d_status st = qem_open_memory(cut, n, 1, &f, &err);
        if (st == SSB4D_OK)
            fail_msg("a file cut to %zu of %zu bytes was accepted", n, size);
        assert_null(f);
        assert_true(err.msg[0] != '\0');
        free(cut);
    }
    free(img);
}

static void hostile_headers_refused(void **state)
{
    (void)state;
    size_t size, n;
    uint8_t *img = read_all(GOLDEN "u16-mixed-23x24x9x9.qem", &size);
    static const struct {
        const char *from, *to, *word;
    } edits[] = {
        {"\"dtype\":\"uint16\"", "\"dtype\":\"uint16\",\"dtype\":\"uint16\"", "duplicate"},
        {"\"fixture\":\"u16-mixed-23x24x9x9\"}", "\"fixture\":\"x\",\"fixture\":\"y\"}", "duplicate"},
        {"\"container_version\":1", "\"container_version\":2", "runtime-column-rans-spatial-v2"},
        {"\"codec\":\"runtime-column-rans-spatial-v2\"", "\"codec\":\"float32-bit-lanes-rans-v1\"",
         "float32-bit-lanes-rans-v1"},
        {"\"profile\":\"runtime-column-rans-spatial-v2\"", "\"profile\":\"x\"", "profile"},
        {"\"value\":0.43}", "\"value\":NaN}", "NaN"},
        {"\"value\":0.43}", "\"value\":1e999}", "number"},
        {"\"interval\":512", "\"interval\":512.5", "interval"},
        {"\"shape\":[23,24,9,9]", "\"shape\":[23,24,9,9.0e0]", "shape"}, /* accepted as 9; then axes fine */
        {"\"shape\":[23,24,9,9]", "\"shape\":[23,24,9,16777216]", "shape"},
        {"\"valid\":\"ffffffffffffffffffff80\"", "\"valid\":\"FFFFFFFFFFFFFFFFFFFF80\"", "valid"},
        {"\"valid\":\"ffffffffffffffffffff80\"", "\"valid\":\"ffffffffffffffffffff\"", "valid"},
        {"\"schema\":\"quantem.scientific-metadata/2\"", "\"schema\":\"quantem.scientific-metadata/1\"", "schema"},
        {"\"unit\":\"angstrom\",\"value\":0.43}", "\"unit\":\"nm\",\"value\":0.43}", "canonical"},
        {"\"metadata\":{", "\"metadata\":{\"source_dtype\":\"uint32\",", "narrowing"},
        {"\"first\":512", "\"first\":511", "chunk"},
        {"\"bytes\":21365", "\"bytes\":21366", "bytes"},
        {"{\"bytes\"", "[{\"bytes\"", "JSON"},
        {"\"version\":1}", "\"version\":1} ", NULL}, /* trailing whitespace is fine */
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        uint8_t *e = edit_header(img, size, edits[i].from, edits[i].to, &n);
        qem_file *f = NULL;
        ssb4d_err err = {0};
        ssb4d_status st = qem_open_memory(e, n, 1, &f, &err);
        if (i == 8) { /* 9.0e0 is the integer 9 */
            assert_int_equal(st, SSB4D_OK);
        } else if (!edits[i].word) {
            assert_int_equal(st, SSB4D_OK);
        } else if (st == SSB4D_OK || !contains(err.msg, edits[i].word)) {
            fail_msg("edit %zu (%s): status %d, message \"%s\"", i, edits[i].to, st, err.msg);
        }
        qem_close(f);
        free(e);
    }
    free(img);
}

/* Random damage, resealed so that it reaches the deep checks: never a crash, hang or leak. */
static void random_damage_never_crashes(void **state)
{
    (void)state;
    size_t size;
    uint8_t *img = read_all(GOLDEN "u16-mixed-23x24x9x9.qem", &size);
    size_t hl = (size_t)qem_ld64(img + 8);
    uint64_t s = 99;
    size_t opened = 0, refused = 0;
    uint16_t *out = malloc(552 * 81 * sizeof *out);
    for (int it = 0; it < 600; it++) {
        uint8_t *d = malloc(size);
        memcpy(d, img, size);
        int nflip = 1 + (int)(rng_next(&s) % 4);
        for (int k = 0; k < nflip; k++) {
            size_t at = it % 2 ? QEM_ENVELOPE + rng_next(&s) % hl              /* header */
                               : QEM_ENVELOPE + hl + rng_next(&s) % (size - QEM_ENVELOPE - hl); /* body */
            d[at] ^= (uint8_t)(1u << (rng_next(&s) % 8));
        }
        if (it % 2 == 0)
            reseal(d, size);
        else {
            char hex[65];
            ssb_sha256_hex(d + QEM_ENVELOPE, hl, hex);
            for (int i = 0; i < 32; i++) {
                unsigned v;
                sscanf(hex + 2 * i, "%2x", &v);
                d[24 + i] = (uint8_t)v;
            }
        }
        qem_file *f = NULL;
        ssb4d_err err = {0};
        if (qem_open_memory(d, size, 1, &f, &err) == SSB4D_OK) {
            opened++;
            const qem_info *in = qem_get_info(f);
            size_t lo[4] = {0, 0, 0, 0};
            if (in->n_scans * in->n_pix <= 552 * 81)
                qem_read_region(f, lo, in->shape, out, 2, &err);
            uint64_t *tot = malloc(in->n_pix * sizeof *tot);
            qem_pixel_totals(f, tot, 2, &err);
            free(tot);
            qem_check_spatial_index(f, 2, &err);
            qem_close(f);
        } else {
            refused++;
            assert_true(err.msg[0] != '\0');
        }
        free(d);
    }
    assert_true(refused > 0);
    free(out);
    free(img);
}

/* ---- scientific metadata ---- */

static cJSON *parse(const char *text)
{
    char why[128];
    cJSON *j = qem_json_parse_strict(text, strlen(text), why, sizeof why);
    if (!j)
        fail_msg("test JSON does not parse: %s", why);
    return j;
}

static void metadata_builder_and_validator(void **state)
{
    (void)state;
    const size_t shape[4] = {16, 16, 12, 12};
    qem_meta_in in = {.kv = 300,
                      .semiangle_mrad = 25,
                      .scan_step_A = {0.41, 0.43},
                      .det_sampling = {0.55, NAN},
                      .camera_length_mm = 91,
                      .dwell_us = 0,
                      .source_format = "numpy",
                      .source_metadata = parse("{\"a\":\"b\"}"),
                      .processing_extra = parse("[{\"operation\":\"exact_integer_narrowing\",\"changes_measurements\""
                                                ":false,\"source_dtype\":\"uint32\",\"stored_dtype\":\"uint16\"}]")};
    cJSON *sci = qem_build_scientific_metadata(shape, &in);
    assert_non_null(sci);
    ssb4d_err err = {0};
    cJSON *meta = parse("{\"source_dtype\":\"uint32\"}");
    assert_int_equal(qem_validate_scientific_metadata(sci, meta, shape, "uint16", &err), SSB4D_OK);
    /* the narrowing record is what makes source_dtype legal */
    cJSON *sci2 = qem_build_scientific_metadata(shape, NULL);
    assert_int_equal(qem_validate_scientific_metadata(sci2, meta, shape, "uint16", &err), SSB4D_EFORMAT);
    assert_true(contains(err.msg, "exact_integer_narrowing"));
    assert_int_equal(qem_validate_scientific_metadata(sci2, NULL, shape, "uint16", &err), SSB4D_OK);
    size_t other[4] = {16, 17, 12, 12};
    assert_int_equal(qem_validate_scientific_metadata(sci2, NULL, other, "uint16", &err), SSB4D_EFORMAT);
    cJSON_Delete(sci2);
    cJSON_Delete(meta);

    qem_calibration cal;
    qem_calibration_from_metadata(sci, &cal);
    assert_true(cal.kv == 300 && cal.semiangle_mrad == 25 && cal.camera_length_mm == 91 && isnan(cal.dwell_us));
    assert_true(cal.scan_step_A[0] == 0.41 && cal.scan_step_A[1] == 0.43);
    assert_true(cal.det_sampling[0] == 0.55 && isnan(cal.det_sampling[1]));
    const cJSON *axes = cJSON_GetObjectItem(sci, "axes");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(axes, 3), "name")->valuestring, "detector_column");
    assert_null(cJSON_GetObjectItem(cJSON_GetArrayItem(axes, 3), "sampling"));
    assert_string_equal(cJSON_GetObjectItem(sci, "source_format")->valuestring, "numpy");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(sci, "processing")), 2);

    /* every edit below must be refused, with the word in the message */
    static const struct {
        const char *json, *word;
    } bad[] = {
        {"{\"electron_microscope\":{\"scan_controller/regular_scan/pixel_size_x\":{\"value\":1,\"unit\":\"angstrom\","
         "\"provenance\":\"p\"}}}",
         "retired"},
        {"{\"electron_microscope\":{\"scan_controller/regular_scan/pixel_size_row\":{\"value\":0.4100000001,\"unit\":"
         "\"angstrom\",\"provenance\":\"source_metadata\"}}}",
         "disagrees"},
        {"{\"electron_microscope\":{\"electron_source/accelerating_voltage\":{\"value\":300000,\"unit\":\"V\","
         "\"provenance\":\"p\"}}}",
         "canonical"},
        {"{\"electron_microscope\":{\"x/y\":{\"value\":-1,\"unit\":\"V\",\"provenance\":\"p\"}}}", "> 0"},
        {"{\"electron_microscope\":{\"x/y\":{\"value\":true,\"unit\":\"V\",\"provenance\":\"p\"}}}", "> 0"},
        {"{\"electron_microscope\":{\"x/y\":{\"value\":1,\"unit\":\"V\",\"provenance\":\"  \"}}}", "provenance"},
        {"{\"calibration_overrides\":{\"scan_controller/regular_scan/pixel_size_row\":{\"value\":0.36,\"unit\":"
         "\"angstrom\",\"provenance\":\"user_override\",\"evidence\":\"e\"}}}",
         "both"},
        {"{\"calibration_overrides\":{\"scan_controller/regular_scan/pixel_size_row\":{\"value\":1e5,\"unit\":"
         "\"angstrom\",\"provenance\":\"user_override\",\"evidence\":\"e\"},\"scan_controller/regular_scan/"
         "pixel_size_column\":{\"value\":1e5,\"unit\":\"angstrom\",\"provenance\":\"user_override\",\"evidence\":"
         "\"e\"}}}",
         "outside"},
        {"{\"calibration_overrides\":{\"imaging_system/reciprocal_pixel_size_row\":{\"value\":1,\"unit\":\"mrad\","
         "\"provenance\":\"user_override\",\"evidence\":\"e\"},\"imaging_system/reciprocal_pixel_size_column\":{"
         "\"value\":1,\"unit\":\"1/angstrom\",\"provenance\":\"user_override\",\"evidence\":\"e\"}}}",
         "different units"},
        {"{\"calibration_overrides\":{\"electron_source/accelerating_voltage\":{\"value\":200,\"unit\":\"kV\","
         "\"provenance\":\"source_metadata\",\"evidence\":\"e\"}}}",
         "user_override"},
        {"{\"calibration_overrides\":{\"electron_source/accelerating_voltage\":{\"value\":200,\"unit\":\"kV\","
         "\"provenance\":\"user_override\"}}}",
         "evidence"},
        {"{\"calibration_overrides\":{\"electron_source/beam_energy\":{\"value\":200,\"unit\":\"keV\","
         "\"provenance\":\"user_override\",\"evidence\":\"e\"}}}",
         "may not"},
        {"{\"calibration_overrides\":{\"imaging_system/reciprocal_pixel_size_y\":{\"value\":1,\"unit\":\"mrad\","
         "\"provenance\":\"user_override\",\"evidence\":\"e\"}}}",
         "retired"},
        {"{\"processing\":[]}", "processing"},
        {"{\"processing\":[{\"operation\":\"lossless_storage\"}]}", "changes_measurements"},
        {"{\"processing\":[{\"operation\":\"lossless_storage\",\"changes_measurements\":true}]}", "false"},
        {"{\"processing\":[{\"operation\":\"flagged_pixel_replacement\",\"changes_measurements\":true}]}", "method"},
        {"{\"source_metadata_coverage\":\"most\"}", "coverage"},
        {"{\"source_metadata\":[]}", "source_metadata"},
        {"{\"schema\":\"quantem.scientific-metadata/3\"}", "schema"},
        {"{\"source_documents\":[{\"filename\":\"a.xml\",\"mediaType\":\"application/xml\",\"content\":\"<a/>\","
         "\"sha256\":\"00\"}]}",
         "sha256"},
        {"{\"source_documents\":[{\"filename\":\"d/a.xml\",\"mediaType\":\"application/xml\",\"content\":\"<a/>\","
         "\"sha256\":\"00\"}]}",
         "filename"},
        {"{\"source_documents\":[{\"filename\":\"a.txt\",\"mediaType\":\"text/plain\",\"content\":\"x\","
         "\"sha256\":\"00\"}]}",
         "mediaType"},
        {"{\"sample\":[]}", "sample"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *s = cJSON_Duplicate(sci, 1);
        cJSON *patch = parse(bad[i].json);
        for (cJSON *c = patch->child; c; c = c->next) {
            cJSON *dup = cJSON_Duplicate(c, 1);
            if (!cJSON_ReplaceItemInObjectCaseSensitive(s, c->string, dup))
                cJSON_AddItemToObject(s, c->string, dup);
        }
        ssb4d_status st = qem_validate_scientific_metadata(s, NULL, shape, "uint16", &err);
        if (st == SSB4D_OK || !contains(err.msg, bad[i].word))
            fail_msg("metadata edit %zu: status %d, message \"%s\" (want \"%s\")", i, st, err.msg, bad[i].word);
        cJSON_Delete(patch);
        cJSON_Delete(s);
    }

    /* source documents: a correct digest passes, DOCTYPE is refused, JSON must be an object */
    const char *xml = "<?xml version=\"1.0\"?><a>1</a>", *dt = "<?xml version=\"1.0\"?><!doctype a><a/>";
    char hx[65], hd[65], hj[65];
    ssb_sha256_hex(xml, strlen(xml), hx);
    ssb_sha256_hex(dt, strlen(dt), hd);
    ssb_sha256_hex("[1]", 3, hj);
    struct {
        const char *media, *content, *sha;
        int ok;
    } docs[] = {{"application/xml", xml, hx, 1}, {"application/xml", dt, hd, 0}, {"application/json", "[1]", hj, 0}};
    for (int i = 0; i < 3; i++) {
        cJSON *s = cJSON_Duplicate(sci, 1);
        cJSON *arr = cJSON_GetObjectItem(s, "source_documents");
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "filename", "doc");
        cJSON_AddStringToObject(d, "mediaType", docs[i].media);
        cJSON_AddStringToObject(d, "content", docs[i].content);
        cJSON_AddStringToObject(d, "sha256", docs[i].sha);
        cJSON_AddItemToArray(arr, d);
        assert_int_equal(qem_validate_scientific_metadata(s, NULL, shape, "uint16", &err) == SSB4D_OK, docs[i].ok);
        cJSON_Delete(s);
    }

    /* cross-checks with the private metadata */
    cJSON *hot = parse("{\"hot_pixel_correction\":{\"applied\":true}}");
    assert_int_equal(qem_validate_scientific_metadata(sci, hot, shape, "uint16", &err), SSB4D_EFORMAT);
    assert_true(contains(err.msg, "flagged_pixel_replacement"));
    cJSON_Delete(hot);
    cJSON *zero = parse("{\"flagged_markers_stored_as_zero\":1}");
    assert_int_equal(qem_validate_scientific_metadata(sci, zero, shape, "uint16", &err), SSB4D_EFORMAT);
    cJSON_Delete(zero);
    cJSON_Delete(sci);
}

static void strict_json(void **state)
{
    (void)state;
    static const char *bad[] = {
        "{\"a\":1,\"a\":2}", "{\"a\":{\"b\":1,\"c\":[{\"d\":1,\"d\":1}]}}", "{\"a\":NaN}", "{\"a\":-Infinity}",
        "{\"a\":1e400}", "{\"a\":01}", "{\"a\":1.}", "{\"a\":.5}", "{\"a\":\"x\\u0000y\"}", "{\"a\":1} x",
        "{\"a\":\"\x01\"}", "{\"a\":\"\xc3\x28\"}", "\xef\xbb\xbf{}", "{\"a\":1,}", "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char why[128] = "";
        cJSON *j = qem_json_parse_strict(bad[i], strlen(bad[i]), why, sizeof why);
        if (j)
            fail_msg("strict JSON accepted case %zu", i);
        assert_true(why[0] != '\0');
    }
    const char *good = "{\"b\":[1,-2.5e-3,true,null],\"a\":\"\xc3\xa9\\u00e9\\ud83d\\ude00\",\"c\":{}}";
    char why[128];
    cJSON *j = qem_json_parse_strict(good, strlen(good), why, sizeof why);
    assert_non_null(j);
    size_t n;
    char *text = qem_json_print_canonical(j, &n);
    assert_string_equal(text, "{\"a\":\"\\u00e9\\u00e9\\ud83d\\ude00\",\"b\":[1,-0.0025,true,null],\"c\":{}}");
    free(text);
    cJSON_Delete(j);
    cJSON *num = cJSON_CreateNumber(0.41000000000000003);
    text = qem_json_print_canonical(num, &n);
    assert_string_equal(text, "0.41000000000000003");
    free(text);
    cJSON_Delete(num);
    uint64_t v;
    cJSON *x = cJSON_CreateNumber(3.5);
    assert_false(qem_json_uint(x, 0, 10, &v));
    cJSON_SetNumberValue(x, 9007199254740994.0);
    assert_false(qem_json_uint(x, 0, 1e300, &v));
    cJSON_SetNumberValue(x, 7);
    assert_true(qem_json_uint(x, 0, 10, &v) && v == 7);
    cJSON_Delete(x);
}

/* A quick throughput line (not a benchmark): encode and decode of Poisson-like data. */
static void throughput_sanity(void **state)
{
    fixture *fx = *state;
    const size_t shape[4] = {32, 64, 48, 48};
    const size_t N = 2048, P = 2304;
    uint16_t *v = malloc(N * P * sizeof *v);
    uint64_t s = 5;
    for (size_t i = 0; i < N * P; i++) {
        uint64_t r = rng_next(&s);
        size_t k = i % P, dr = k / 48, dc = k % 48;
        int bf = (dr - 24.0) * (dr - 24.0) + (dc - 24.0) * (dc - 24.0) < 100;
        v[i] = (uint16_t)(bf ? r % 40 : (r % 50 == 0));
    }
    char path[512];
    snprintf(path, sizeof path, "%s/tp.qem", fx->dir);
    ssb4d_err err = {0};
    qem_writer_opts o = opts_for(shape, 2, 0);
    o.threads = 0;
    struct timespec t0, t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(write_array(path, &o, v, 512, &err), SSB4D_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    qem_file *f = NULL;
    assert_int_equal(qem_open(path, 1, 0, &f, &err), SSB4D_OK);
    uint16_t *out = malloc(N * P * sizeof *out);
    size_t lo[4] = {0, 0, 0, 0};
    assert_int_equal(qem_read_region(f, lo, shape, out, 0, &err), SSB4D_OK);
    clock_gettime(CLOCK_MONOTONIC, &t2);
    assert_memory_equal(out, v, N * P * sizeof *out);
    double mb = (double)(N * P * 2) / 1e6;
    double te = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    double td = (double)(t2.tv_sec - t1.tv_sec) + 1e-9 * (double)(t2.tv_nsec - t1.tv_nsec);
    printf("qem throughput: %.1f MB of uint16 counts, file %.1f MB; encode+write %.1f MB/s, open+decode %.1f MB/s\n",
           mb, (double)qem_get_info(f)->file_bytes / 1e6, mb / te, mb / td);
    qem_close(f);
    free(out);
    free(v);
    assert_int_equal(ref_dir_clear(fx->dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(strict_json),
        cmocka_unit_test(golden_decode),
        cmocka_unit_test(golden_bad_files),
        cmocka_unit_test(public_handle),
        cmocka_unit_test(writer_reproduces_golden_bodies),
        cmocka_unit_test(round_trip_random),
        cmocka_unit_test(writer_refusals_leave_nothing),
        cmocka_unit_test(body_over_64_mib),
        cmocka_unit_test(spatial_index_corruption_detected),
        cmocka_unit_test(truncation_always_refused),
        cmocka_unit_test(hostile_headers_refused),
        cmocka_unit_test(random_damage_never_crashes),
        cmocka_unit_test(metadata_builder_and_validator),
        cmocka_unit_test(throughput_sanity),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
