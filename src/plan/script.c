/* script.c — the session script: which stages a viewer session runs (ssb4d.h). The planner
 * predicts those stages and the session runner (src/session/) runs them, so the script belongs
 * to the lower of the two: the plan. */
#include "common/err.h"
#include "ssb4d_advanced.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void ssb4d_session_script_default(ssb4d_session_script *s)
{
    memset(s, 0, sizeof *s);
    s->fft = 1;
    s->drags = 20;
    s->releases = 3;
    s->region = 1;
    s->save = 1;
}

static int get_count(const cJSON *v, size_t max, size_t *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > (double)max ||
        v->valuedouble != floor(v->valuedouble))
        return -1;
    *out = (size_t)v->valuedouble;
    return 0;
}

static int get_pair(const cJSON *a, size_t out[2])
{
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 2)
        return -1;
    for (int i = 0; i < 2; i++)
        if (get_count(cJSON_GetArrayItem(a, i), 1u << 20, &out[i]))
            return -1;
    return 0;
}

ssb4d_status ssb4d_session_script_read(const char *path, ssb4d_session_script *s, ssb4d_err *err)
{
    ssb4d_session_script_default(s);
    FILE *f = fopen(path, "rb");
    if (!f)
        return ssb_fail(err, SSB4D_EIO, "cannot open the session script %s", path);
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    int more = fgetc(f) != EOF;
    fclose(f);
    if (more)
        return ssb_fail(err, SSB4D_EFORMAT, "session script %s is larger than 64 KiB", path);
    buf[n] = 0;
    cJSON *j = cJSON_ParseWithLength(buf, n);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return ssb_fail(err, SSB4D_EFORMAT, "session script %s is not a JSON object", path);
    }
    ssb4d_status st = SSB4D_OK;
    const cJSON *v;
    cJSON_ArrayForEach(v, j)
    {
        const char *k = v->string;
        size_t c;
        if (!strcmp(k, "upsample")) {
            if (cJSON_IsString(v) && !strcmp(v->valuestring, "auto"))
                s->upsample = 0;
            else if (!get_count(v, 8, &c) && (c == 1 || c == 2 || c == 3 || c == 4 || c == 8))
                s->upsample = (int)c;
            else
                st = ssb_fail(err, SSB4D_EFORMAT, "session script: \"upsample\" must be 1, 2, 3, 4, 8 or \"auto\"");
        } else if (!strcmp(k, "fft") || !strcmp(k, "save")) {
            if (!cJSON_IsBool(v))
                st = ssb_fail(err, SSB4D_EFORMAT, "session script: \"%s\" must be true or false", k);
            else if (!strcmp(k, "fft"))
                s->fft = cJSON_IsTrue(v);
            else
                s->save = cJSON_IsTrue(v);
        } else if (!strcmp(k, "drags") || !strcmp(k, "releases")) {
            if (get_count(v, 10000, &c))
                st = ssb_fail(err, SSB4D_EFORMAT, "session script: \"%s\" must be a count from 0 to 10000", k);
            else if (!strcmp(k, "drags"))
                s->drags = c;
            else
                s->releases = c;
        } else if (!strcmp(k, "region")) {
            memset(s->region_rect, 0, sizeof s->region_rect);
            if (cJSON_IsNull(v))
                s->region = 0;
            else if (cJSON_IsString(v) && !strcmp(v->valuestring, "centre"))
                s->region = 1;
            else if (cJSON_IsObject(v) && !get_pair(cJSON_GetObjectItemCaseSensitive(v, "rows"), s->region_rect) &&
                     !get_pair(cJSON_GetObjectItemCaseSensitive(v, "cols"), s->region_rect + 2) &&
                     cJSON_GetArraySize(v) == 2)
                s->region = 1;
            else
                st = ssb_fail(err, SSB4D_EFORMAT,
                              "session script: \"region\" must be {\"rows\": [r0, r1], \"cols\": [c0, c1]}, \"centre\" or null");
        } else
            st = ssb_fail(err, SSB4D_EFORMAT, "session script: unknown key \"%s\" (known: upsample, fft, "
                                                "drags, releases, region, save)", k);
        if (st)
            break;
    }
    cJSON_Delete(j);
    return st;
}
