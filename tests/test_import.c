/* test_import.c — `ssb4d import` (ssb4d_import): foreign acquisitions streamed into .qem files.
 *
 * Every test writes a small acquisition of known counts into a temporary directory, imports it
 * and reads the .qem back with the internal reader (src/qem/qem.h), comparing exact values:
 *   - .npy uint16 / uint8 are stored bit-exactly in their own width; the report is right;
 *   - uint32 is narrowed to uint16 only when every valid value fits (recorded as a processing
 *     step), otherwise refused with the scan position and pixel, and nothing is left behind;
 *   - an existing output is refused (and untouched) unless force;
 *   - hot pixels: MEDIAN replaces them by the lower median of their valid 3x3 neighbours in every
 *     frame (computed independently here), ZERO by 0, NONE leaves them; metadata records it,
 *     and qem_get_flag_handling reads it back (nothing for a file from another writer);
 *   - raw big-endian input with a header offset;
 *   - user calibration overrides come back from qem_effective_calibration;
 *   - float and truncated .npy are refused without output;
 *   - G built from the .qem is bit-identical to G built from the .npy (golden and synthetic);
 *   - the progress callback is monotone and ends at exactly 1.0.
 * Runs under ASan/UBSan in CI; the data are a few hundred kB at most. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/npy.h"
#include "qem/qem.h"
#include "ref_ssb.h"
#include "source/source.h"
#include "ssb4d_advanced.h"

#define GOLDEN SSB4D_SHARED_DATA "/qem-golden/"

static char g_dir[256];

/* ---------------------------------------------------------------------------------------- */
/* Helpers                                                                                    */

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static char *tpath(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static size_t nvals(const size_t shape[4]) { return shape[0] * shape[1] * shape[2] * shape[3]; }

/* Writes values v (as uint32) into a .npy of the given descr ("|u1", "<u2", "<u4"). */
static void save_npy(const char *path, const char *descr, const size_t shape[4], const uint32_t *v)
{
    size_t n = nvals(shape);
    int bytes = descr[2] == '1' ? 1 : descr[2] == '2' ? 2 : 4;
    uint8_t *buf = malloc(n * (size_t)bytes);
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++) {
        if (bytes == 1) {
            assert_true(v[i] <= 255);
            buf[i] = (uint8_t)v[i];
        } else if (bytes == 2) {
            assert_true(v[i] <= 65535);
            uint16_t x = (uint16_t)v[i];
            memcpy(buf + 2 * i, &x, 2);
        } else {
            memcpy(buf + 4 * i, &v[i], 4);
        }
    }
    ssb4d_err err = {0};
    if (ssb_npy_save(path, descr, 4, shape, buf, &err) != SSB4D_OK)
        fail_msg("npy save %s: %s", path, err.msg);
    free(buf);
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static int file_exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static size_t file_size(const char *path)
{
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return (size_t)sb.st_size;
}

/* Entries of the temporary directory (names containing `needle`, or all when NULL). */
static size_t count_entries(const char *needle) { return ref_dir_count(g_dir, needle); }

/* Removes everything in the temporary directory (each test starts from an empty one). */
static void empty_dir(void) { assert_int_equal(ref_dir_clear(g_dir), 0); }

static ssb4d_import_params params_with(ssb4d_hot_policy hot)
{
    ssb4d_import_params p;
    ssb4d_import_params_default(&p);
    p.hot = hot;
    p.threads = 2;
    return p;
}

static void import_ok(const char *in, const char *out, const ssb4d_import_params *p,
                      ssb4d_import_report *rep)
{
    ssb4d_err err = {0};
    ssb4d_status st = ssb4d_import(in, out, p, rep, &err);
    if (st != SSB4D_OK)
        fail_msg("import %s -> %s: status %d: %s", in, out, (int)st, err.msg);
}

/* Import expected to fail: returns the status, message in err; the output must not exist and
 * no temporary file may be left next to it. */
static ssb4d_status import_fails(const char *in, const char *out, const ssb4d_import_params *p,
                                 ssb4d_err *err)
{
    size_t before = count_entries(NULL);
    memset(err, 0, sizeof *err);
    ssb4d_status st = ssb4d_import(in, out, p, NULL, err);
    if (st == SSB4D_OK)
        fail_msg("import %s -> %s succeeded, expected a refusal", in, out);
    assert_true(err->msg[0] != '\0');
    assert_null(strchr(err->msg, '\n'));
    assert_false(file_exists(out));
    assert_int_equal(count_entries(".tmp"), 0);
    assert_int_equal(count_entries(NULL), before);
    return st;
}

static qem_file *open_qem(const char *path)
{
    qem_file *f = NULL;
    ssb4d_err err = {0};
    if (qem_open(path, 1, 2, &f, &err) != SSB4D_OK)
        fail_msg("qem_open %s: %s", path, err.msg);
    return f;
}

/* All counts of a .qem (uint8 files widened), C order. */
static uint16_t *read_all_counts(const qem_file *f)
{
    const qem_info *in = qem_get_info(f);
    size_t n = nvals(in->shape);
    uint16_t *v = malloc(n * sizeof *v);
    assert_non_null(v);
    size_t lo[4] = {0, 0, 0, 0};
    ssb4d_err err = {0};
    if (qem_read_region(f, lo, in->shape, v, 2, &err) != SSB4D_OK)
        fail_msg("qem_read_region: %s", err.msg);
    return v;
}

/* Every stored count equals want[] (optionally skipping pixels where skip[k] != 0). */
static void check_counts(const qem_file *f, const uint32_t *want, const uint8_t *skip)
{
    const qem_info *in = qem_get_info(f);
    uint16_t *got = read_all_counts(f);
    size_t N = in->n_scans, P = in->n_pix;
    for (size_t t = 0; t < N; t++)
        for (size_t k = 0; k < P; k++)
            if ((!skip || !skip[k]) && got[t * P + k] != want[t * P + k])
                fail_msg("scan %zu pixel %zu: stored %u, expected %u", t, k, got[t * P + k],
                         want[t * P + k]);
    free(got);
}

static void check_shape(const qem_file *f, const size_t shape[4], int dtype_bytes)
{
    const qem_info *in = qem_get_info(f);
    for (int a = 0; a < 4; a++)
        assert_int_equal(in->shape[a], shape[a]);
    assert_int_equal(in->dtype_bytes, dtype_bytes);
    assert_int_equal(in->n_scans, shape[0] * shape[1]);
    assert_int_equal(in->n_pix, shape[2] * shape[3]);
}

static size_t n_invalid(const qem_file *f)
{
    const qem_info *in = qem_get_info(f);
    const uint8_t *valid = qem_valid_mask(f);
    size_t n = 0;
    for (size_t k = 0; k < in->n_pix; k++)
        n += !valid[k];
    return n;
}

static const cJSON *header_obj(const qem_file *f, const char *name)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(qem_header_json(f), name);
    assert_true(cJSON_IsObject(o));
    return o;
}

/* The processing record of scientific_metadata with this operation, or NULL. */
static const cJSON *processing_record(const qem_file *f, const char *op)
{
    const cJSON *proc = cJSON_GetObjectItemCaseSensitive(header_obj(f, "scientific_metadata"), "processing");
    assert_true(cJSON_IsArray(proc));
    const cJSON *r;
    cJSON_ArrayForEach(r, proc)
    {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(r, "operation");
        if (cJSON_IsString(o) && !strcmp(o->valuestring, op))
            return r;
    }
    return NULL;
}

static const cJSON *hot_record(const qem_file *f)
{
    const cJSON *hp = cJSON_GetObjectItemCaseSensitive(header_obj(f, "metadata"), "hot_pixel_correction");
    assert_true(cJSON_IsObject(hp));
    return hp;
}

static const char *json_str(const cJSON *o, const char *key)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, key);
    assert_true(cJSON_IsString(s));
    return s->valuestring;
}

static double json_num(const cJSON *o, const char *key)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, key);
    assert_true(cJSON_IsNumber(s));
    return s->valuedouble;
}

/* Counts with zeros, small values and values at the top of the range. */
static uint32_t *known_counts(const size_t shape[4], uint32_t maxv, uint64_t seed)
{
    size_t n = nvals(shape);
    uint32_t *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) {
        uint64_t h = mix(seed * 1000003 + i);
        switch (h % 8) {
        case 0: v[i] = 0; break;
        case 1: v[i] = maxv - (uint32_t)((h >> 8) % 3); break;
        case 2: v[i] = (uint32_t)((h >> 8) % ((uint64_t)maxv + 1)); break;
        default: v[i] = (uint32_t)((h >> 8) % 50); break;
        }
    }
    return v;
}

/* ---------------------------------------------------------------------------------------- */
/* 1. .npy uint16, exact                                                                      */

static void npy_u16_exact(void **state)
{
    (void)state;
    empty_dir();
    /* 600 scans: two 512-scan blocks in one chunk. */
    size_t shape[4] = {24, 25, 6, 5};
    uint32_t *v = known_counts(shape, 65535, 1);
    save_npy(tpath("a.npy"), "<u2", shape, v);
    ssb4d_import_params p = params_with(SSB4D_HOT_NONE);
    ssb4d_import_report rep;
    memset(&rep, 0xA5, sizeof rep);
    import_ok(tpath("a.npy"), tpath("a.qem"), &p, &rep);

    for (int a = 0; a < 4; a++)
        assert_int_equal(rep.shape[a], shape[a]);
    assert_int_equal(rep.source_dtype_bytes, 2);
    assert_int_equal(rep.stored_dtype_bytes, 2);
    assert_string_equal(rep.source_format, "numpy");
    assert_int_equal(rep.flagged_file, 0);
    assert_int_equal(rep.flagged_found, 0);
    assert_int_equal(rep.input_bytes, nvals(shape) * 2);
    assert_int_equal(rep.encoded_bytes, file_size(tpath("a.qem")));
    assert_true(rep.seconds >= 0 && rep.seconds < 60);

    qem_file *f = open_qem(tpath("a.qem"));
    check_shape(f, shape, 2);
    assert_int_equal(qem_get_info(f)->file_bytes, rep.encoded_bytes);
    assert_int_equal(n_invalid(f), 0);
    check_counts(f, v, NULL);
    /* nothing narrowed, nothing replaced */
    assert_null(processing_record(f, "exact_integer_narrowing"));
    assert_null(processing_record(f, "flagged_pixel_replacement"));
    const cJSON *hp = hot_record(f);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(hp, "applied")));
    assert_string_equal(json_str(hp, "policy"), "none");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(hp, "pixels")), 0);
    /* a .npy records no microscope: the effective calibration is unknown */
    qem_calibration cal;
    qem_effective_calibration(f, &cal);
    assert_true(isnan(cal.kv) && isnan(cal.semiangle_mrad));
    assert_true(isnan(cal.scan_step_A[0]) && isnan(cal.scan_step_A[1]));
    qem_close(f);
    /* only the input and the output are in the directory */
    assert_int_equal(count_entries(NULL), 2);
    free(v);
}

/* ---------------------------------------------------------------------------------------- */
/* 2. .npy uint8 stays uint8                                                                  */

static void npy_u8_exact(void **state)
{
    (void)state;
    empty_dir();
    size_t shape[4] = {7, 6, 5, 8};
    uint32_t *v = known_counts(shape, 255, 2);
    save_npy(tpath("b.npy"), "|u1", shape, v);
    ssb4d_import_params p = params_with(SSB4D_HOT_NONE);
    ssb4d_import_report rep;
    import_ok(tpath("b.npy"), tpath("b.qem"), &p, &rep);
    assert_int_equal(rep.source_dtype_bytes, 1);
    assert_int_equal(rep.stored_dtype_bytes, 1);
    assert_int_equal(rep.input_bytes, nvals(shape));
    assert_int_equal(rep.encoded_bytes, file_size(tpath("b.qem")));
    qem_file *f = open_qem(tpath("b.qem"));
    check_shape(f, shape, 1);
    check_counts(f, v, NULL);
    assert_null(processing_record(f, "exact_integer_narrowing"));
    qem_close(f);
    free(v);
}

/* ---------------------------------------------------------------------------------------- */
/* 3. uint32: exact narrowing, or refusal                                                     */

static void npy_u32_narrowing(void **state)
{
    (void)state;
    empty_dir();
    size_t shape[4] = {5, 6, 4, 7};
    uint32_t *v = known_counts(shape, 65535, 3);
    save_npy(tpath("c.npy"), "<u4", shape, v);
    ssb4d_import_params p = params_with(SSB4D_HOT_NONE);
    ssb4d_import_report rep;
    import_ok(tpath("c.npy"), tpath("c.qem"), &p, &rep);
    assert_int_equal(rep.source_dtype_bytes, 4);
    assert_int_equal(rep.stored_dtype_bytes, 2);
    assert_int_equal(rep.input_bytes, nvals(shape) * 4);
    qem_file *f = open_qem(tpath("c.qem"));
    check_shape(f, shape, 2);
    check_counts(f, v, NULL);
    const cJSON *r = processing_record(f, "exact_integer_narrowing");
    assert_non_null(r);
    assert_string_equal(json_str(r, "source_dtype"), "uint32");
    assert_string_equal(json_str(r, "stored_dtype"), "uint16");
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(r, "changes_measurements")));
    assert_string_equal(json_str(header_obj(f, "metadata"), "source_dtype"), "uint32");
    qem_close(f);

    /* One count of 70000 at scan (2, 3), detector pixel (1, 4) of a valid pixel: refused. */
    size_t P = shape[2] * shape[3], t = 2 * shape[1] + 3, k = 1 * shape[3] + 4;
    v[t * P + k] = 70000;
    save_npy(tpath("d.npy"), "<u4", shape, v);
    ssb4d_err err;
    assert_int_equal(import_fails(tpath("d.npy"), tpath("d.qem"), &p, &err), SSB4D_EFORMAT);
    if (!strstr(err.msg, "70000") || !strstr(err.msg, "scan position (2, 3)") ||
        !strstr(err.msg, "pixel (1, 4)"))
        fail_msg("message does not name the value, scan position and pixel: %s", err.msg);

    /* The same under MEDIAN when the pixel is not hot (every count is large, so one 70000 does
     * not lift its total above the hot rule): it stays valid, so it is still refused. */
    for (size_t i = 0; i < nvals(shape); i++)
        v[i] = 50000 + (uint32_t)(mix(i) % 15000);
    v[t * P + k] = 70000;
    save_npy(tpath("e.npy"), "<u4", shape, v);
    p = params_with(SSB4D_HOT_MEDIAN);
    assert_int_equal(import_fails(tpath("e.npy"), tpath("e.qem"), &p, &err), SSB4D_EFORMAT);
    assert_non_null(strstr(err.msg, "scan position (2, 3)"));
    free(v);
}

/* ---------------------------------------------------------------------------------------- */
/* 4. existing output                                                                         */

static void existing_output(void **state)
{
    (void)state;
    empty_dir();
    size_t shape[4] = {4, 5, 3, 4};
    uint32_t *v = known_counts(shape, 65535, 4);
    save_npy(tpath("a.npy"), "<u2", shape, v);
    static const char old[] = "old contents, not a .qem";
    write_file(tpath("a.qem"), old, sizeof old);
    ssb4d_import_params p = params_with(SSB4D_HOT_NONE);
    ssb4d_err err = {0};
    ssb4d_status st = ssb4d_import(tpath("a.npy"), tpath("a.qem"), &p, NULL, &err);
    assert_int_not_equal(st, SSB4D_OK);
    if (!strstr(err.msg, "exists"))
        fail_msg("refusal does not say the output exists: %s", err.msg);
    /* untouched, and nothing else left */
    assert_int_equal(file_size(tpath("a.qem")), sizeof old);
    FILE *fp = fopen(tpath("a.qem"), "rb");
    char buf[sizeof old];
    assert_int_equal(fread(buf, 1, sizeof buf, fp), sizeof buf);
    fclose(fp);
    assert_memory_equal(buf, old, sizeof old);
    assert_int_equal(count_entries(NULL), 2);

    p.force = 1;
    ssb4d_import_report rep;
    import_ok(tpath("a.npy"), tpath("a.qem"), &p, &rep);
    assert_int_equal(rep.encoded_bytes, file_size(tpath("a.qem")));
    qem_file *f = open_qem(tpath("a.qem"));
    check_shape(f, shape, 2);
    check_counts(f, v, NULL);
    qem_close(f);
    assert_int_equal(count_entries(NULL), 2);
    free(v);
}

/* ---------------------------------------------------------------------------------------- */
/* 5. hot pixels                                                                              */

/* Detector 8x9; four hot pixels: interior (8 valid neighbours: an even count), a corner (3),
 * and a vertical pair on the bottom rim, (6,7) with 7 valid neighbours, (7,7) with 4. */
#define HOT_R 8
#define HOT_C 9
static const size_t hot_pix[] = {0 * HOT_C + 0, 3 * HOT_C + 4, 6 * HOT_C + 7, 7 * HOT_C + 7};
#define N_HOT 4

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Lower median of the non-hot 3x3 neighbours of pixel k in one frame (independent of the
 * library: qsort of an explicit list). */
static uint32_t expected_median(const uint32_t *frame, const uint8_t *is_hot, size_t k, int *count)
{
    uint32_t v[8];
    int m = 0;
    long r = (long)(k / HOT_C), c = (long)(k % HOT_C);
    for (long rr = r - 1; rr <= r + 1; rr++)
        for (long cc = c - 1; cc <= c + 1; cc++) {
            if ((rr == r && cc == c) || rr < 0 || cc < 0 || rr >= HOT_R || cc >= HOT_C)
                continue;
            size_t q = (size_t)(rr * HOT_C + cc);
            if (!is_hot[q])
                v[m++] = frame[q];
        }
    qsort(v, (size_t)m, sizeof v[0], cmp_u32);
    *count = m;
    return m ? v[(m - 1) / 2] : 0;
}

static void hot_pixels(void **state)
{
    (void)state;
    empty_dir();
    size_t shape[4] = {6, 5, HOT_R, HOT_C}, N = 30, P = HOT_R * HOT_C;
    uint32_t *v = malloc(N * P * sizeof *v);
    uint8_t is_hot[HOT_R * HOT_C] = {0};
    for (int i = 0; i < N_HOT; i++)
        is_hot[hot_pix[i]] = 1;
    for (size_t t = 0; t < N; t++)
        for (size_t k = 0; k < P; k++) {
            uint32_t base = 20 + (uint32_t)(mix(t * P + k) % 21); /* 20..40 */
            v[t * P + k] = is_hot[k] ? 100 * base : base;
        }
    save_npy(tpath("h.npy"), "<u2", shape, v);

    /* the neighbour counts the test relies on */
    int counts[N_HOT];
    for (int i = 0; i < N_HOT; i++)
        (void)expected_median(v, is_hot, hot_pix[i], &counts[i]);
    assert_int_equal(counts[0], 3);
    assert_int_equal(counts[1], 8);
    assert_int_equal(counts[2], 7);
    assert_int_equal(counts[3], 4);

    for (int policy = 0; policy < 3; policy++) {
        ssb4d_hot_policy hot = policy == 0 ? SSB4D_HOT_MEDIAN : policy == 1 ? SSB4D_HOT_ZERO : SSB4D_HOT_NONE;
        const char *name = policy == 0 ? "median" : policy == 1 ? "zero" : "none";
        char out[32];
        snprintf(out, sizeof out, "h-%s.qem", name);
        ssb4d_import_params p = params_with(hot);
        ssb4d_import_report rep;
        import_ok(tpath("h.npy"), tpath(out), &p, &rep);
        qem_file *f = open_qem(tpath(out));
        check_shape(f, shape, 2);
        const uint8_t *valid = qem_valid_mask(f);
        const cJSON *hp = hot_record(f);
        assert_string_equal(json_str(hp, "policy"), name);
        assert_int_equal(rep.flagged_file, 0);
        /* what info and verify read back: the policy, the flagged counts, the replacement */
        qem_flag_handling fh;
        qem_get_flag_handling(f, &fh);
        assert_non_null(fh.policy);
        assert_string_equal(fh.policy, name);
        assert_true(fh.flagged_recorded);
        assert_int_equal(fh.flagged_by_file, 0);
        assert_int_equal(fh.flagged_by_totals, hot == SSB4D_HOT_NONE ? 0 : N_HOT);
        assert_int_equal(fh.replaced, hot != SSB4D_HOT_NONE);
        assert_int_equal(fh.replaced_pixels, hot == SSB4D_HOT_NONE ? 0 : N_HOT);
        if (hot == SSB4D_HOT_NONE)
            assert_null(fh.method);
        else
            assert_string_equal(fh.method, hot == SSB4D_HOT_MEDIAN ? "median_3x3_valid_neighbours" : "zero");
        assert_int_equal(fh.markers_zeroed, 0);
        if (hot == SSB4D_HOT_NONE) {
            assert_int_equal(rep.flagged_found, 0);
            assert_int_equal(n_invalid(f), 0);
            check_counts(f, v, NULL); /* the hot values too */
            assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(hp, "applied")));
            assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(hp, "pixels")), 0);
            assert_null(processing_record(f, "flagged_pixel_replacement"));
            qem_close(f);
            continue;
        }
        /* exactly the four pixels flagged, everything else exact */
        assert_int_equal(rep.flagged_found, N_HOT);
        assert_int_equal(n_invalid(f), N_HOT);
        for (int i = 0; i < N_HOT; i++)
            assert_int_equal(valid[hot_pix[i]], 0);
        check_counts(f, v, is_hot);
        uint16_t *got = read_all_counts(f);
        for (size_t t = 0; t < N; t++)
            for (int i = 0; i < N_HOT; i++) {
                int m;
                uint32_t want = hot == SSB4D_HOT_MEDIAN ? expected_median(v + t * P, is_hot, hot_pix[i], &m) : 0;
                if (got[t * P + hot_pix[i]] != want)
                    fail_msg("%s: scan %zu hot pixel %zu: stored %u, expected %u", name, t, hot_pix[i],
                             got[t * P + hot_pix[i]], want);
            }
        free(got);
        /* metadata: applied, policy, the pixels (row, col) in ascending order */
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(hp, "applied")));
        assert_true(json_num(hp, "flagged_by_totals") == N_HOT);
        assert_true(json_num(hp, "flagged_by_file") == 0);
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(hp, "pixels");
        assert_int_equal(cJSON_GetArraySize(list), N_HOT);
        for (int i = 0; i < N_HOT; i++) {
            const cJSON *rc = cJSON_GetArrayItem(list, i);
            assert_int_equal(cJSON_GetArraySize(rc), 2);
            assert_true(cJSON_GetArrayItem(rc, 0)->valuedouble == (double)(hot_pix[i] / HOT_C));
            assert_true(cJSON_GetArrayItem(rc, 1)->valuedouble == (double)(hot_pix[i] % HOT_C));
        }
        const cJSON *r = processing_record(f, "flagged_pixel_replacement");
        assert_non_null(r);
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "changes_measurements")));
        assert_string_equal(json_str(r, "method"), hot == SSB4D_HOT_MEDIAN ? "median_3x3_valid_neighbours" : "zero");
        assert_true(json_num(r, "pixel_count") == N_HOT);
        qem_close(f);
    }
    free(v);

    /* A file from another writer (the reference, with a mask) records no import step: no
     * policy, no replacement, although pixels are flagged. */
    qem_file *g = open_qem(GOLDEN "u16-masked-20x30x33x17.qem");
    qem_flag_handling fh;
    memset(&fh, 0xA5, sizeof fh);
    qem_get_flag_handling(g, &fh);
    assert_true(n_invalid(g) > 0);
    assert_null(fh.policy);
    assert_false(fh.flagged_recorded);
    assert_false(fh.replaced);
    assert_null(fh.method);
    assert_int_equal(fh.replaced_pixels, 0);
    assert_int_equal(fh.markers_zeroed, 0);
    qem_close(g);
}

/* ---------------------------------------------------------------------------------------- */
/* 6. raw binary, big-endian, with a header                                                  */

static void raw_big_endian(void **state)
{
    (void)state;
    empty_dir();
    size_t shape[4] = {4, 6, 5, 3}, n = nvals(shape), off = 100;
    uint32_t *v = known_counts(shape, 65535, 6);
    uint8_t *buf = malloc(off + 2 * n);
    memset(buf, 0xAB, off); /* junk header: would be read as counts if the offset were ignored */
    for (size_t i = 0; i < n; i++) {
        buf[off + 2 * i] = (uint8_t)(v[i] >> 8);
        buf[off + 2 * i + 1] = (uint8_t)v[i];
    }
    write_file(tpath("a.raw"), buf, off + 2 * n);
    ssb4d_import_params p = params_with(SSB4D_HOT_NONE);
    p.format = "raw";
    memcpy(p.shape, shape, sizeof p.shape);
    p.dtype_bytes = 2;
    p.big_endian = 1;
    p.offset = off;
    ssb4d_import_report rep;
    import_ok(tpath("a.raw"), tpath("a.qem"), &p, &rep);
    assert_string_equal(rep.source_format, "raw");
    assert_int_equal(rep.input_bytes, 2 * n);
    qem_file *f = open_qem(tpath("a.qem"));
    check_shape(f, shape, 2);
    check_counts(f, v, NULL);
    qem_close(f);

    /* read as little-endian, the same bytes are the byte-swapped counts (the flag is used) */
    p.big_endian = 0;
    import_ok(tpath("a.raw"), tpath("b.qem"), &p, &rep);
    for (size_t i = 0; i < n; i++)
        v[i] = ((v[i] & 0xFF) << 8) | (v[i] >> 8);
    f = open_qem(tpath("b.qem"));
    check_counts(f, v, NULL);
    qem_close(f);
    free(buf);
    free(v);
}

/* ---------------------------------------------------------------------------------------- */
/* 7. calibration overrides                                                                   */

static void user_overrides(void **state)
{
    (void)state;
    empty_dir();
    size_t shape[4] = {3, 4, 5, 5};
    uint32_t *v = known_counts(shape, 65535, 7);
    save_npy(tpath("a.npy"), "<u2", shape, v);
    ssb4d_import_params p = params_with(SSB4D_HOT_NONE);
    p.kv = 300;
    p.semiangle_mrad = 21.5;
    p.scan_step_A[0] = 0.41;
    p.scan_step_A[1] = 0.43;
    p.det_sampling_mrad[0] = 1.1;
    p.det_sampling_mrad[1] = 1.3;
    import_ok(tpath("a.npy"), tpath("a.qem"), &p, NULL);
    qem_file *f = open_qem(tpath("a.qem"));
    qem_calibration cal;
    qem_effective_calibration(f, &cal);
    assert_true(cal.kv == 300);
    assert_true(cal.semiangle_mrad == 21.5);
    assert_true(cal.scan_step_A[0] == 0.41 && cal.scan_step_A[1] == 0.43);
    assert_true(cal.det_sampling[0] == 1.1 && cal.det_sampling[1] == 1.3);
    assert_int_equal(cal.det_sampling_inverse_A, 0);
    /* recorded as user overrides, with their provenance */
    const cJSON *ov = cJSON_GetObjectItemCaseSensitive(header_obj(f, "scientific_metadata"),
                                                       "calibration_overrides");
    assert_true(cJSON_IsObject(ov));
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(ov, "electron_source/accelerating_voltage");
    assert_true(cJSON_IsObject(kv));
    assert_true(json_num(kv, "value") == 300);
    assert_string_equal(json_str(kv, "unit"), "kV");
    assert_string_equal(json_str(kv, "provenance"), "user_override");
    check_counts(f, v, NULL);
    qem_close(f);
    free(v);
}

/* ---------------------------------------------------------------------------------------- */
/* 8. refused inputs                                                                          */

static void refused_inputs(void **state)
{
    (void)state;
    empty_dir();
    size_t shape[4] = {3, 3, 4, 4}, n = nvals(shape);
    float *fl = malloc(n * sizeof *fl);
    for (size_t i = 0; i < n; i++)
        fl[i] = (float)(i % 17);
    ssb4d_err err = {0};
    assert_int_equal(ssb_npy_save(tpath("f.npy"), "<f4", 4, shape, fl, &err), SSB4D_OK);
    free(fl);
    ssb4d_import_params p = params_with(SSB4D_HOT_MEDIAN);
    assert_int_equal(import_fails(tpath("f.npy"), tpath("f.qem"), &p, &err), SSB4D_EFORMAT);
    if (!strstr(err.msg, "float"))
        fail_msg("float refusal does not say why: %s", err.msg);

    /* a uint16 .npy cut 10 bytes short */
    uint32_t *v = known_counts(shape, 65535, 8);
    save_npy(tpath("t.npy"), "<u2", shape, v);
    size_t full = file_size(tpath("t.npy"));
    assert_int_equal(truncate(tpath("t.npy"), (off_t)(full - 10)), 0);
    assert_int_equal(import_fails(tpath("t.npy"), tpath("t.qem"), &p, &err), SSB4D_EFORMAT);
    if (!strstr(err.msg, "truncated"))
        fail_msg("truncation refusal does not say why: %s", err.msg);
    p.hot = SSB4D_HOT_NONE;
    assert_int_not_equal(import_fails(tpath("t.npy"), tpath("t.qem"), &p, &err), SSB4D_OK);
    /* a missing input */
    assert_int_not_equal(import_fails(tpath("missing.npy"), tpath("m.qem"), &p, &err), SSB4D_OK);
    free(v);
}

/* ---------------------------------------------------------------------------------------- */
/* 9. G from the encoded data equals G from the dense data, bit for bit                      */

static ssb4d_source *open_source(const char *path)
{
    ssb4d_source *s = NULL;
    ssb4d_err err = {0};
    if (ssb4d_source_open(path, &s, &err) != SSB4D_OK)
        fail_msg("ssb4d_source_open %s: %s", path, err.msg);
    return s;
}

static ssb4d_G *build_G(ssb4d_source *s, const ssb4d_geometry *g, const int32_t *bf, size_t nbf,
                        size_t block_bytes, ssb4d_mem *mem)
{
    ssb4d_gbuild_opts o;
    ssb4d_gbuild_opts_default(&o);
    o.threads = 2;
    o.store_inactive = 1; /* every selected pixel gets a plane: compare all of them */
    o.block_bytes = block_bytes;
    ssb4d_G *G = NULL;
    ssb4d_err err = {0};
    if (ssb4d_gbuild(s, g, bf, nbf, &o, mem, &G, &err) != SSB4D_OK)
        fail_msg("gbuild: %s", err.msg);
    return G;
}

static void same_G(const ssb4d_G *a, const ssb4d_G *b)
{
    assert_int_equal(ssb4d_G_n_bf(a), ssb4d_G_n_bf(b));
    assert_int_equal(ssb4d_G_n_stored(a), ssb4d_G_n_stored(b));
    assert_int_equal(ssb4d_G_bytes(a), ssb4d_G_bytes(b));
    size_t ny, nx, ny2, nx2;
    ssb4d_G_scan_shape(a, &ny, &nx);
    ssb4d_G_scan_shape(b, &ny2, &nx2);
    assert_int_equal(ny, ny2);
    assert_int_equal(nx, nx2);
    double da = ssb4d_G_dc(a), db = ssb4d_G_dc(b);
    assert_memory_equal(&da, &db, sizeof da);
    size_t plane = ny * (nx / 2 + 1) * 2 * sizeof(float);
    for (size_t i = 0; i < ssb4d_G_n_bf(a); i++) {
        const float *pa = ssb4d_G_plane(a, i), *pb = ssb4d_G_plane(b, i);
        assert_non_null(pa);
        assert_non_null(pb);
        if (memcmp(pa, pb, plane) != 0)
            fail_msg("G plane %zu differs between the dense and the encoded source", i);
    }
    /* not trivially equal: the mean intensity is positive and some plane has signal off DC */
    assert_true(da > 0);
    double off_dc = 0;
    for (size_t i = 0; i < ssb4d_G_n_bf(a); i++)
        for (size_t j = 2; j < plane / sizeof(float); j++)
            off_dc += fabs((double)ssb4d_G_plane(a, i)[j]);
    assert_true(off_dc > 0);
    char ha[65], hb[65];
    ssb4d_G_sha256(a, ha);
    ssb4d_G_sha256(b, hb);
    assert_string_equal(ha, hb);
}

/* Same shape, dtype and frames (hence per-pixel totals and mean pattern) from both sources. */
static void same_frames(ssb4d_source *a, ssb4d_source *b)
{
    size_t sa[4], sb[4];
    ssb4d_source_shape(a, sa);
    ssb4d_source_shape(b, sb);
    assert_memory_equal(sa, sb, sizeof sa);
    assert_int_equal(ssb4d_source_dtype(a), ssb4d_source_dtype(b));
    size_t N = sa[0] * sa[1], P = sa[2] * sa[3];
    uint32_t *fa = malloc(N * P * sizeof *fa), *fb = malloc(N * P * sizeof *fb);
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_source_read_frames(a, 0, N, fa, &err), SSB4D_OK);
    assert_int_equal(ssb4d_source_read_frames(b, 0, N, fb, &err), SSB4D_OK);
    assert_memory_equal(fa, fb, N * P * sizeof *fa);
    /* an unaligned piece as well */
    size_t p0 = N / 3, np = N / 2;
    assert_int_equal(ssb4d_source_read_frames(b, p0, np, fb, &err), SSB4D_OK);
    assert_memory_equal(fa + p0 * P, fb, np * P * sizeof *fa);
    free(fa);
    free(fb);
}

/* BF pixels within radius of the centre, ascending. */
static size_t select_bf(const size_t shape[4], const double centre[2], double radius, int32_t *bf)
{
    size_t n = 0;
    for (size_t r = 0; r < shape[2]; r++)
        for (size_t c = 0; c < shape[3]; c++) {
            double dr = (double)r - centre[0], dc = (double)c - centre[1];
            if (dr * dr + dc * dc <= radius * radius)
                bf[n++] = (int32_t)(r * shape[3] + c);
        }
    return n;
}

static void compare_G_of(const char *dense, const char *encoded, const ssb4d_geometry *g,
                         double radius, size_t rows_per_block)
{
    ssb4d_source *a = open_source(dense), *b = open_source(encoded);
    assert_null(ssb_source_qem(a));
    assert_non_null(ssb_source_qem(b));
    same_frames(a, b);
    size_t shape[4];
    ssb4d_source_shape(a, shape);
    int32_t *bf = malloc(shape[2] * shape[3] * sizeof *bf);
    size_t nbf = select_bf(shape, g->centre_px, radius, bf);
    assert_true(nbf > 10);
    size_t block_bytes = rows_per_block ? rows_per_block * nbf * shape[1] * sizeof(float) : 0;
    ssb4d_mem *mem = ssb4d_mem_create(0);
    ssb4d_G *Ga = build_G(a, g, bf, nbf, block_bytes, mem), *Gb = build_G(b, g, bf, nbf, block_bytes, mem);
    same_G(Ga, Gb);
    ssb4d_G_free(Ga);
    ssb4d_G_free(Gb);
    ssb4d_mem_destroy(mem);
    free(bf);
    ssb4d_source_close(a);
    ssb4d_source_close(b);
}

static void G_sha_of(const char *path, const ssb4d_geometry *g, double radius, char hex[65])
{
    ssb4d_source *s = open_source(path);
    size_t shape[4];
    ssb4d_source_shape(s, shape);
    int32_t *bf = malloc(shape[2] * shape[3] * sizeof *bf);
    size_t nbf = select_bf(shape, g->centre_px, radius, bf);
    ssb4d_mem *mem = ssb4d_mem_create(0);
    ssb4d_G *G = build_G(s, g, bf, nbf, 0, mem);
    ssb4d_G_sha256(G, hex);
    ssb4d_G_free(G);
    ssb4d_mem_destroy(mem);
    free(bf);
    ssb4d_source_close(s);
}

static void g_build_identical(void **state)
{
    (void)state;
    empty_dir();
    /* (a) The golden u8 pair (no flagged pixels; the golden u16-masked pair has 36 flagged
     * pixels whose stored values are not the .npy's, so it is not used here), and the same
     * .npy imported here: dense .npy vs golden .qem vs our .qem. Geometry from the golden
     * README values; centre mid-detector. */
    ssb4d_geometry g = {.kv = 200, .semiangle_mrad = 21, .scan_step_A = {0.36, 0.37},
                        .det_sampling_mrad = {1.95, 1.96}, .centre_px = {5.5, 5.5}, .rotation_deg = 0};
    const char *u8npy = GOLDEN "u8-poisson-16x16x12x12.npy";
    compare_G_of(u8npy, GOLDEN "u8-poisson-16x16x12x12.qem", &g, 4.0, 0);
    ssb4d_import_params p = params_with(SSB4D_HOT_NONE);
    import_ok(u8npy, tpath("u8.qem"), &p, NULL);
    compare_G_of(u8npy, tpath("u8.qem"), &g, 4.0, 5);

    /* (b) Synthetic uint16: 20x30 scan (600 scans: the .qem block boundary at scan 512 falls
     * inside scan row 17), 16x16 detector, Poisson-like counts with a bright disk (contrast 3,
     * so no hot pixel is found and MEDIAN changes nothing), a 7-row G-build block so that
     * G-build blocks and .qem blocks straddle each other. */
    size_t shape[4] = {20, 30, 16, 16}, N = 600, P = 256;
    uint32_t *v = malloc(N * P * sizeof *v);
    for (size_t t = 0; t < N; t++)
        for (size_t k = 0; k < P; k++) {
            double dr = (double)(k / 16) - 7.5, dc = (double)(k % 16) - 7.5;
            double lam = dr * dr + dc * dc <= 25 ? 60 + 20 * sin(0.3 * (double)t + 0.5 * dc) : 20;
            uint64_t h = mix(t * P + k);
            /* sum of 4 uniforms: roughly normal, std ~ sqrt(lam) */
            double u = 0;
            for (int j = 0; j < 4; j++)
                u += (double)((h >> (16 * j)) & 0xFFFF) / 65535.0 - 0.5;
            double x = lam + u * sqrt(3.0 * lam);
            v[t * P + k] = x < 0 ? 0 : (uint32_t)llround(x);
        }
    save_npy(tpath("s.npy"), "<u2", shape, v);
    p = params_with(SSB4D_HOT_MEDIAN);
    ssb4d_import_report rep;
    import_ok(tpath("s.npy"), tpath("s.qem"), &p, &rep);
    assert_int_equal(rep.flagged_found, 0);
    qem_file *f = open_qem(tpath("s.qem"));
    assert_int_equal(n_invalid(f), 0);
    assert_int_equal(qem_get_info(f)->n_blocks, 2);
    check_counts(f, v, NULL);
    qem_close(f);
    ssb4d_geometry g2 = {.kv = 300, .semiangle_mrad = 25, .scan_step_A = {0.3, 0.3},
                         .det_sampling_mrad = {5, 5}, .centre_px = {7.5, 7.5}, .rotation_deg = 10};
    compare_G_of(tpath("s.npy"), tpath("s.qem"), &g2, 5.0, 7);
    compare_G_of(tpath("s.npy"), tpath("s.qem"), &g2, 5.0, 0);

    /* Negative control: one count of one BF pixel changed by 1 changes G's hash. */
    v[(N - 1) * P + 7 * 16 + 8] += 1;
    save_npy(tpath("s2.npy"), "<u2", shape, v);
    char h1[65], h2[65];
    G_sha_of(tpath("s.qem"), &g2, 5.0, h1);
    G_sha_of(tpath("s2.npy"), &g2, 5.0, h2);
    assert_string_not_equal(h1, h2);
    free(v);
}

/* ---------------------------------------------------------------------------------------- */
/* 10. progress                                                                               */

typedef struct {
    double v[4096];
    size_t n;
    int bad;
} progress_log;

static int on_progress(void *user, const char *stage, double fraction)
{
    progress_log *l = user;
    if (strcmp(stage, "import"))
        l->bad = 1;
    if (l->n < sizeof l->v / sizeof l->v[0])
        l->v[l->n++] = fraction;
    else
        l->bad = 1;
    return 0;
}

static void progress_reports(void **state)
{
    (void)state;
    empty_dir();
    size_t shape[4] = {24, 25, 4, 4};
    uint32_t *v = malloc(nvals(shape) * sizeof *v);
    for (size_t i = 0; i < nvals(shape); i++)
        v[i] = 10 + (uint32_t)(mix(i) % 20);
    save_npy(tpath("a.npy"), "<u2", shape, v);
    for (int policy = 0; policy < 2; policy++) {
        ssb4d_import_params p = params_with(policy ? SSB4D_HOT_NONE : SSB4D_HOT_MEDIAN);
        p.force = 1;
        progress_log *log = calloc(1, sizeof *log);
        p.progress = on_progress;
        p.progress_user = log;
        import_ok(tpath("a.npy"), tpath("a.qem"), &p, NULL);
        assert_false(log->bad);
        assert_true(log->n >= 1);
        for (size_t i = 0; i < log->n; i++) {
            assert_true(log->v[i] >= 0 && log->v[i] <= 1);
            if (i)
                assert_true(log->v[i] >= log->v[i - 1]);
        }
        assert_true(log->v[log->n - 1] == 1.0);
        free(log);
    }
    free(v);
}

/* ---------------------------------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    return ref_tmpdir(g_dir, sizeof g_dir, "import");
}

static int teardown(void **state)
{
    (void)state;
    return ref_rmtree(g_dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(npy_u16_exact),    cmocka_unit_test(npy_u8_exact),
        cmocka_unit_test(npy_u32_narrowing), cmocka_unit_test(existing_output),
        cmocka_unit_test(hot_pixels),       cmocka_unit_test(raw_big_endian),
        cmocka_unit_test(user_overrides),   cmocka_unit_test(refused_inputs),
        cmocka_unit_test(g_build_identical), cmocka_unit_test(progress_reports),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
