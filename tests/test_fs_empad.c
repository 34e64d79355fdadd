/* test_fs_empad.c — the EMPAD .xml parser and reader (src/formats/empad.c, fs_empad.c) and the
 * Merlin pieces of issue 28 (several .mib files of one acquisition; the scan line length from
 * the frame time stamps, mib_line_length). Files are written here from the published layouts;
 * tests/formats/test_empad.py and test_merlin.py check the same through `ssb4d export`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/empad.h"
#include "formats/framesrc.h"
#include "formats/mib.h"
#include "ref_ssb.h"

static char g_dir[256];

static char *tpath(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static ssb4d_status xml(const char *text, empad_xml *doc, ssb4d_err *err)
{
    return empad_xml_parse(text, strlen(text), doc, err);
}

/* The document must be refused with `word` in the message. */
static void xml_refused(const char *text, const char *word)
{
    empad_xml doc;
    ssb4d_err err = {0};
    empad_info info;
    ssb4d_status st = xml(text, &doc, &err);
    if (!st) {
        st = empad_info_read(&doc, &info, &err);
        empad_xml_free(&doc);
    }
    if (st == SSB4D_OK)
        fail_msg("accepted: %s", text);
    if (!strstr(err.msg, word))
        fail_msg("'%s': the error '%s' lacks '%s'", text, err.msg, word);
}

/* ---------------------------------------------------------------------------------------- */

static void xml_parser(void **state)
{
    (void)state;
    empad_xml doc;
    ssb4d_err err = {0};
    const char *good = "\xEF\xBB\xBF<?xml version=\"1.0\"?>\n<!-- c -->\n<root a=\"1 &amp; 2\" b='&#x3C;'>"
                       "<leaf>  t&lt;x&#65;<![CDATA[<raw>]]> </leaf><mixed>a<c/>b</mixed><e/>"
                       "<?pi?><leaf>2</leaf></root >\n<!-- after -->\n";
    assert_int_equal(xml(good, &doc, &err), SSB4D_OK);
    assert_int_equal(doc.n_nodes, 6);
    assert_string_equal(doc.nodes[0].name, "root");
    assert_string_equal(empad_xml_attr_value(&doc, 0, "a"), "1 & 2");
    assert_string_equal(empad_xml_attr_value(&doc, 0, "b"), "<");
    assert_null(empad_xml_attr_value(&doc, 0, "c"));
    int leaf = empad_xml_child(&doc, 0, "leaf");
    assert_int_equal(leaf, 1);
    assert_string_equal(doc.nodes[leaf].text, "  t<xA<raw> ");
    assert_int_equal(doc.nodes[leaf].text_len, 12);
    int mixed = empad_xml_child(&doc, 0, "mixed");
    assert_string_equal(doc.nodes[mixed].text, ""); /* mixed content keeps no text */
    assert_int_equal(empad_xml_child(&doc, mixed, "c"), mixed + 1);
    assert_string_equal(doc.nodes[doc.nodes[mixed].next].name, "e");
    assert_string_equal(doc.nodes[5].text, "2");
    assert_int_equal(doc.nodes[5].next, -1);
    assert_int_equal(doc.nodes[4].next, 5);
    assert_int_equal(empad_xml_child(&doc, 0, "none"), -1);
    empad_xml_free(&doc);

    /* every truncation of a good document: refused, never a crash or an overread (ASan) */
    size_t n = strlen(good);
    for (size_t k = 0; k < n; k++) {
        char *cut = malloc(k ? k : 1);
        memcpy(cut, good, k);
        ssb4d_status st = empad_xml_parse(cut, k, &doc, &err);
        if (st == SSB4D_OK) /* only cuts inside the trailing comment's blanks may pass */
            empad_xml_free(&doc);
        else
            assert_null(doc.nodes);
        free(cut);
    }
    /* depth: 64 levels are read, 65 are not */
    char deep[1200] = "";
    for (int i = 0; i < 64; i++)
        strcat(deep, "<a>");
    for (int i = 0; i < 64; i++)
        strcat(deep, "</a>");
    assert_int_equal(xml(deep, &doc, &err), SSB4D_OK);
    assert_int_equal(doc.nodes[63].depth, 63);
    empad_xml_free(&doc);
    char deeper[1200] = "<b>";
    strcat(deeper, deep);
    strcat(deeper, "</b>");
    assert_int_not_equal(xml(deeper, &doc, &err), SSB4D_OK);
    assert_non_null(strstr(err.msg, "deeper"));

    static const char *bad[][2] = {
        {"", "no root"},
        {"   ", "no root"},
        {"<root>", "ends inside <root>"},
        {"<root></rot>", "does not close <root>"},
        {"<root></root><x/>", "after the root"},
        {"<root>&bogus;</root>", "unknown entity"},
        {"<root>&#0;</root>", "does not allow"},
        {"<root>&#xD800;</root>", "does not allow"},
        {"<root>&#x110000;</root>", "beyond Unicode"},
        {"<root>a & b</root>", "&amp;"},
        {"<root a='1' a='2'/>", "repeats"},
        {"<root a=1/>", "not quoted"},
        {"<root a='<'/>", "'<' inside"},
        {"<root a='1'b='2'/>", "separated"},
        {"<root>\x01</root>", "control byte"},
        {"<!DOCTYPE root><root/>", "DTD"},
        {"<root><!ENTITY x 'y'></root>", "declaration"},
        {"<root><!-- never", "comment that never ends"},
        {"<root><![CDATA[x</root>", "CDATA"},
        {"<1root/>", "name was expected"},
        {"<root/", "'/' in the tag"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        xml_refused(bad[i][0], bad[i][1]);
    /* the line number is given */
    assert_int_not_equal(xml("<root>\n\n<a></b></root>", &doc, &err), SSB4D_OK);
    assert_non_null(strstr(err.msg, "line 3"));
    /* a name of 257 bytes */
    char longname[300] = "<";
    memset(longname + 1, 'n', 257);
    strcpy(longname + 258, "/>");
    xml_refused(longname, "longer than");
}

static void empad_fields(void **state)
{
    (void)state;
    empad_info info;
    ssb4d_err err = {0};
    const char *v122 = "<root><raw_file filename=\"scan_x4_y3.raw\"/><exposure_time> 1.5 </exposure_time>"
                       "<scan_parameters mode=\"search\"><scan_resolution_y>64</scan_resolution_y>"
                       "<scan_resolution_x>32</scan_resolution_x></scan_parameters>"
                       "<scan_parameters mode=\"acquire\"><scan_size>0.6</scan_size>"
                       "<scan_resolution_y>3</scan_resolution_y><scan_resolution_x>4</scan_resolution_x>"
                       "</scan_parameters><timestamp isoformat=\"2026-03-25T16:47:52\"/>"
                       "<iom_measurements><high_voltage>300000.0</high_voltage>"
                       "<nominal_camera_length>0.369</nominal_camera_length>"
                       "<calibrated_diffraction_angle>5.5e-4</calibrated_diffraction_angle>"
                       "</iom_measurements></root>";
    assert_int_equal(empad_parse(v122, strlen(v122), &info, &err), SSB4D_OK);
    assert_string_equal(info.raw_name, "scan_x4_y3.raw");
    assert_int_equal(info.scan[0].rows, 3);
    assert_int_equal(info.scan[0].cols, 4);
    assert_int_equal(info.scan[2].rows, 64);
    assert_int_equal(info.scan[2].cols, 32);
    assert_int_equal(info.scan[1].rows, 0);
    assert_false(info.is_series);
    assert_float_equal(info.exposure_ms, 1.5, 0);
    assert_float_equal(info.high_voltage_V, 300000.0, 0);
    assert_float_equal(info.camera_length_m, 0.369, 0);
    assert_float_equal(info.diffraction_angle_rad, 5.5e-4, 0);
    assert_float_equal(info.scan_size, 0.6, 0);
    assert_string_equal(info.timestamp, "2026-03-25T16:47:52");
    /* Windows paths: the name is the last component */
    const char *win = "<root><raw_file filename=\"D:\\empad\\scan_x2_y2.raw\"/><pix_x>2</pix_x>"
                      "<pix_y>5</pix_y><exposure_time>fast</exposure_time></root>";
    assert_int_equal(empad_parse(win, strlen(win), &info, &err), SSB4D_OK);
    assert_string_equal(empad_basename(info.raw_name), "scan_x2_y2.raw");
    assert_int_equal(info.scan[1].rows, 5);
    assert_int_equal(info.scan[1].cols, 2);
    assert_true(isnan(info.exposure_ms));
    const char *series = "<root><raw_file filename=\"s.raw\"/><type> series </type><count>10</count></root>";
    assert_int_equal(empad_parse(series, strlen(series), &info, &err), SSB4D_OK);
    assert_true(info.is_series);
    assert_int_equal(info.series_count, 10);

    xml_refused("<data><raw_file filename=\"a.raw\"/></data>", "<root>");
    xml_refused("<root><raw_file filename=\"a.raw\"/><raw_file filename=\"b.raw\"/></root>", "two <raw_file>");
    xml_refused("<root><pix_x>3</pix_x></root>", "without <pix_y>");
    xml_refused("<root><pix_x>3</pix_x><pix_y>2</pix_y><pix_y>3</pix_y></root>", "two <pix_y>");
    xml_refused("<root><pix_x>unknown</pix_x><pix_y>2</pix_y></root>", "'unknown'");
    xml_refused("<root><pix_x>0</pix_x><pix_y>2</pix_y></root>", "whole number");
    xml_refused("<root><scan_parameters mode=\"acquire\"><scan_resolution_x>3</scan_resolution_x>"
                "</scan_parameters></root>", "without <scan_resolution_y>");
    xml_refused("<root><scan_parameters><scan_resolution_x>3</scan_resolution_x><scan_resolution_y>2"
                "</scan_resolution_y></scan_parameters><scan_parameters mode=\"acquire\">"
                "<scan_resolution_x>2</scan_resolution_x><scan_resolution_y>3</scan_resolution_y>"
                "</scan_parameters></root>", "disagree");
    xml_refused("<root><type>movie</type></root>", "scan or series");
}

/* ---------------------------------------------------------------------------------------- */
/* EMPAD files through framesrc                                                               */

/* The value of frame f, pixel (r, c) of the 130-row stored frame (footer rows 128, 129). */
static float empad_value(size_t f, size_t r, size_t c)
{
    if (r >= 128)
        return 1.0e7f + (float)(f * 256 + (r - 128) * 128 + c);
    return (float)((double)((f * 7919 + r * 131 + c * 17) % 2001) / 8.0 - 125.0);
}

static void write_empad_raw(const char *path, size_t n)
{
    float *v = malloc(n * 130 * 128 * sizeof *v);
    for (size_t f = 0; f < n; f++)
        for (size_t r = 0; r < 130; r++)
            for (size_t c = 0; c < 128; c++)
                v[(f * 130 + r) * 128 + c] = empad_value(f, r, c);
    write_file(path, v, n * 130 * 128 * sizeof *v); /* little-endian host: as EMPAD writes */
    free(v);
}

static void empad_files(void **state)
{
    (void)state;
    write_empad_raw(tpath("scan_x3_y2.raw"), 6);
    const char *x = "<root><raw_file filename=\"scan_x3_y2.raw\"/><scan_parameters mode=\"acquire\">"
                    "<scan_resolution_x>3</scan_resolution_x><scan_resolution_y>2</scan_resolution_y>"
                    "</scan_parameters><exposure_time>0.5</exposure_time><iom_measurements>"
                    "<high_voltage>80000</high_voltage></iom_measurements></root>";
    write_file(tpath("acq.xml"), x, strlen(x));
    framesrc *s = NULL;
    ssb4d_err err = {0};
    if (framesrc_open(tpath("acq.xml"), NULL, &s, &err))
        fail_msg("%s", err.msg);
    size_t sh[4];
    framesrc_shape(s, sh);
    assert_int_equal(sh[0], 2);
    assert_int_equal(sh[1], 3);
    assert_int_equal(sh[2], 128);
    assert_int_equal(sh[3], 128);
    assert_true(framesrc_is_float(s));
    assert_string_equal(framesrc_format_name(s), "empad");
    framesrc_calibration cal;
    framesrc_calibration_of(s, &cal);
    assert_float_equal(cal.kv, 80.0, 1e-12);
    assert_float_equal(cal.dwell_us, 500.0, 1e-12);
    assert_true(isnan(cal.camera_length_mm) && isnan(cal.scan_step_A[0]));
    float *buf = malloc(6 * 128 * 128 * sizeof *buf);
    for (size_t b = 1; b <= 6; b++) /* any block size, any start */
        for (size_t p0 = 0; p0 < 6; p0 += b) {
            size_t m = 6 - p0 < b ? 6 - p0 : b;
            assert_int_equal(framesrc_read_f32(s, p0, m, buf, &err), SSB4D_OK);
            for (size_t f = 0; f < m; f++)
                for (size_t k = 0; k < 128 * 128; k++)
                    if (buf[f * 16384 + k] != empad_value(p0 + f, k / 128, k % 128))
                        fail_msg("frame %zu pixel %zu: %g", p0 + f, k, (double)buf[f * 16384 + k]);
        }
    uint32_t *u = malloc(128 * 128 * 4);
    assert_int_equal(framesrc_read(s, 0, 1, u, &err), SSB4D_EFORMAT); /* floats are not counts */
    free(u);
    free(buf);
    framesrc_close(s);

    /* by the .raw, with the format named */
    framesrc_opts o = {.format = FRAMESRC_EMPAD};
    assert_int_equal(framesrc_open(tpath("scan_x3_y2.raw"), &o, &s, &err), SSB4D_OK);
    framesrc_close(s);
    /* truncated: the message says what the .xml said and what the size needs */
    assert_int_equal(truncate(tpath("scan_x3_y2.raw"), 6 * 130 * 128 * 4 - 4), 0);
    assert_int_equal(framesrc_open(tpath("acq.xml"), NULL, &s, &err), SSB4D_EFORMAT);
    assert_non_null(strstr(err.msg, "2x3"));
    assert_non_null(strstr(err.msg, "scan_x3_y2.raw"));
    /* several files are for Merlin only */
    write_empad_raw(tpath("scan_x3_y2.raw"), 6);
    const char *more[] = {tpath("acq.xml")};
    framesrc_opts m = {.more_paths = more, .n_more_paths = 1};
    assert_int_not_equal(framesrc_open(tpath("acq.xml"), &m, &s, &err), SSB4D_OK);
    /* the raw missing */
    unlink(tpath("scan_x3_y2.raw"));
    assert_int_not_equal(framesrc_open(tpath("acq.xml"), NULL, &s, &err), SSB4D_OK);
    assert_non_null(strstr(err.msg, "missing"));
}

/* ---------------------------------------------------------------------------------------- */
/* Merlin                                                                                     */

static void line_length(void **state)
{
    (void)state;
    int64_t t[64], med;
    /* 2 lines of 4 (the files): g g g G g g g */
    const int64_t g = 1000000, G = 3100000;
    for (int rows = 2; rows <= 5; rows++)
        for (int cols = 2; cols <= 12; cols++) {
            int64_t now = 1700000000000000000LL;
            for (int k = 0; k < rows * cols; k++) {
                if (k && k % cols == 0)
                    now += G - g;
                t[k] = now;
                now += g + (k % 3) * 10000; /* 1% jitter */
            }
            size_t L = mib_line_length(t, (size_t)(rows * cols), 1, &med);
            if (L != (size_t)cols)
                fail_msg("%dx%d: line length %zu", rows, cols, L);
            assert_true(med >= g && med <= g + 20000);
            /* a pause inside the first line: no pattern */
            t[1] += 5 * g;
            for (int k = 2; k < rows * cols; k++)
                t[k] += 5 * g;
            assert_int_equal(mib_line_length(t, (size_t)(rows * cols), 1, NULL), 0);
        }
    for (int k = 0; k < 16; k++)
        t[k] = k * g;
    assert_int_equal(mib_line_length(t, 16, 1, &med), 0); /* even steps: nothing to see */
    assert_int_equal(med, g);
    for (int k = 0; k < 8; k++)
        t[k] = k * 3 + (k >= 4) * 10; /* a 3 ns interval from 1 ns stamps... */
    assert_int_equal(mib_line_length(t, 8, 1, NULL), 0); /* ...is too coarse to trust */
    assert_int_equal(mib_line_length(t, 8, 1, NULL), 0);
    for (int k = 0; k < 8; k++)
        t[k] = k * 8 + (k >= 4) * 20;
    assert_int_equal(mib_line_length(t, 8, 1, NULL), 4);
    assert_int_equal(mib_line_length(t, 8, 3, NULL), 0);
    t[5] = t[4] - 1; /* time going back */
    assert_int_equal(mib_line_length(t, 8, 1, NULL), 0);
    assert_int_equal(mib_line_length(t, 3, 1, NULL), 0);
    assert_int_equal(mib_line_length(NULL, 8, 1, NULL), 0);
    /* lines of 3 in 8 frames: 3 does not divide 8 */
    for (int k = 0; k < 8; k++)
        t[k] = k * 100 + (k / 3) * 500;
    assert_int_equal(mib_line_length(t, 8, 1, NULL), 0);
    /* extreme values: no overflow (UBSan) */
    t[0] = INT64_MIN;
    t[1] = INT64_MIN + 1;
    t[2] = 0;
    t[3] = INT64_MAX;
    assert_int_equal(mib_line_length(t, 4, 1, &med), 0);
}

static size_t mib_frame(uint8_t *out, uint32_t seq, size_t w, size_t h, const char *dtype, int depth,
                        int64_t ns, int ext, uint32_t fill)
{
    char head[384] = {0};
    long long s = ns / 1000000000, f = ns % 1000000000;
    /* 2024-01-02 03:04:05 is 1704164645 s after 1970 */
    long long sec = s - 1704164645 + 5;
    int n = snprintf(head, sizeof head, "MQ1,%06u,00384,01,%04zu,%04zu,%s,   1x1,01,"
                     "2024-01-02 03:04:%02lld.%06lld,0.000250,0,0,0,1.0E+1,5.1E+2,0,0,0,0,0,0,3RX,175,511,"
                     "000,000,000,000,000,000,125,255,125,125,100,100,082,100,087,030,128,004,255,129,128,"
                     "176,168,511,511", seq, w, h, dtype, sec, f / 1000);
    if (ext)
        n += snprintf(head + n, sizeof head - (size_t)n, ",MQ1A,2024-01-02T03:04:%02lld.%09lldZ,"
                      "250000ns,%d,", sec, f, depth);
    assert_true(n > 0 && n < 384);
    memcpy(out, head, 384);
    int b = dtype[2] == '8' ? 1 : dtype[1] == '1' ? 2 : 4;
    for (size_t k = 0; k < w * h; k++) {
        uint32_t v = (fill + (uint32_t)k * 37u) & ((1u << depth) - 1);
        for (int i = 0; i < b; i++)
            out[384 + k * (size_t)b + (size_t)i] = (uint8_t)(v >> (8 * (b - 1 - i)));
    }
    return 384 + w * h * (size_t)b;
}

static void mib_time_fields(void **state)
{
    (void)state;
    uint8_t buf[384 + 64];
    mib_header h;
    ssb4d_err err = {0};
    int64_t at = 1704164645LL * 1000000000 + 123456789;
    mib_frame(buf, 1, 4, 4, "U16", 12, at, 1, 0);
    assert_int_equal(mib_parse_header(buf, sizeof buf, &h, &err), SSB4D_OK);
    assert_int_equal(h.time_res_ns, 1);
    assert_int_equal(h.time_ns, at);
    assert_float_equal(h.shutter_ext_s, 250e-6, 1e-15);
    mib_frame(buf, 1, 4, 4, "U16", 12, at, 0, 0);
    assert_int_equal(mib_parse_header(buf, sizeof buf, &h, &err), SSB4D_OK);
    assert_int_equal(h.time_res_ns, 1000);
    assert_int_equal(h.time_ns, at - 789);
    assert_true(isnan(h.shutter_ext_s));
    char *ts = strstr((char *)buf, "2024-01-02 ");
    assert_non_null(ts);
    memcpy(ts, "2024-13", 7); /* month 13: no time stamp, still a header */
    assert_int_equal(mib_parse_header(buf, sizeof buf, &h, &err), SSB4D_OK);
    assert_int_equal(h.time_res_ns, 0);
    assert_int_equal(h.time_ns, 0);
}

/* Writes frames [a, b) of a rows x cols raster (flyback before each line) to path. */
static void write_mib_part(const char *path, size_t a, size_t b, size_t cols, size_t w, size_t h,
                           int depth)
{
    uint8_t *buf = malloc(384 + w * h * 2);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t k = a; k < b; k++) {
        int64_t ns = 1704164645LL * 1000000000 + (int64_t)k * 2000000 + (int64_t)(k / cols) * 5000000;
        size_t n = mib_frame(buf, (uint32_t)k + 1, w, h, "U16", depth, ns, 1, (uint32_t)k * 1000);
        assert_int_equal(fwrite(buf, 1, n, f), n);
    }
    fclose(f);
    free(buf);
}

static void mib_several_files(void **state)
{
    (void)state;
    /* 3x5 over three files, given in the wrong order */
    write_mib_part(tpath("m1.mib"), 0, 6, 5, 8, 8, 12);
    write_mib_part(tpath("m2.mib"), 6, 10, 5, 8, 8, 12);
    write_mib_part(tpath("m3.mib"), 10, 15, 5, 8, 8, 12);
    const char *more[] = {tpath("m1.mib"), tpath("m2.mib")};
    framesrc_opts o = {.more_paths = more, .n_more_paths = 2};
    framesrc *s = NULL;
    ssb4d_err err = {0};
    if (framesrc_open(tpath("m3.mib"), &o, &s, &err))
        fail_msg("%s", err.msg);
    size_t sh[4];
    framesrc_shape(s, sh);
    assert_int_equal(sh[0], 3);
    assert_int_equal(sh[1], 5);
    const cJSON *m = framesrc_source_metadata(s);
    assert_string_equal(cJSON_GetObjectItem(m, "scan_shape_source")->valuestring, "timestamps");
    framesrc_calibration cal;
    framesrc_calibration_of(s, &cal);
    assert_float_equal(cal.dwell_us, 250.0, 1e-9);
    uint32_t *buf = malloc(15 * 64 * 4);
    for (size_t b = 1; b <= 15; b += 3)
        for (size_t p0 = 0; p0 < 15; p0 += b) {
            size_t n = 15 - p0 < b ? 15 - p0 : b;
            assert_int_equal(framesrc_read(s, p0, n, buf, &err), SSB4D_OK);
            for (size_t f = 0; f < n; f++)
                for (size_t k = 0; k < 64; k++)
                    assert_int_equal(buf[f * 64 + k], ((p0 + f) * 1000 + k * 37) & 4095);
        }
    for (size_t p = 15; p-- > 0;) { /* backwards: the open file changes every frame */
        assert_int_equal(framesrc_read(s, p, 1, buf, &err), SSB4D_OK);
        assert_int_equal(buf[1], (p * 1000 + 37) & 4095);
    }
    free(buf);
    framesrc_close(s);
    /* a file with another detector size: refused, naming it */
    write_mib_part(tpath("w.mib"), 6, 10, 5, 16, 8, 12);
    const char *bad[] = {tpath("w.mib"), tpath("m3.mib")};
    o.more_paths = bad;
    assert_int_equal(framesrc_open(tpath("m1.mib"), &o, &s, &err), SSB4D_EFORMAT);
    assert_non_null(strstr(err.msg, "w.mib"));
    assert_non_null(strstr(err.msg, "frame size"));
    /* a file left out */
    o.n_more_paths = 1;
    const char *gap[] = {tpath("m3.mib")};
    o.more_paths = gap;
    assert_int_equal(framesrc_open(tpath("m1.mib"), &o, &s, &err), SSB4D_EFORMAT);
    assert_non_null(strstr(err.msg, "missing"));
    /* the .hdr says 15 frames: one file alone is refused, the others named */
    const char *hdr = "HDR,\t\nFrames in Acquisition (Number):\t15\nFrames per Trigger (Number):\t1\nEnd\t\n";
    write_file(tpath("m.hdr"), hdr, strlen(hdr));
    assert_int_equal(framesrc_open(tpath("m1.mib"), NULL, &s, &err), SSB4D_EFORMAT);
    assert_non_null(strstr(err.msg, "m2.mib, m3.mib"));
    unlink(tpath("m.hdr"));
}

static int setup(void **state)
{
    (void)state;
    return ref_tmpdir(g_dir, sizeof g_dir, "fs_empad");
}

static int teardown(void **state)
{
    (void)state;
    return ref_rmtree(g_dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(xml_parser),      cmocka_unit_test(empad_fields),
        cmocka_unit_test(empad_files),     cmocka_unit_test(line_length),
        cmocka_unit_test(mib_time_fields), cmocka_unit_test(mib_several_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
