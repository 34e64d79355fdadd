/* qem_bench.c — read-side speed of an encoded .qem acquisition (src/qem, src/source/source_qem.c).
 *
 * Measured, in this order, on one file:
 *   open         qem_open with verify_body = 1 (every §11 check, body SHA-256 included), then a
 *                second handle with verify_body = 0 (header and index checks only); the fraction
 *                of the file already in the page cache before the first open is reported, since
 *                the first open is the one that pays for reading the file from disk;
 *   totals       qem_pixel_totals (exact per-pixel sums over all scans, every stream decoded);
 *   BF set       valid pixels whose total is >= F x the largest valid total (a plain threshold
 *                that approximates the bright-field disk; not the calibration's disk fit);
 *   BF columns   every scan row of every BF pixel through ssb_qem_read_columns, in blocks of
 *                scan rows sized as the G build sizes them (rows = M MiB / (n_bf * nx * 4), at
 *                least 1, at most ny): the decode the G build does on a .qem source; then the
 *                same streams once more straight from qem_decode_block (uint16, no output
 *                array), which separates the codec's speed on BF counts from what the column
 *                read adds (BF streams hold the large counts, so they decode slower per count
 *                than the mostly-dark full file);
 *   full decode  qem_read_region over the whole file in slabs of scan rows of about 64 MiB of
 *                uint16 output each.
 * Both decodes are summed (outside the timed calls) into checksums that are compared with the
 * exact totals, so nothing is optimised away and a wrong decode is caught (exit 1).
 * Throughput: counts (samples) decoded per second, and the same as MB/s of uint16 output
 * (1 MB = 10^6 bytes). "extra memory" is the one output buffer each decode allocates. The first
 * BF block's time is also reported on its own: it includes the page faults of the freshly
 * allocated block buffer (as in a G build), which at 256 MiB is a visible part of the total.
 *
 * Usage: ssb4d_qem_bench FILE.qem [--threads T] [--bf-fraction F] [--block-mib M]
 *        [--json-out FILE]
 *   --threads T       decode / checksum threads (default: all online cores)
 *   --bf-fraction F   BF threshold as a fraction of the largest total, 0 < F <= 1 (default 0.5)
 *   --block-mib M     float output per BF column block in MiB, > 0 (default 256, as the G build)
 *   --json-out FILE   append one JSON object (one line) with every number to FILE
 * Exit status: 0 ok, 1 a decode failed or a checksum disagreed, 2 bad arguments or the file (or
 * the JSON file) could not be opened. */
#include "common/parallel.h"
#include "qem/qem.h"
#include "source/source.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PROG "ssb4d_qem_bench"
#define SLAB_BYTES ((size_t)64 << 20) /* full decode: uint16 output per slab */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: " PROG " FILE.qem [--threads T] [--bf-fraction F] [--block-mib M] [--json-out FILE]\n");
}

/* Strict number parsing: the whole string, finite. */
static int parse_int(const char *s, long *v)
{
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end)
        return -1;
    *v = x;
    return 0;
}

static int parse_double(const char *s, double *v)
{
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(x))
        return -1;
    *v = x;
    return 0;
}

/* Fraction of the file's pages resident in the page cache (-1 if it cannot be told). */
static double cached_fraction(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    struct stat sb;
    double frac = -1;
    if (fstat(fd, &sb) == 0 && sb.st_size > 0) {
        size_t len = (size_t)sb.st_size, page = (size_t)sysconf(_SC_PAGESIZE);
        size_t npages = (len + page - 1) / page;
        void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
        unsigned char *vec = malloc(npages);
        if (m != MAP_FAILED && vec && mincore(m, len, vec) == 0) {
            size_t res = 0;
            for (size_t i = 0; i < npages; i++)
                res += vec[i] & 1;
            frac = (double)res / (double)npages;
        }
        free(vec);
        if (m != MAP_FAILED)
            munmap(m, len);
    }
    close(fd);
    return frac;
}

/* Process high-water mark (VmHWM) in bytes, 0 if unknown. */
static size_t vm_hwm(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) {
            kb = (size_t)strtoull(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kb * 1024;
}

/* Short commit of the source tree (read-only git call), or "" when unknown. */
static void git_rev(char *out, size_t cap)
{
    out[0] = 0;
#ifdef SSB4D_SOURCE_DIR
    const char *dir = SSB4D_SOURCE_DIR;
    if (strchr(dir, '\''))
        return;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "git -C '%s' rev-parse --short HEAD 2>/dev/null", dir);
    FILE *p = popen(cmd, "r");
    if (!p)
        return;
    if (fgets(out, (int)cap, p)) {
        size_t n = strlen(out);
        while (n && (out[n - 1] == '\n' || out[n - 1] == '\r'))
            out[--n] = 0;
        for (size_t i = 0; i < n; i++) /* keep it a plain token */
            if (!((out[i] >= '0' && out[i] <= '9') || (out[i] >= 'a' && out[i] <= 'f'))) {
                out[0] = 0;
                break;
            }
    }
    else
        out[0] = 0;
    if (pclose(p) != 0)
        out[0] = 0;
#else
    (void)cap;
#endif
}

/* Writes s as a JSON string (quotes included). */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* A number for JSON: non-finite values become null. */
static void json_num(FILE *f, const char *key, double v, int comma)
{
    if (isfinite(v))
        fprintf(f, "\"%s\":%.6g%s", key, v, comma ? "," : "");
    else
        fprintf(f, "\"%s\":null%s", key, comma ? "," : "");
}

typedef struct {
    double open_verify_s, open_noverify_s, cached_before;
    double totals_s;
    size_t n_valid, n_bf;
    uint64_t max_total, bf_threshold_counts;
    double bf_s, bf_counts, bf_rows_per_block, bf_blocks;
    size_t bf_buffer_bytes;
    uint64_t bf_checksum, bf_expected;
    double bf_raw_s, bf_first_s, bf_first_counts;
    uint64_t bf_raw_checksum;
    double full_s, full_counts;
    size_t full_rows_per_slab, full_slabs, full_buffer_bytes;
    uint64_t full_checksum, full_expected;
    size_t hwm_bytes;
} results;

static double per_s(double v, double s) { return s > 0 ? v / s : NAN; }

int main(int argc, char **argv)
{
    const char *path = NULL, *json_path = NULL;
    long threads_arg = 0;
    double bf_frac = 0.5, block_mib = 256;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        else if (!strcmp(a, "--threads")) {
            if (!has || parse_int(argv[++i], &threads_arg) || threads_arg < 1 || threads_arg > 1024) {
                fprintf(stderr, PROG ": --threads needs an integer in 1..1024\n");
                return 2;
            }
        }
        else if (!strcmp(a, "--bf-fraction")) {
            if (!has || parse_double(argv[++i], &bf_frac) || !(bf_frac > 0 && bf_frac <= 1)) {
                fprintf(stderr, PROG ": --bf-fraction needs a number in (0, 1]\n");
                return 2;
            }
        }
        else if (!strcmp(a, "--block-mib")) {
            if (!has || parse_double(argv[++i], &block_mib) || !(block_mib > 0 && block_mib <= 1048576)) {
                fprintf(stderr, PROG ": --block-mib needs a number of MiB > 0 (at most 1048576)\n");
                return 2;
            }
        }
        else if (!strcmp(a, "--json-out")) {
            if (!has || !argv[i + 1][0]) {
                fprintf(stderr, PROG ": --json-out needs a file name\n");
                return 2;
            }
            json_path = argv[++i];
        }
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, PROG ": unknown option %s (" PROG " --help)\n", a);
            return 2;
        }
        else if (path) {
            fprintf(stderr, PROG ": one FILE.qem only (got %s and %s)\n", path, a);
            return 2;
        }
        else
            path = a;
    }
    if (!path) {
        fprintf(stderr, PROG ": no FILE.qem given (usage: " PROG " FILE.qem [--threads T] "
                        "[--bf-fraction F] [--block-mib M] [--json-out FILE])\n");
        return 2;
    }
    const int nt = ssb_threads_resolve((int)threads_arg);
    const int cpus = ssb_threads_resolve(0);
    FILE *jf = NULL;
    if (json_path && !(jf = fopen(json_path, "a"))) {
        fprintf(stderr, PROG ": cannot open %s for appending: %s\n", json_path, strerror(errno));
        return 2;
    }

    results R;
    memset(&R, 0, sizeof R);
    ssb4d_err err = {0};
    char date[32];
    time_t tt = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&tt));

    /* 1. open: with body checksums (the handle kept for decoding), then without. */
    R.cached_before = cached_fraction(path);
    qem_file *q = NULL, *q0 = NULL;
    double t = now();
    ssb4d_status st = qem_open(path, 1, nt, &q, &err);
    R.open_verify_s = now() - t;
    if (st) {
        fprintf(stderr, PROG ": %s\n", err.msg[0] ? err.msg : ssb4d_status_name(st));
        if (jf)
            fclose(jf);
        return 2;
    }
    t = now();
    st = qem_open(path, 0, nt, &q0, &err);
    R.open_noverify_s = now() - t;
    if (st) {
        fprintf(stderr, PROG ": %s\n", err.msg[0] ? err.msg : ssb4d_status_name(st));
        qem_close(q);
        if (jf)
            fclose(jf);
        return 2;
    }
    qem_close(q0);

    const qem_info *in = qem_get_info(q);
    const size_t ny = in->shape[0], nx = in->shape[1], N = in->n_scans, P = in->n_pix;
    const uint8_t *valid = qem_valid_mask(q);
    int rc = 0;
    uint64_t *totals = malloc((P ? P : 1) * sizeof *totals);
    int32_t *bf = malloc((P ? P : 1) * sizeof *bf);
    float *block = NULL;
    uint16_t *slab = NULL;
    if (!totals || !bf) {
        fprintf(stderr, PROG ": out of memory\n");
        rc = 1;
        goto done;
    }

    /* 2. exact totals */
    t = now();
    st = qem_pixel_totals(q, totals, nt, &err);
    R.totals_s = now() - t;
    if (st) {
        fprintf(stderr, PROG ": pixel totals: %s\n", err.msg);
        rc = 1;
        goto done;
    }

    /* 3. BF set: valid pixels with total >= F * max (over valid pixels) */
    for (size_t k = 0; k < P; k++)
        if (valid[k]) {
            R.n_valid++;
            if (totals[k] > R.max_total)
                R.max_total = totals[k];
        }
    const double thr = bf_frac * (double)R.max_total;
    R.bf_threshold_counts = (uint64_t)ceil(thr);
    if (R.max_total > 0)
        for (size_t k = 0; k < P; k++)
            if (valid[k] && (double)totals[k] >= thr) {
                bf[R.n_bf++] = (int32_t)k;
                R.bf_expected += totals[k];
            }

    /* 4. all BF columns through ssb_qem_read_columns, blocks of scan rows as the G build cuts them */
    if (R.n_bf > 0 && ny > 0 && nx > 0) {
        size_t block_bytes = (size_t)(block_mib * 1048576.0);
        size_t row_bytes = R.n_bf * nx * sizeof(float);
        size_t rows = block_bytes / row_bytes;
        if (rows < 1)
            rows = 1;
        if (rows > ny)
            rows = ny;
        R.bf_rows_per_block = (double)rows;
        R.bf_buffer_bytes = rows * row_bytes;
        block = malloc(R.bf_buffer_bytes);
        if (!block) {
            fprintf(stderr, PROG ": cannot allocate the %zu-byte BF block buffer\n", R.bf_buffer_bytes);
            rc = 1;
            goto done;
        }
        size_t nblk = (ny + rows - 1) / rows;
        R.bf_blocks = (double)nblk;
        for (size_t b = 0; b < nblk; b++) {
            size_t row0 = b * rows, nrows = row0 + rows <= ny ? rows : ny - row0;
            t = now();
            st = ssb_qem_read_columns(q, bf, R.n_bf, row0, nrows, block, nt, &err);
            double dt = now() - t;
            R.bf_s += dt;
            if (b == 0) { /* includes the first touch of the fresh buffer (page faults) */
                R.bf_first_s = dt;
                R.bf_first_counts = (double)R.n_bf * (double)(nrows * nx);
            }
            if (st) {
                fprintf(stderr, PROG ": BF columns, scan rows %zu..%zu: %s\n", row0, row0 + nrows, err.msg);
                rc = 1;
                goto done;
            }
            const size_t nv = R.n_bf * nrows * nx;
            uint64_t sum = 0;
#pragma omp parallel for num_threads(nt) reduction(+ : sum) schedule(static)
            for (size_t i = 0; i < nv; i++)
                sum += (uint64_t)block[i];
            R.bf_checksum += sum;
        }
        R.bf_counts = (double)R.n_bf * (double)N;
        free(block);
        block = NULL;

        /* 4b. the same streams straight from qem_decode_block (uint16, no float output): the codec's
         * own speed on BF counts, to separate it from what read_columns adds */
        const size_t nb = in->n_blocks, ntask = R.n_bf * nb;
        uint64_t sum = 0;
        int bad = 0;
        t = now();
#pragma omp parallel for num_threads(nt) schedule(dynamic, 16) reduction(+ : sum) reduction(| : bad)
        for (size_t task = 0; task < ntask; task++) {
            uint16_t buf[512];
            size_t b = task % nb, t0, n;
            qem_block_range(q, b, &t0, &n);
            if (n > 512 || qem_decode_block(q, b, &bf[task / nb], 1, buf, NULL) != SSB4D_OK) {
                bad = 1;
                continue;
            }
            for (size_t j = 0; j < n; j++)
                sum += buf[j];
        }
        R.bf_raw_s = now() - t;
        R.bf_raw_checksum = sum;
        if (bad) {
            fprintf(stderr, PROG ": BF streams: qem_decode_block failed (the read_columns pass did not)\n");
            rc = 1;
            goto done;
        }
    }

    /* 5. full decode: qem_read_region over all detector pixels, slabs of whole scan rows */
    for (size_t k = 0; k < P; k++)
        R.full_expected += totals[k];
    if (N > 0 && P > 0) {
        size_t row_bytes = nx * P * sizeof(uint16_t);
        size_t rows = SLAB_BYTES / row_bytes;
        if (rows < 1)
            rows = 1;
        if (rows > ny)
            rows = ny;
        R.full_rows_per_slab = rows;
        R.full_buffer_bytes = rows * row_bytes;
        slab = malloc(R.full_buffer_bytes);
        if (!slab) {
            fprintf(stderr, PROG ": cannot allocate the %zu-byte decode slab\n", R.full_buffer_bytes);
            rc = 1;
            goto done;
        }
        R.full_slabs = (ny + rows - 1) / rows;
        for (size_t s = 0; s < R.full_slabs; s++) {
            size_t row0 = s * rows, nrows = row0 + rows <= ny ? rows : ny - row0;
            size_t lo[4] = {row0, 0, 0, 0}, hi[4] = {row0 + nrows, nx, in->shape[2], in->shape[3]};
            t = now();
            st = qem_read_region(q, lo, hi, slab, nt, &err);
            R.full_s += now() - t;
            if (st) {
                fprintf(stderr, PROG ": full decode, scan rows %zu..%zu: %s\n", row0, row0 + nrows, err.msg);
                rc = 1;
                goto done;
            }
            const size_t nv = nrows * nx * P;
            uint64_t sum = 0;
#pragma omp parallel for num_threads(nt) reduction(+ : sum) schedule(static)
            for (size_t i = 0; i < nv; i++)
                sum += slab[i];
            R.full_checksum += sum;
        }
        R.full_counts = (double)N * (double)P;
        free(slab);
        slab = NULL;
    }
    R.hwm_bytes = vm_hwm();

    /* ---- report ---- */
    const int bf_ok = R.bf_checksum == R.bf_expected && R.bf_raw_checksum == R.bf_expected;
    const int full_ok = R.full_checksum == R.full_expected;
    const double MiB = 1048576.0;
    printf("ssb4d qem bench: %s\n", path);
    printf("  date %s, threads %d (of %d online cores)\n", date, nt, cpus);
    printf("  shape %zu x %zu x %zu x %zu (uint%d), %zu scans x %zu pixels, %zu chunks, %zu blocks\n",
           in->shape[0], in->shape[1], in->shape[2], in->shape[3], 8 * in->dtype_bytes, N, P,
           in->n_chunks, in->n_blocks);
    printf("  file %zu bytes (header %zu, body %zu, payload %zu); %.3f bits/count; %.2fx smaller than uint16\n",
           in->file_bytes, in->header_bytes, in->body_bytes, in->payload_bytes,
           N && P ? 8.0 * (double)in->payload_bytes / ((double)N * (double)P) : 0.0,
           in->file_bytes ? 2.0 * (double)N * (double)P / (double)in->file_bytes : 0.0);
    if (R.cached_before >= 0)
        printf("  page cache before the first open: %.1f %% of the file\n", 100 * R.cached_before);
    printf("\n  %-34s %10s %12s %10s %12s\n", "step", "seconds", "Mcounts", "Mcounts/s", "MB/s (u16)");
    printf("  %-34s %10.4f %12s %10s %12.1f\n", "open, verify_body=1 (SHA-256)", R.open_verify_s, "-", "-",
           per_s((double)in->file_bytes / 1e6, R.open_verify_s));
    printf("  %-34s %10.4f %12s %10s %12s\n", "open, verify_body=0", R.open_noverify_s, "-", "-", "-");
    printf("  %-34s %10.4f %12.2f %10.1f %12.1f\n", "pixel totals (all streams)", R.totals_s,
           (double)N * (double)P / 1e6, per_s((double)N * (double)P / 1e6, R.totals_s),
           per_s(2.0 * (double)N * (double)P / 1e6, R.totals_s));
    if (R.n_bf > 0)
        printf("  %-34s %10.4f %12.2f %10.1f %12.1f\n", "BF columns (read_columns)", R.bf_s, R.bf_counts / 1e6,
               per_s(R.bf_counts / 1e6, R.bf_s), per_s(2.0 * R.bf_counts / 1e6, R.bf_s));
    if (R.n_bf > 0 && R.bf_blocks > 1)
        printf("  %-34s %10.4f %12.2f %10.1f %12.1f\n", "  blocks after the first", R.bf_s - R.bf_first_s,
               (R.bf_counts - R.bf_first_counts) / 1e6,
               per_s((R.bf_counts - R.bf_first_counts) / 1e6, R.bf_s - R.bf_first_s),
               per_s(2.0 * (R.bf_counts - R.bf_first_counts) / 1e6, R.bf_s - R.bf_first_s));
    if (R.n_bf > 0)
        printf("  %-34s %10.4f %12.2f %10.1f %12.1f\n", "  same streams, qem_decode_block", R.bf_raw_s,
               R.bf_counts / 1e6, per_s(R.bf_counts / 1e6, R.bf_raw_s), per_s(2.0 * R.bf_counts / 1e6, R.bf_raw_s));
    else
        printf("  %-34s %10s  (no BF pixels: every valid total is 0)\n", "BF columns (read_columns)", "-");
    printf("  %-34s %10.4f %12.2f %10.1f %12.1f\n", "full decode (read_region)", R.full_s, R.full_counts / 1e6,
           per_s(R.full_counts / 1e6, R.full_s), per_s(2.0 * R.full_counts / 1e6, R.full_s));
    printf("  (open MB/s: file bytes checked per second; the first BF block also pays for the first touch\n"
           "   of its freshly allocated buffer)\n\n");
    printf("  BF set: %zu of %zu valid pixels (%zu flagged) with total >= %g x max total %llu\n", R.n_bf, R.n_valid,
           P - R.n_valid, bf_frac, (unsigned long long)R.max_total);
    if (R.n_bf > 0)
        printf("  BF blocks: %.0f of %.0f scan rows (--block-mib %g), buffer %.2f MiB; checksum %llu %s\n",
               R.bf_blocks, R.bf_rows_per_block, block_mib, (double)R.bf_buffer_bytes / MiB,
               (unsigned long long)R.bf_checksum, bf_ok ? "= sum of BF totals" : "!= SUM OF BF TOTALS");
    printf("  full slabs: %zu of %zu scan rows, buffer %.2f MiB; checksum %llu %s\n", R.full_slabs,
           R.full_rows_per_slab, (double)R.full_buffer_bytes / MiB, (unsigned long long)R.full_checksum,
           full_ok ? "= sum of totals" : "!= SUM OF TOTALS");
    if (R.hwm_bytes)
        printf("  process peak RSS (VmHWM, includes the mapped file pages touched): %.1f MiB\n",
               (double)R.hwm_bytes / MiB);
    if (!bf_ok || !full_ok) {
        fprintf(stderr, PROG ": decoded counts disagree with qem_pixel_totals (%s)\n",
                !bf_ok ? "BF columns" : "full decode");
        rc = 1;
    }

    if (jf) {
        char git[64];
        git_rev(git, sizeof git);
        fprintf(jf, "{\"bench\":\"qem\",\"date\":\"%s\",\"git\":", date);
        if (git[0])
            json_str(jf, git);
        else
            fputs("null", jf);
        fputs(",\"file\":", jf);
        json_str(jf, path);
        fprintf(jf, ",\"threads\":%d,\"cpus\":%d,\"shape\":[%zu,%zu,%zu,%zu],\"dtype_bytes\":%d,"
                    "\"n_scans\":%zu,\"n_pix\":%zu,\"n_chunks\":%zu,\"n_blocks\":%zu,"
                    "\"file_bytes\":%zu,\"header_bytes\":%zu,\"body_bytes\":%zu,\"payload_bytes\":%zu,",
                nt, cpus, in->shape[0], in->shape[1], in->shape[2], in->shape[3], in->dtype_bytes, N, P,
                in->n_chunks, in->n_blocks, in->file_bytes, in->header_bytes, in->body_bytes, in->payload_bytes);
        json_num(jf, "page_cache_fraction_before_open", R.cached_before >= 0 ? R.cached_before : NAN, 1);
        json_num(jf, "open_verify_s", R.open_verify_s, 1);
        json_num(jf, "open_noverify_s", R.open_noverify_s, 1);
        json_num(jf, "open_verify_MB_per_s", per_s((double)in->file_bytes / 1e6, R.open_verify_s), 1);
        json_num(jf, "totals_s", R.totals_s, 1);
        json_num(jf, "totals_Mcounts_per_s", per_s((double)N * (double)P / 1e6, R.totals_s), 1);
        json_num(jf, "totals_MB_per_s", per_s(2.0 * (double)N * (double)P / 1e6, R.totals_s), 1);
        json_num(jf, "bf_fraction", bf_frac, 1);
        fprintf(jf, "\"n_valid\":%zu,\"max_total\":%llu,\"n_bf\":%zu,", R.n_valid,
                (unsigned long long)R.max_total, R.n_bf);
        json_num(jf, "block_mib", block_mib, 1);
        fprintf(jf, "\"bf_rows_per_block\":%.0f,\"bf_blocks\":%.0f,\"bf_buffer_bytes\":%zu,", R.bf_rows_per_block,
                R.bf_blocks, R.bf_buffer_bytes);
        json_num(jf, "bf_s", R.n_bf ? R.bf_s : NAN, 1);
        fprintf(jf, "\"bf_counts\":%.0f,", R.bf_counts);
        json_num(jf, "bf_Mcounts_per_s", R.n_bf ? per_s(R.bf_counts / 1e6, R.bf_s) : NAN, 1);
        json_num(jf, "bf_MB_per_s", R.n_bf ? per_s(2.0 * R.bf_counts / 1e6, R.bf_s) : NAN, 1);
        fprintf(jf, "\"bf_checksum\":%llu,\"bf_checksum_ok\":%s,", (unsigned long long)R.bf_checksum,
                bf_ok ? "true" : "false");
        json_num(jf, "bf_first_block_s", R.n_bf ? R.bf_first_s : NAN, 1);
        fprintf(jf, "\"bf_first_block_counts\":%.0f,", R.bf_first_counts);
        json_num(jf, "bf_decode_block_s", R.n_bf ? R.bf_raw_s : NAN, 1);
        json_num(jf, "bf_decode_block_Mcounts_per_s", R.n_bf ? per_s(R.bf_counts / 1e6, R.bf_raw_s) : NAN, 1);
        fprintf(jf, "\"full_rows_per_slab\":%zu,\"full_slabs\":%zu,\"full_buffer_bytes\":%zu,", R.full_rows_per_slab,
                R.full_slabs, R.full_buffer_bytes);
        json_num(jf, "full_s", R.full_s, 1);
        fprintf(jf, "\"full_counts\":%.0f,", R.full_counts);
        json_num(jf, "full_Mcounts_per_s", per_s(R.full_counts / 1e6, R.full_s), 1);
        json_num(jf, "full_MB_per_s", per_s(2.0 * R.full_counts / 1e6, R.full_s), 1);
        fprintf(jf, "\"full_checksum\":%llu,\"full_checksum_ok\":%s,\"vm_hwm_bytes\":%zu}\n",
                (unsigned long long)R.full_checksum, full_ok ? "true" : "false", R.hwm_bytes);
        if (fclose(jf) != 0) {
            fprintf(stderr, PROG ": could not write %s: %s\n", json_path, strerror(errno));
            rc = rc ? rc : 1;
        }
        jf = NULL;
    }

done:
    free(block);
    free(slab);
    free(totals);
    free(bf);
    qem_close(q);
    if (jf)
        fclose(jf);
    return rc;
}
