/* test_fs_dm.c — the Gatan DM3 / DM4 reader through the library (framesrc_open, framesrc_read,
 * framesrc_read_f32, framesrc_calibration_of, framesrc_source_metadata). A small tag-file writer
 * of its own (from the community description of the layout: big-endian header and structure
 * words, 4 bytes in DM3 and 8 in DM4 where each entry also carries its length, values in the
 * header's byte order) writes 4-D datasets after an RGBA thumbnail; the reader must give back
 * every value, the calibration and the tags, and refuse with SSB4D_EFORMAT every truncation of
 * the file and unsupported types, and survive every single-byte corruption of the tags (run
 * under ASan/UBSan in CI). tests/formats/test_dm.py checks the same through the CLI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/framesrc.h"
#include "ref_ssb.h"

static char g_dir[256];

/* ---------------------------------------------------------------------------------------- */
/* The writer                                                                                 */

typedef struct {
    uint8_t *p;
    size_t n, cap;
    int version, little, w;  /* w: bytes of a structure word */
    struct { size_t count_at, len_at, body; uint64_t count; } open[16];
    int depth;
    size_t data_value, datatype_value, dims_value[4]; /* where things went */
} dmw;

static void put(dmw *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_be(dmw *b, uint64_t v, int bytes)
{
    uint8_t t[8];
    for (int i = 0; i < bytes; i++)
        t[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
    put(b, t, (size_t)bytes);
}

static void patch_be(dmw *b, size_t at, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        b->p[at + (size_t)i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
}

/* A value in the file's byte order. */
static void put_val(dmw *b, uint64_t v, int bytes)
{
    uint8_t t[8];
    for (int i = 0; i < bytes; i++)
        t[b->little ? i : bytes - 1 - i] = (uint8_t)(v >> (8 * i));
    put(b, t, (size_t)bytes);
}

/* kind, name, (DM4) a length patched when the entry is complete: returns where it goes. */
static size_t entry(dmw *b, int kind, const char *name)
{
    b->open[b->depth].count++;
    uint8_t k = (uint8_t)kind;
    put(b, &k, 1);
    put_be(b, strlen(name), 2);
    put(b, name, strlen(name));
    size_t at = b->n;
    if (b->version == 4)
        put_be(b, 0, 8);
    return at;
}

static void group_open(dmw *b, const char *name)
{
    size_t len_at = name ? entry(b, 20, name) : 0;
    b->depth += name ? 1 : 0;
    b->open[b->depth].len_at = len_at;
    b->open[b->depth].body = b->n;
    put(b, "\x01\x00", 2);
    b->open[b->depth].count_at = b->n;
    b->open[b->depth].count = 0;
    put_be(b, 0, b->w);
}

static void group_close(dmw *b)
{
    patch_be(b, b->open[b->depth].count_at, b->open[b->depth].count, b->w);
    if (b->version == 4 && b->depth > 0)
        patch_be(b, b->open[b->depth].len_at, b->n - b->open[b->depth].body, 8);
    b->depth--;
}

/* A data tag: info words, then `nvals` values of `bytes` each (or raw bytes when vals NULL). */
static size_t data_tag(dmw *b, const char *name, const uint64_t *info, size_t ninfo,
                       const uint64_t *vals, size_t nvals, int bytes)
{
    size_t len_at = entry(b, 21, name), body = b->n;
    put(b, "%%%%", 4);
    put_be(b, ninfo, b->w);
    for (size_t i = 0; i < ninfo; i++)
        put_be(b, info[i], b->w);
    size_t at = b->n;
    for (size_t i = 0; i < nvals; i++)
        put_val(b, vals[i], bytes);
    if (b->version == 4)
        patch_be(b, len_at, b->n - body, 8);
    return at;
}

static size_t tag_u32(dmw *b, const char *name, uint32_t v)
{
    uint64_t info[1] = {5}, x = v;
    return data_tag(b, name, info, 1, &x, 1, 4);
}

static void tag_f32(dmw *b, const char *name, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    uint64_t info[1] = {6}, x = u;
    data_tag(b, name, info, 1, &x, 1, 4);
}

static void tag_f64(dmw *b, const char *name, double v)
{
    uint64_t info[1] = {7}, x;
    memcpy(&x, &v, 8);
    data_tag(b, name, info, 1, &x, 1, 8);
}

static void tag_text(dmw *b, const char *name, const char *s)
{
    uint64_t info[3] = {20, 4, strlen(s)}, v[64] = {0};
    assert_true(strlen(s) <= 64);
    for (size_t i = 0; s[i]; i++)
        v[i] = (unsigned char)s[i];
    data_tag(b, name, info, 3, v, strlen(s), 2);
}

static void calibration(dmw *b, float scale, const char *units)
{
    group_open(b, "");
    tag_f32(b, "Origin", 0.0f);
    tag_f32(b, "Scale", scale);
    tag_text(b, "Units", units);
    group_close(b);
}

typedef struct {
    int dm_type, elem, bytes; /* DataType, element type of Data, bytes per value */
    size_t sr, sc, dr, dc;
    int extra; /* tags of issue 39: 1 = Exposure Live Time = inf (and NaN, -inf);
                  2 = Meta Data/Signal EELS, Format Spectrum image */
} layout;

/* A file: thumbnail (8x8 RGBA), then the dataset with values v(p, k) for frame p pixel k. */
static void write_dm(dmw *b, int version, int little, const layout *L, uint64_t (*v)(size_t, size_t))
{
    memset(b, 0, sizeof *b);
    b->version = version;
    b->little = little;
    b->w = version == 3 ? 4 : 8;
    put_be(b, (uint64_t)version, 4);
    put_be(b, 0, b->w); /* root length, patched */
    put_be(b, little ? 1 : 0, 4);
    group_open(b, NULL);
    group_open(b, "ImageList");
    for (int img = 0; img < 2; img++) {
        group_open(b, "");
        group_open(b, "ImageData");
        group_open(b, "Calibrations");
        group_open(b, "Dimension");
        if (img == 0) {
            calibration(b, 1, "");
            calibration(b, 1, "");
        } else {
            calibration(b, 0.25f, "mrad");
            calibration(b, 0.5f, "mrad");
            calibration(b, 0.125f, "nm");
            calibration(b, 0.0625f, "nm");
        }
        group_close(b);
        group_close(b);
        size_t n = img == 0 ? 64 : L->sr * L->sc * L->dr * L->dc;
        uint64_t info[3] = {20, img == 0 ? 5u : (uint64_t)L->elem, n};
        uint64_t *vals = malloc(n * sizeof *vals);
        assert_non_null(vals);
        for (size_t i = 0; i < n; i++)
            vals[i] = img == 0 ? i * 0x01010101u : v(i / (L->dr * L->dc), i % (L->dr * L->dc));
        size_t at = data_tag(b, "Data", info, 3, vals, n, img == 0 ? 4 : L->bytes);
        free(vals);
        size_t dt = tag_u32(b, "DataType", img == 0 ? 23 : (uint32_t)L->dm_type);
        group_open(b, "Dimensions");
        size_t dims[4] = {L->dc, L->dr, L->sc, L->sr};
        for (int d = 0; d < (img == 0 ? 2 : 4); d++) {
            size_t at_d = tag_u32(b, "", img == 0 ? 8 : (uint32_t)dims[d]);
            if (img)
                b->dims_value[d] = at_d;
        }
        group_close(b);
        tag_u32(b, "PixelDepth", img == 0 ? 4 : (uint32_t)L->bytes);
        group_close(b); /* ImageData */
        group_open(b, "ImageTags");
        if (img) {
            group_open(b, "Microscope Info");
            tag_f64(b, "Voltage", 300000.0);
            tag_f32(b, "STEM Camera Length", 80.0f);
            tag_text(b, "Name", "scope");
            group_close(b);
            group_open(b, "DigiScan");
            tag_f64(b, "Sample Time", 4.0);
            group_close(b);
            tag_f32(b, "Convergence semi-angle (mrad)", 30.0f);
            if (L->extra == 1) {
                tag_f64(b, "Exposure Live Time", INFINITY);
                tag_f64(b, "Unset", NAN);
                tag_f32(b, "Dead", -INFINITY);
            } else if (L->extra == 2) {
                group_open(b, "Meta Data");
                tag_text(b, "Format", "Spectrum image");
                tag_text(b, "Signal", "EELS");
                group_close(b);
            }
            b->data_value = at;
            b->datatype_value = dt;
        }
        group_close(b);
        group_close(b); /* the entry */
    }
    group_close(b); /* ImageList */
    group_open(b, "Thumbnails");
    group_open(b, "");
    tag_u32(b, "ImageIndex", 0);
    group_close(b);
    group_close(b);
    group_close(b); /* root */
    size_t end = b->n;
    put(b, "\0\0\0\0\0\0\0\0", 8);
    patch_be(b, 4, end - (size_t)(8 + b->w) + 8, b->w);
}

static char *tpath(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static void save(const char *path, const uint8_t *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

static uint64_t val_u16(size_t p, size_t k) { return (p * 131 + k * 7) % 65536; }
static uint64_t val_u8(size_t p, size_t k) { return (p * 13 + k * 3) % 256; }
static uint64_t val_u32(size_t p, size_t k) { return 70000 + p * 1000 + k; }
static uint64_t val_i16(size_t p, size_t k) { return (p + k) % 300; }
static float fval(size_t p, size_t k) { return (float)p * 0.5f - (float)k * 0.25f; }
static uint64_t val_f32(size_t p, size_t k)
{
    float f = fval(p, k);
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---------------------------------------------------------------------------------------- */
/* Tests                                                                                      */

static void check_calibration(framesrc *s, const layout *L)
{
    framesrc_calibration c;
    framesrc_calibration_of(s, &c);
    assert_float_equal(c.kv, 300.0, 1e-9);
    assert_float_equal(c.scan_step_A[0], 0.625, 1e-9); /* Dimension 3 (rows), nm -> A */
    assert_float_equal(c.scan_step_A[1], 1.25, 1e-9);
    assert_float_equal(c.det_sampling_mrad[0], 0.5, 1e-9); /* Dimension 1 (rows) */
    assert_float_equal(c.det_sampling_mrad[1], 0.25, 1e-9);
    assert_float_equal(c.camera_length_mm, 80.0, 1e-9);
    assert_float_equal(c.dwell_us, 4.0, 1e-9);
    assert_float_equal(c.semiangle_mrad, 30.0, 1e-9);
    const cJSON *m = framesrc_source_metadata(s);
    const cJSON *vo = cJSON_GetObjectItemCaseSensitive(m, "ImageList/1/ImageTags/Microscope Info/Voltage");
    assert_true(cJSON_IsNumber(vo) && vo->valuedouble == 300000.0);
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(m, "ImageList/1/ImageTags/Microscope Info/Name");
    assert_true(cJSON_IsString(nm) && strcmp(nm->valuestring, "scope") == 0);
    const cJSON *d0 = cJSON_GetObjectItemCaseSensitive(m, "ImageList/1/ImageData/Dimensions/0");
    assert_true(cJSON_IsNumber(d0) && d0->valuedouble == (double)L->dc);
    assert_null(cJSON_GetObjectItemCaseSensitive(m, "ImageList/0/ImageData/DataType"));
}

static void dm_values(void **state)
{
    (void)state;
    static const struct {
        layout L;
        uint64_t (*v)(size_t, size_t);
    } cases[] = {
        {{10, 4, 2, 3, 4, 5, 6, 0}, val_u16}, {{6, 10, 1, 4, 2, 8, 8, 0}, val_u8},
        {{11, 5, 4, 3, 4, 5, 6, 0}, val_u32}, {{1, 2, 2, 4, 2, 8, 8, 0}, val_i16},
        {{2, 6, 4, 3, 4, 5, 6, 0}, val_f32},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int version = 3; version <= 4; version++)
            for (int little = 0; little <= 1; little++) {
                const layout *L = &cases[ci].L;
                dmw b;
                write_dm(&b, version, little, L, cases[ci].v);
                char name[64];
                snprintf(name, sizeof name, "v%zu_%d.dm%d", ci, little, version);
                save(tpath(name), b.p, b.n);
                framesrc *s = NULL;
                ssb4d_err err = {0};
                if (framesrc_open(tpath(name), NULL, &s, &err) != SSB4D_OK)
                    fail_msg("%s: %s", name, err.msg);
                size_t sh[4];
                framesrc_shape(s, sh);
                assert_int_equal(sh[0], L->sr);
                assert_int_equal(sh[1], L->sc);
                assert_int_equal(sh[2], L->dr);
                assert_int_equal(sh[3], L->dc);
                assert_string_equal(framesrc_format_name(s), "gatan-dm");
                assert_int_equal(framesrc_dtype_bytes(s), L->bytes);
                assert_int_equal(framesrc_dtype_signed(s), L->dm_type == 1);
                check_calibration(s, L);
                size_t N = sh[0] * sh[1], P = sh[2] * sh[3];
                float *f = malloc(N * P * sizeof *f);
                uint32_t *u = malloc(N * P * sizeof *u);
                assert_true(f && u);
                if (L->dm_type == 2) {
                    assert_true(framesrc_is_float(s));
                    assert_int_equal(framesrc_read(s, 0, N, u, &err), SSB4D_EFORMAT);
                } else {
                    for (size_t p = N; p-- > 0;) { /* backwards, one frame at a time */
                        assert_int_equal(framesrc_read(s, p, 1, u, &err), SSB4D_OK);
                        for (size_t k = 0; k < P; k++)
                            assert_int_equal(u[k], cases[ci].v(p, k));
                    }
                }
                assert_int_equal(framesrc_read_f32(s, 0, N, f, &err), SSB4D_OK);
                for (size_t p = 0; p < N; p++)
                    for (size_t k = 0; k < P; k++) {
                        float want = L->dm_type == 2 ? fval(p, k) : (float)cases[ci].v(p, k);
                        if (f[p * P + k] != want)
                            fail_msg("%s frame %zu pixel %zu: %g, %g expected", name, p, k,
                                     (double)f[p * P + k], (double)want);
                    }
                free(f);
                free(u);
                framesrc_close(s);
                free(b.p);
            }
}

/* Signed data: a negative count is refused at read, naming it. */
static uint64_t val_neg(size_t p, size_t k) { return p == 3 && k == 5 ? (uint64_t)(uint16_t)-2 : 1; }

static void dm_negative(void **state)
{
    (void)state;
    layout L = {1, 2, 2, 2, 3, 4, 4, 0};
    dmw b;
    write_dm(&b, 4, 1, &L, val_neg);
    save(tpath("neg.dm4"), b.p, b.n);
    framesrc *s = NULL;
    ssb4d_err err = {0};
    assert_int_equal(framesrc_open(tpath("neg.dm4"), NULL, &s, &err), SSB4D_OK);
    uint32_t u[6 * 16];
    assert_int_equal(framesrc_read(s, 0, 6, u, &err), SSB4D_EFORMAT);
    assert_non_null(strstr(err.msg, "negative"));
    framesrc_close(s);
    free(b.p);
}

static ssb4d_status open_status(const char *path, framesrc_format f, ssb4d_err *err)
{
    framesrc_opts o = {0};
    o.format = f;
    framesrc *s = NULL;
    ssb4d_status st = framesrc_open(path, &o, &s, err);
    if (st == SSB4D_OK) {
        /* every frame must then read, or be refused cleanly */
        size_t sh[4];
        framesrc_shape(s, sh);
        size_t n = sh[0] * sh[1] * sh[2] * sh[3];
        float *buf = malloc(n * sizeof *buf);
        assert_non_null(buf);
        ssb4d_err e2 = {0};
        ssb4d_status rs = framesrc_read_f32(s, 0, sh[0] * sh[1], buf, &e2);
        assert_true(rs == SSB4D_OK || rs == SSB4D_EFORMAT);
        free(buf);
        framesrc_close(s);
    } else {
        assert_null(s);
    }
    return st;
}

/* Every truncation of the tags and data: SSB4D_EFORMAT naming the file, with --format dm and
 * with detection by name. */
static void dm_truncated(void **state)
{
    (void)state;
    layout L = {10, 4, 2, 2, 3, 4, 5, 0};
    for (int version = 3; version <= 4; version++) {
        dmw b;
        write_dm(&b, version, 1, &L, val_u16);
        char name[32];
        snprintf(name, sizeof name, "cut.dm%d", version);
        const char *path = tpath(name);
        for (size_t cut = 0; cut + 8 < b.n; cut++) {
            save(path, b.p, cut);
            for (int f = 0; f < 2; f++) {
                ssb4d_err err = {0};
                ssb4d_status st = open_status(path, f ? FRAMESRC_DM : FRAMESRC_AUTO, &err);
                if (st != SSB4D_EFORMAT)
                    fail_msg("DM%d cut at %zu of %zu: status %d (%s)", version, cut, b.n, st, err.msg);
                assert_non_null(strstr(err.msg, path));
                assert_null(strchr(err.msg, '\n'));
            }
        }
        save(path, b.p, b.n - 8); /* without the trailing zeros the tree is whole */
        ssb4d_err err = {0};
        assert_int_equal(open_status(path, FRAMESRC_AUTO, &err), SSB4D_OK);
        free(b.p);
    }
}

/* Each byte of the structure changed: opened and read, or refused with a clear status. */
static void dm_corrupt_bytes(void **state)
{
    (void)state;
    layout L = {10, 4, 2, 2, 2, 3, 3, 0};
    for (int version = 3; version <= 4; version++) {
        dmw b;
        write_dm(&b, version, 1, &L, val_u16);
        const char *path = tpath(version == 3 ? "flip.dm3" : "flip.dm4");
        size_t refused = 0;
        for (size_t i = 0; i < b.n; i++) {
            if (i >= b.data_value && i < b.data_value + 2 * 36)
                continue; /* the counts themselves */
            static const uint8_t xors[] = {0xff, 0x01, 0x80};
            for (size_t x = 0; x < sizeof xors; x++) {
                b.p[i] ^= xors[x];
                save(path, b.p, b.n);
                ssb4d_err err = {0};
                ssb4d_status st = open_status(path, FRAMESRC_DM, &err);
                b.p[i] ^= xors[x];
                if (st) {
                    refused++;
                    if (st != SSB4D_EFORMAT && st != SSB4D_EINVAL)
                        fail_msg("DM%d byte %zu ^ %02x: status %d (%s)", version, i, xors[x], st, err.msg);
                    assert_non_null(strstr(err.msg, path));
                }
            }
        }
        assert_true(refused > b.n / 2); /* most structure bytes matter */
        free(b.p);
    }
}

static void dm_refused(void **state)
{
    (void)state;
    static const struct { int code; const char *name; } types[] = {
        {12, "(float64) is not supported"}, {3, "(complex64) is not supported"},
        {8, "(RGB) is not supported"},      {14, "(bool (binary)) is not supported"},
        {23, "(RGBA) is not supported"},    {13, "(complex128) is not supported"},
    };
    layout L = {10, 4, 2, 2, 3, 4, 5, 0};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        dmw b;
        write_dm(&b, 4, 1, &L, val_u16);
        b.p[b.datatype_value] = (uint8_t)types[t].code; /* little-endian uint32 */
        save(tpath("type.dm4"), b.p, b.n);
        ssb4d_err err = {0};
        assert_int_equal(open_status(tpath("type.dm4"), FRAMESRC_AUTO, &err), SSB4D_EFORMAT);
        if (!strstr(err.msg, types[t].name))
            fail_msg("type %d: %s", types[t].code, err.msg);
        free(b.p);
    }
    /* a dimension that disagrees with the data */
    dmw b;
    write_dm(&b, 3, 0, &L, val_u16);
    b.p[b.dims_value[1] + 3] = 9; /* big-endian uint32 det_row = 9 */
    save(tpath("dims.dm3"), b.p, b.n);
    ssb4d_err err = {0};
    assert_int_equal(open_status(tpath("dims.dm3"), FRAMESRC_AUTO, &err), SSB4D_EFORMAT);
    assert_non_null(strstr(err.msg, "holds 120 values, the dimensions 5x9x3x2 (fastest first) need 270"));
    free(b.p);
}

/* Issue 39: non-finite tag values are kept as text (the metadata is JSON); a spectrum image is
 * refused by name, with or without a scan shape. */
static void dm_issue39(void **state)
{
    (void)state;
    layout L = {10, 4, 2, 2, 3, 4, 5, 1};
    dmw b;
    write_dm(&b, 4, 1, &L, val_u16);
    save(tpath("inf.dm4"), b.p, b.n);
    free(b.p);
    framesrc *s = NULL;
    ssb4d_err err = {0};
    if (framesrc_open(tpath("inf.dm4"), NULL, &s, &err))
        fail_msg("inf tag: %s", err.msg);
    const cJSON *md = framesrc_source_metadata(s);
    static const char *const want[][2] = {{"Exposure Live Time", "inf"}, {"Unset", "nan"},
                                           {"Dead", "-inf"}};
    for (int i = 0; i < 3; i++) {
        char key[96];
        snprintf(key, sizeof key, "ImageList/1/ImageTags/%s", want[i][0]);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(md, key);
        if (!cJSON_IsString(v) || strcmp(v->valuestring, want[i][1]))
            fail_msg("%s is not the text %s", key, want[i][1]);
    }
    char *text = cJSON_PrintUnformatted(md); /* every number finite: JSON can hold it */
    assert_non_null(text);
    free(text);
    framesrc_close(s);
    L.extra = 2;
    write_dm(&b, 3, 0, &L, val_u16);
    save(tpath("si.dm3"), b.p, b.n);
    free(b.p);
    framesrc_opts o = {.shape = {3, 2, 0, 0}};
    for (int k = 0; k < 2; k++) {
        s = NULL;
        assert_int_equal(framesrc_open(tpath("si.dm3"), k ? &o : NULL, &s, &err), SSB4D_EFORMAT);
        assert_null(s);
        if (!strstr(err.msg, "is an EELS spectrum image") || !strstr(err.msg, "Format = Spectrum image"))
            fail_msg("spectrum image: %s", err.msg);
    }
}

static int setup(void **state)
{
    (void)state;
    return ref_tmpdir(g_dir, sizeof g_dir, "fs_dm");
}

static int teardown(void **state)
{
    (void)state;
    return ref_rmtree(g_dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(dm_values),    cmocka_unit_test(dm_negative),
        cmocka_unit_test(dm_truncated), cmocka_unit_test(dm_corrupt_bytes),
        cmocka_unit_test(dm_refused),   cmocka_unit_test(dm_issue39),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
