/* test_mem.c — the accounting layer (live, cache, peak, stages, budgets) and out-of-memory paths
 * of the G build and the loss: a budget that is too small gives SSB4D_ENOMEM with a message
 * naming the buffer, and nothing leaks (LeakSanitizer runs this in CI). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ssb4d_advanced.h"

static void counts_live_cache_peak(void **state)
{
    (void)state;
    ssb4d_mem *m = ssb4d_mem_create(0);
    assert_non_null(m);
    void *a = ssb4d_mem_alloc(m, 1000, "a", NULL);
    void *b = ssb4d_mem_alloc(m, 5000, "b", NULL);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal((uintptr_t)a % 64, 0);
    assert_int_equal((uintptr_t)b % 64, 0);
    assert_int_equal(ssb4d_mem_live(m), 6000);
    ssb4d_mem_free(m, b, 1); /* into the cache */
    assert_int_equal(ssb4d_mem_live(m), 1000);
    assert_int_equal(ssb4d_mem_cached(m), 5000);
    void *c = ssb4d_mem_alloc(m, 5000, "c", NULL); /* same size: reused */
    assert_ptr_equal(c, b);
    assert_int_equal(ssb4d_mem_cached(m), 0);
    assert_int_equal(ssb4d_mem_live(m), 6000);
    ssb4d_mem_free(m, c, 1);
    ssb4d_mem_trim(m);
    assert_int_equal(ssb4d_mem_cached(m), 0);
    assert_int_equal(ssb4d_mem_peak(m), 6000);
    ssb4d_mem_free(m, a, 0);
    assert_int_equal(ssb4d_mem_live(m), 0);
    ssb4d_mem_destroy(m);
}

static void stages_record_peak_and_after(void **state)
{
    (void)state;
    ssb4d_mem *m = ssb4d_mem_create(0);
    void *keep = ssb4d_mem_alloc(m, 1 << 20, "keep", NULL);
    ssb4d_mem_stage_begin(m, "one");
    void *t = ssb4d_mem_calloc(m, 8 << 20, "transient", NULL);
    assert_non_null(t);
    ssb4d_mem_free(m, t, 0);
    ssb4d_mem_stage_end(m);
    ssb4d_mem_stage_begin(m, "two");
    void *t2 = ssb4d_mem_alloc(m, 2 << 20, "cached", NULL);
    ssb4d_mem_free(m, t2, 1);
    ssb4d_mem_stage_end(m);
    assert_int_equal(ssb4d_mem_stage_count(m), 2);
    const ssb4d_stage_record *s1 = ssb4d_mem_stage(m, 0), *s2 = ssb4d_mem_stage(m, 1);
    assert_string_equal(s1->name, "one");
    assert_int_equal(s1->peak_bytes, (1 << 20) + (8 << 20));
    assert_int_equal(s1->after_bytes, 1 << 20);
    assert_int_equal(s2->peak_bytes, (1 << 20) + (2 << 20));
    assert_int_equal(s2->after_bytes, (1 << 20) + (2 << 20));
    assert_int_equal(s2->cache_bytes, 2 << 20);
    assert_true(s1->rss_peak_bytes > 0); /* /proc/self/status is there on Linux */
    assert_null(ssb4d_mem_stage(m, 2));
    ssb4d_mem_free(m, keep, 0);
    ssb4d_mem_destroy(m);
}

static void budget_refuses_with_a_message(void **state)
{
    (void)state;
    ssb4d_mem *m = ssb4d_mem_create(10 << 20);
    ssb4d_err err = {0};
    void *a = ssb4d_mem_alloc(m, 6 << 20, "first", &err);
    assert_non_null(a);
    void *b = ssb4d_mem_alloc(m, 6 << 20, "second buffer", &err);
    assert_null(b);
    assert_int_equal(err.code, SSB4D_ENOMEM);
    assert_non_null(strstr(err.msg, "second buffer"));
    /* A cached block is given back before refusing. */
    ssb4d_mem_free(m, a, 1);
    void *c = ssb4d_mem_alloc(m, 7 << 20, "third", &err);
    assert_non_null(c);
    assert_int_equal(ssb4d_mem_cached(m), 0);
    ssb4d_mem_free(m, c, 0);
    assert_null(ssb4d_mem_alloc(m, SIZE_MAX - 8, "absurd", &err));
    ssb4d_mem_destroy(m);
}

/* A small dataset with a BF disk for the out-of-memory paths. */
static uint16_t *disk_data(size_t n, size_t d, double rad)
{
    uint16_t *v = malloc(n * n * d * d * sizeof *v);
    uint64_t x = 7;
    for (size_t p = 0; p < n * n; p++)
        for (size_t r = 0; r < d; r++)
            for (size_t c = 0; c < d; c++) {
                double dr = (double)r - d / 2.0, dc = (double)c - d / 2.0;
                x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                v[(p * d + r) * d + c] = (uint16_t)((dr * dr + dc * dc < rad * rad) ? 5 + (x >> 62) : 0);
            }
    return v;
}

static void out_of_memory_paths(void **state)
{
    (void)state;
    const size_t n = 32, d = 24;
    uint16_t *data = disk_data(n, d, 8);
    size_t shape[4] = {n, n, d, d};
    ssb4d_err err = {0};
    ssb4d_source *src;
    assert_int_equal(ssb4d_source_from_memory(data, SSB4D_U16, shape, &src, &err), SSB4D_OK);
    ssb4d_geometry g = {.kv = 300, .semiangle_mrad = 25, .scan_step_A = {0.4, 0.4},
                        .det_sampling_mrad = {25.0 / 8, 25.0 / 8}, .centre_px = {12, 12}};
    int32_t bf[24 * 24];
    size_t nbf = 0;
    for (size_t r = 0; r < d; r++)
        for (size_t c = 0; c < d; c++)
            if ((r - 12.0) * (r - 12.0) + (c - 12.0) * (c - 12.0) <= 64)
                bf[nbf++] = (int32_t)(r * d + c);
    /* G needs nbf * 32 * 17 * 8 bytes: a budget of 64 KiB cannot hold it. */
    ssb4d_mem *tiny = ssb4d_mem_create(64 << 10);
    ssb4d_G *G = NULL;
    assert_int_equal(ssb4d_gbuild(src, &g, bf, nbf, NULL, tiny, &G, &err), SSB4D_ENOMEM);
    assert_null(G);
    assert_non_null(strstr(err.msg, "G(q,k)"));
    assert_int_equal(ssb4d_mem_live(tiny), 0);
    ssb4d_mem_destroy(tiny);
    /* G in one context, the loss's tiles in another that is too small for them. */
    ssb4d_mem *m = ssb4d_mem_create(0);
    assert_int_equal(ssb4d_gbuild(src, &g, bf, nbf, NULL, m, &G, &err), SSB4D_OK);
    ssb4d_mem *small = ssb4d_mem_create(16 << 10);
    ssb4d_aberrations ab;
    memset(&ab, 0, sizeof ab);
    ab.C_nm[SSB4D_C10] = -5;
    double loss = NAN;
    assert_int_equal(ssb4d_loss(G, &g, &ab, NULL, NULL, small, &loss, NULL, &err), SSB4D_ENOMEM);
    assert_true(isnan(loss));
    assert_non_null(strstr(err.msg, "loss"));
    assert_int_equal(ssb4d_mem_live(small), 0); /* the failed evaluation left nothing behind */
    float *phase = malloc(n * n * sizeof *phase);
    assert_int_equal(ssb4d_object(G, &g, &ab, NULL, 2, NULL, small, NULL, phase, &err), SSB4D_ENOMEM);
    assert_int_equal(ssb4d_mem_live(small), 0);
    /* With room, the same call works. */
    assert_int_equal(ssb4d_loss(G, &g, &ab, NULL, NULL, m, &loss, NULL, &err), SSB4D_OK);
    assert_true(loss > 0);
    free(phase);
    ssb4d_mem_destroy(small);
    ssb4d_G_free(G);
    assert_int_equal(ssb4d_mem_live(m), 0);
    ssb4d_mem_destroy(m);
    ssb4d_source_close(src);
    free(data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(counts_live_cache_peak),
        cmocka_unit_test(stages_record_peak_and_after),
        cmocka_unit_test(budget_refuses_with_a_message),
        cmocka_unit_test(out_of_memory_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
