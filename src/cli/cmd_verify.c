/* cmd_verify.c — `ssb4d verify ORIGINAL FILE.qem`: compares every count of an encoded
 * acquisition with the original it was imported from, block of scan rows by block, and exits
 * non-zero on any difference. */
#include "cli/cli_common.h"
#include "cli/cli_job.h"
#include "cli/cli_input.h"
#include "cli/commands.h"
#include "cli/progress.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "verify"
#define CLI_EXIT_DIFFER 3
#define VERIFY_BLOCK_BYTES ((size_t)32 << 20) /* original frames (uint32) per comparison */
#define MAX_LISTED 10

static void help(FILE *f)
{
    fprintf(f,
            "usage: ssb4d verify ORIGINAL FILE.qem [options]\n\n"
            "Decodes FILE.qem (body checksums, spatial index and every stream checked) and compares\n"
            "every count with ORIGINAL, read as `ssb4d import` reads it. The counts of flagged\n"
            "pixels that the import replaced (--hot-pixels median or zero, recorded in the file)\n"
            "are not the original's on purpose: they are counted and not compared, unless --strict.\n\n"
            "  --strict              compare the replaced flagged pixels too; their differences are\n"
            "                        marked as replaced at import, and exit 3 as any difference\n"
            "  --threads N           decoder threads (default: all cores)\n"
            "%s"
            "                        it counts the blocks of scan rows compared at a time (6 bytes\n"
            "                        per count, at most 48 MiB; fewer rows under a small budget),\n"
            "                        9 bytes per detector pixel and the spatial index check's scratch\n"
            "                        (about 34 bytes per pixel per thread; fewer threads if need be)\n"
            "  --json                print one JSON result object on stdout\n"
            CLI_QUIET_HELP
            "  -h, --help            this help\n\n%s\n"
            "A missing or unreadable file is reported first, before FILE.qem is checked.\n"
            CLI_EXIT_HELP_BEGIN ";\n"
            "3 a count or the shape differs (the first differences are listed on stderr).\n",
            CLI_MEMORY_HELP, CLI_INPUT_HELP);
}

enum { OPT_STRICT = CLI_OPT_FIRST_FREE };

/* The flagged pixels whose stored values the import changed on purpose, as recorded in the
 * .qem, for the messages (so a replaced pixel is never mistaken for damage). "" when none. */
static void replaced_what(const ssb4d_qem_flags *h, char *out, size_t n)
{
    if (h->replaced)
        snprintf(out, n, "the %zu flagged pixel%s whose counts the import replaced (%s%s, recorded in "
                 "the file)", h->replaced_pixels, h->replaced_pixels == 1 ? "" : "s",
                 h->policy ? "--hot-pixels " : "", /* other writers record a method, not a policy */
                 h->policy ? h->policy : h->method ? h->method : "method not recorded");
    else if (h->markers_zeroed)
        snprintf(out, n, "the flagged pixels whose %zu marker value%s the import stored as 0 (recorded "
                 "in the file)", h->markers_zeroed, h->markers_zeroed == 1 ? "" : "s");
    else
        out[0] = 0;
}

int cmd_verify(int argc, char **argv)
{
    static const struct option opts[] = {CLI_INPUT_OPTIONS,
                                         {"strict", no_argument, 0, OPT_STRICT},
                                         {"threads", required_argument, 0, CLI_OPT_THREADS},
                                         {"memory", required_argument, 0, CLI_OPT_MEMORY},
                                         {"json", no_argument, 0, CLI_OPT_JSON},
                                         {"quiet", no_argument, 0, 'q'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_micro m;
    cli_micro_init(&m);
    cli_input ci;
    memset(&ci, 0, sizeof ci);
    int strict = 0, quiet = 0;
    optind = 1;
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, ":hq", opts, NULL)) != -1) {
        if (opt == 'h') {
            help(stdout);
            return CLI_EXIT_OK;
        }
        if (opt == 'q' || opt == OPT_STRICT) {
            *(opt == 'q' ? &quiet : &strict) = 1;
            continue;
        }
        if (opt == '?' || opt == ':') {
            char msg[256];
            const char *what = argv[optind - 1];
            snprintf(msg, sizeof msg, "%s %s (try ssb4d verify --help)",
                     opt == ':' ? "missing value for" : "unknown option", what ? what : "");
            return cli_error(CMD, SSB4D_EINVAL, msg);
        }
        int h = cli_input_handle(&ci, CMD, opt, optarg);
        if (h == 0)
            h = cli_micro_handle(&m, opt, optarg);
        if (h <= 0)
            return CLI_EXIT_USAGE;
    }
    if (argc - optind != 2)
        return cli_error(CMD, SSB4D_EINVAL,
                         "two files expected (usage: ssb4d verify ORIGINAL FILE.qem)");
    if (cli_input_check(&ci, CMD))
        return CLI_EXIT_USAGE;
    const char *orig = argv[optind], *path = argv[optind + 1];
    /* Both files first, in the order given: checking FILE.qem reads all of it, which must not
     * come before learning that ORIGINAL is missing. */
    cli_input as_qem; /* FILE.qem: by its header, whatever the flags say of ORIGINAL */
    memset(&as_qem, 0, sizeof as_qem);
    if (cli_check_readable_file(CMD, orig) || cli_check_readable_file(CMD, path) ||
        cli_input_check_files(&ci, CMD, &orig, 1, 0) || cli_input_check_files(&as_qem, CMD, &path, 1, 1))
        return CLI_EXIT_USAGE;

    ssb4d_err err = {0};
    ssb4d_reader_opts ro;
    cli_input_reader_opts(&ci, &ro);
    ssb4d_qem *q = NULL;
    ssb4d_status st;
    if ((st = ssb4d_qem_open(path, 1, m.threads, &q, &err)))
        return cli_error(CMD, st, err.msg);
    /* Within the budget: the .qem's per-pixel arrays (valid mask, two field maps), the spatial
     * index check's scratch, then the comparison blocks. The mapped files are read through. */
    ssb4d_qem_info info;
    ssb4d_qem_get_info(q, &info);
    const ssb4d_qem_info *in = &info;
    size_t budget = cli_memory_budget(&m), per_pixel = in->n_pix * (1 + 2 * sizeof(uint32_t));
    int nt = cli_qem_check_threads(CMD, q, m.threads, budget, per_pixel);
    if (!nt) {
        ssb4d_qem_close(q);
        return CLI_EXIT_USAGE;
    }
    if ((st = ssb4d_qem_check_index(q, nt, &err))) {
        ssb4d_qem_close(q);
        return cli_error(CMD, st, err.msg);
    }
    ssb4d_reader *fs = NULL;
    if ((st = ssb4d_reader_open(orig, &ro, &fs, &err))) {
        ssb4d_qem_close(q);
        return cli_error(CMD, st, err.msg);
    }
    size_t shape[4];
    ssb4d_reader_shape(fs, shape);
    if (memcmp(shape, in->shape, sizeof shape) != 0) {
        fprintf(stderr, "ssb4d verify: shapes differ: %s is %zux%zux%zux%zu, %s is %zux%zux%zux%zu\n",
                orig, shape[0], shape[1], shape[2], shape[3], path, in->shape[0], in->shape[1],
                in->shape[2], in->shape[3]);
        ssb4d_reader_close(fs);
        ssb4d_qem_close(q);
        return CLI_EXIT_DIFFER;
    }
    const uint8_t *valid = ssb4d_qem_valid_mask(q);
    ssb4d_qem_flags fh;
    ssb4d_qem_flags_of(q, &fh);
    char replaced[256];
    replaced_what(&fh, replaced, sizeof replaced);
    int changed = replaced[0] != 0; /* flagged pixels' values differ from the source on purpose */
    char policy[32]; /* fh's strings live in q's header, closed before the report */
    snprintf(policy, sizeof policy, "%s", fh.policy ? fh.policy : "");
    int skip_flagged = !strict && changed;
    size_t rows = shape[0], cols = shape[1], P = shape[2] * shape[3];
    size_t frame = cols * P; /* one scan row */
    /* Rows per block: 32 MiB of original counts, fewer when the budget is smaller (any block
     * size compares the same counts in the same order). */
    size_t row_bytes = frame * (sizeof(uint32_t) + sizeof(uint16_t));
    size_t room = budget > per_pixel ? budget - per_pixel : 0;
    size_t step = VERIFY_BLOCK_BYTES / (frame * sizeof(uint32_t));
    step = step < 1 ? 1 : step; /* at least one row, whatever its size */
    if (step * row_bytes > room)
        step = room / row_bytes;
    step = step > rows ? rows : step;
    if (step < 1) {
        char b[2][32];
        size_t need = per_pixel + row_bytes, big = budget > need ? budget : need;
        fprintf(stderr, "ssb4d verify: the job does not fit in %s: comparing one scan row needs %s\n",
                ssb4d_size_text(b[0], budget, big, 0), ssb4d_size_text(b[1], need, big, 1));
        ssb4d_reader_close(fs);
        ssb4d_qem_close(q);
        return CLI_EXIT_USAGE;
    }
    ssb4d_mem *mem = ssb4d_mem_create(room);
    uint32_t *a = mem ? ssb4d_mem_alloc(mem, step * frame * sizeof *a, "the original block", &err) : NULL;
    uint16_t *b = a ? ssb4d_mem_alloc(mem, step * frame * sizeof *b, "the decoded block", &err) : NULL;
    if (!a || !b) {
        ssb4d_mem_free(mem, a, 0);
        ssb4d_mem_destroy(mem);
        ssb4d_reader_close(fs);
        ssb4d_qem_close(q);
        return mem ? cli_job_error(CMD, err.code, err.msg, budget) : cli_error(CMD, SSB4D_ENOMEM, "out of memory");
    }
    cli_progress pb;
    cli_progress_start(&pb, "verify", quiet || m.json);
    cli_progress_set_rate(&pb, (double)(rows * frame * (size_t)in->dtype_bytes) / 1048576.0, "MiB");
    size_t n_diff = 0, n_compared = 0, n_skipped = 0, n_diff_replaced = 0;
    for (size_t r0 = 0; r0 < rows && !st; r0 += step) {
        size_t nr = rows - r0 < step ? rows - r0 : step;
        size_t lo[4] = {r0, 0, 0, 0}, hi[4] = {r0 + nr, cols, shape[2], shape[3]};
        if ((st = ssb4d_reader_read(fs, r0 * cols, nr * cols, a, &err)) ||
            (st = ssb4d_qem_read_region(q, lo, hi, b, m.threads, &err)))
            break;
        for (size_t t = 0; t < nr * cols; t++)
            for (size_t k = 0; k < P; k++) {
                if (skip_flagged && !valid[k]) {
                    n_skipped++;
                    continue;
                }
                n_compared++;
                uint32_t x = a[t * P + k], y = b[t * P + k];
                if (x == y)
                    continue;
                /* With --strict, a replaced flagged pixel's difference is expected: said so. */
                int expected = changed && !valid[k];
                n_diff_replaced += expected;
                if (n_diff++ < MAX_LISTED && !m.json) {
                    size_t s = r0 * cols + t;
                    fprintf(stderr, "ssb4d verify: scan (%zu, %zu) pixel (%zu, %zu): original %u, %s %u%s\n",
                            s / cols, s % cols, k / shape[3], k % shape[3], x, path, y,
                            expected ? " (a flagged pixel replaced at import)" : "");
                }
            }
        cli_progress_update(&pb, (double)(r0 + nr) / (double)rows);
    }
    cli_progress_done(&pb);
    ssb4d_mem_free(mem, a, 0);
    ssb4d_mem_free(mem, b, 0);
    ssb4d_mem_destroy(mem);
    ssb4d_reader_close(fs);
    ssb4d_qem_close(q);
    if (st)
        return cli_error(CMD, st, err.msg);
    if (m.json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "original", orig);
        cJSON_AddStringToObject(o, "file", path);
        cJSON_AddBoolToObject(o, "identical", n_diff == 0);
        cJSON_AddNumberToObject(o, "compared", (double)n_compared);
        cJSON_AddNumberToObject(o, "differences", (double)n_diff);
        cJSON_AddNumberToObject(o, "skipped_replaced", (double)n_skipped);
        /* What the import recorded about flagged pixels, and the differences it explains. */
        cJSON_AddItemToObject(o, "hot_pixels", policy[0] ? cJSON_CreateString(policy) : cJSON_CreateNull());
        cJSON_AddBoolToObject(o, "flagged_values_changed_at_import", changed);
        cJSON_AddNumberToObject(o, "differences_in_replaced", (double)n_diff_replaced);
        char *s = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (s)
            puts(s);
        free(s);
    } else if (n_diff && n_diff == n_diff_replaced) {
        /* --strict on a file whose flagged pixels were replaced: not damage, the import's step. */
        printf("ssb4d verify: %zu of %zu counts differ between %s and %s, all in %s; every other count "
               "is identical\n", n_diff, n_compared, orig, path, replaced);
    } else if (n_diff) {
        printf("ssb4d verify: %zu of %zu counts DIFFER between %s and %s", n_diff, n_compared, orig, path);
        if (n_diff_replaced)
            printf(" (%zu of them in %s)", n_diff_replaced, replaced);
        printf("\n");
    } else if (n_skipped) {
        printf("ssb4d verify: %s and %s are identical in every compared count (%zu); %zu values of %s "
               "were not compared (--strict compares them)\n", orig, path, n_compared, n_skipped, replaced);
    } else {
        printf("ssb4d verify: %s and %s are identical: %zu counts compared\n", orig, path, n_compared);
    }
    return n_diff ? CLI_EXIT_DIFFER : CLI_EXIT_OK;
}
