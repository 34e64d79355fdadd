/* identity.c — the identity of a data file that a calibration file records (SPEC §4), so that a
 * calibration made from other data is noticed (ssb4d_data_identity). */
#include "common/err.h"
#include "common/sha256.h"
#include "qem/qem.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* True when path starts with the .qem magic. */
static int is_qem_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char magic[8] = {0};
    int is_qem = f && fread(magic, 1, 8, f) == 8 && !memcmp(magic, "QEMDATA1", 8);
    if (f)
        fclose(f);
    return is_qem;
}

/* SHA-256 of the header's body checksums; the header checksum itself was verified by
 * qem_open, so the list is what the writer recorded. */
static int qem_identity(const char *path, char hex[65])
{
    qem_file *q = NULL;
    ssb4d_err err = {0};
    if (qem_open(path, 0, 1, &q, &err))
        return -1;
    const cJSON *sums = cJSON_GetObjectItemCaseSensitive(qem_header_json(q), "sha256");
    ssb4d_sha256 *h = cJSON_IsArray(sums) ? ssb_sha256_new() : NULL;
    if (!h) {
        qem_close(q);
        return -1;
    }
    for (const cJSON *e = sums->child; e; e = e->next)
        if (cJSON_IsString(e))
            ssb_sha256_update(h, e->valuestring, strlen(e->valuestring));
    ssb_sha256_final_hex(h, hex);
    qem_close(q);
    return 0;
}

static int file_sha256(const char *path, char hex[65])
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    ssb4d_sha256 *h = ssb_sha256_new();
    size_t cap = (size_t)4 << 20;
    unsigned char *buf = malloc(cap);
    int bad = !h || !buf;
    size_t got;
    while (!bad && (got = fread(buf, 1, cap, f)) > 0)
        ssb_sha256_update(h, buf, got);
    bad = bad || ferror(f);
    fclose(f);
    free(buf);
    if (h)
        ssb_sha256_final_hex(h, hex); /* also frees h */
    return bad ? -1 : 0;
}

ssb4d_status ssb4d_data_identity(const char *path, char *out, size_t n, ssb4d_err *err)
{
    char hex[65];
    int qem = is_qem_file(path);
    const char *prefix = qem ? "qem-body-sha256:" : "sha256:";
    if (n)
        out[0] = 0;
    if (strlen(prefix) + 64 >= n)
        return ssb_fail(err, SSB4D_EINVAL, "ssb4d_data_identity: %zu bytes cannot hold an identity", n);
    if ((qem ? qem_identity(path, hex) : file_sha256(path, hex)) != 0)
        return ssb_fail(err, SSB4D_EIO, "cannot read %s for its identity", path);
    snprintf(out, n, "%s%s", prefix, hex);
    return SSB4D_OK;
}
