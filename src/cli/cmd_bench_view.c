/* cmd_bench_view.c — `ssb4d bench view`: what a person feels in the viewer, measured the way they
 * feel it: a real `ssb4d view DATA` (this binary, started as a child on an ephemeral port), then
 * drag previews (the drag subset, native sampling) and releases (all BF pixels, the exact loss,
 * native sampling) timed from the request sent to the image's last byte received over HTTP. The
 * first of each kind warms up and is not counted; every request has a new C10 (no cache answers). */
#include "bench/record.h"
#include "common/clock.h"
#include "cli/cli_common.h"
#include "cli/cli_session.h"
#include "cli/cmd_bench_view.h"
#include "common/atomic.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static void help(FILE *f)
{
    fprintf(f,
            "usage: ssb4d bench view (--workload NAME | --data FILE) [options]\n\n"
            "Starts ssb4d view on the data (127.0.0.1, an ephemeral port), waits for its fit, then times\n"
            "the viewer's round trips over HTTP, from the request sent to the image received: drag\n"
            "previews (every floor(N/subset)-th BF pixel, native sampling) and releases (all BF pixels\n"
            "and the exact loss, native sampling). Prints median, min and max of each (and the server's\n"
            "own time); -o writes them as JSON (schema ssb4d-bench-view/1).\n\n"
            "  --workload NAME       tiny, small, medium or reference (as bench run: simulated into the\n"
            "                        cache when missing)\n"
            "  --data FILE           use FILE (a .qem or .npy with its sidecar) instead\n"
            "  --cache DIR           where workloads live (default $SSB4D_BENCH_DATA, else ./bench-data)\n"
            "  --drags N             drag previews timed (default 20)\n"
            "  --releases N          releases timed (default 3)\n"
            "  --subset N            BF pixels of a drag preview (default 256)\n"
            CLI_MEMORY_HELP
            CLI_BACKEND_HELP
            "  -o, --output FILE     the JSON record\n"
            "  --force               replace FILE if it exists\n"
            CLI_QUIET_HELP
            "  -h, --help            this help\n\n" CLI_EXIT_HELP);
}

/* One HTTP/1.1 request with Connection: close; the whole answer read. 0, or -1 (errno-ish). */
typedef struct {
    int status;
    char *body;        /* points into raw */
    size_t body_len;
    double server_s;   /* X-Seconds, NaN when absent */
    char *raw;
} http_answer;

static int http(int port, const char *token, const char *method, const char *path, const char *body, http_answer *a)
{
    memset(a, 0, sizeof *a);
    a->server_s = NAN;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        close(fd);
        return -1;
    }
    size_t blen = body ? strlen(body) : 0;
    char head[512];
    int hl = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-SSB4D-Token: %s\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      method, path, port, token, blen);
    if (write(fd, head, (size_t)hl) != hl || (blen && write(fd, body, blen) != (ssize_t)blen)) {
        close(fd);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (!buf) {
            close(fd);
            return -1;
        }
        if (n == cap) {
            char *b = realloc(buf, 2 * cap + 1);
            if (!b) {
                free(buf);
                buf = NULL;
                continue;
            }
            buf = b, cap *= 2;
        }
        ssize_t k = read(fd, buf + n, cap - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    close(fd);
    buf[n] = 0;
    a->raw = buf;
    char *end = strstr(buf, "\r\n\r\n");
    if (!end || sscanf(buf, "HTTP/1.%*d %d", &a->status) != 1)
        return -1;
    *end = 0;
    const char *xs = strstr(buf, "\r\nX-Seconds: ");
    if (xs)
        a->server_s = strtod(xs + 13, NULL);
    a->body = end + 4;
    a->body_len = n - (size_t)(end + 4 - buf);
    return 0;
}

typedef struct {
    size_t n;
    double med_ms, min_ms, max_ms, server_med_ms;
} timing;

static cJSON *timing_json(const timing *t)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "n", (double)t->n);
    cJSON_AddNumberToObject(o, "median_ms", t->med_ms);
    cJSON_AddNumberToObject(o, "min_ms", t->min_ms);
    cJSON_AddNumberToObject(o, "max_ms", t->max_ms);
    cJSON_AddNumberToObject(o, "server_median_ms", t->server_med_ms);
    return o;
}

/* Times `count` previews (after one warm-up) of one kind; 0 or exit code. */
static int time_kind(int port, const char *token, double c10, int *seq, size_t count, size_t subset, int release,
                     timing *t)
{
    double *rt = calloc(count ? count : 1, sizeof *rt), *sv = calloc(count ? count : 1, sizeof *sv);
    if (!rt || !sv) {
        free(rt), free(sv);
        return cli_error("bench view", SSB4D_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i <= count; i++) {
        ++*seq;
        char body[256];
        snprintf(body, sizeof body, "{\"C10_nm\": %.6f, \"upsample\": 1, \"subset\": %zu, \"want_loss\": %s, \"seq\": %d}",
                 c10 + 0.05 * *seq, release ? (size_t)0 : subset, release ? "true" : "false", *seq);
        http_answer a;
        double t0 = ssb_clock_s();
        int bad = http(port, token, "POST", "/api/preview", body, &a);
        double dt = ssb_clock_s() - t0;
        if (bad || a.status != 200) {
            fprintf(stderr, "ssb4d bench view: preview failed (HTTP %d): %.200s\n", a.status, a.body ? a.body : "");
            free(a.raw), free(rt), free(sv);
            return CLI_EXIT_INTERNAL;
        }
        if (i)
            rt[i - 1] = 1000 * dt, sv[i - 1] = 1000 * a.server_s;
        free(a.raw);
    }
    t->n = count;
    double lo, hi;
    int bad_stats = count && (bench_stats(rt, count, &t->med_ms, &t->min_ms, &t->max_ms) ||
                              bench_stats(sv, count, &t->server_med_ms, &lo, &hi));
    free(rt), free(sv);
    if (bad_stats) {
        fprintf(stderr, "ssb4d bench view: out of memory\n");
        return CLI_EXIT_INTERNAL;
    }
    return 0;
}

int bench_view(int argc, char **argv, bench_resolve_fn resolve)
{
    enum { O_WORKLOAD = CLI_OPT_FIRST_FREE, O_DATA, O_CACHE, O_DRAGS, O_RELEASES, O_SUBSET, O_FORCE };
    static const struct option opts[] = {
        {"workload", required_argument, 0, O_WORKLOAD}, {"data", required_argument, 0, O_DATA},
        {"cache", required_argument, 0, O_CACHE},       {"drags", required_argument, 0, O_DRAGS},
        {"releases", required_argument, 0, O_RELEASES}, {"subset", required_argument, 0, O_SUBSET},
        {"memory", required_argument, 0, CLI_OPT_MEMORY}, {"output", required_argument, 0, 'o'},
        {"force", no_argument, 0, O_FORCE},             {"quiet", no_argument, 0, 'q'},
        CLI_BACKEND_OPTION,
        {"help", no_argument, 0, 'h'},                  {0, 0, 0, 0},
    };
    const char *name = NULL, *data = NULL, *cache = NULL, *out = NULL, *memory = NULL;
    ssb4d_backend_kind backend = SSB4D_BACKEND_AUTO;
    long drags = 20, releases = 3, subset = 256;
    int force = 0, quiet = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:hq", opts, NULL)) != -1) {
        char *e;
        long *dst = c == O_DRAGS ? &drags : c == O_RELEASES ? &releases : c == O_SUBSET ? &subset : NULL;
        if (dst) {
            long v = strtol(optarg, &e, 10);
            if (e == optarg || *e || v < (c == O_SUBSET ? 0 : 1) || v > 100000) {
                fprintf(stderr, "ssb4d bench view: invalid value '%s' for %s\n", optarg, argv[optind - 1]);
                return CLI_EXIT_USAGE;
            }
            *dst = v;
            continue;
        }
        switch (c) {
        case O_WORKLOAD: name = optarg; break;
        case O_DATA: data = optarg; break;
        case O_CACHE: cache = optarg; break;
        case CLI_OPT_MEMORY: {
            size_t b;
            if (cli_parse_memory(optarg, &b))
                return CLI_EXIT_USAGE;
            memory = optarg;
            break;
        }
        case CLI_OPT_BACKEND:
            if (cli_parse_backend(optarg, &backend))
                return CLI_EXIT_USAGE;
            break;
        case 'o': out = optarg; break;
        case O_FORCE: force = 1; break;
        case 'q': quiet = 1; break;
        case 'h': help(stdout); return CLI_EXIT_OK;
        default:
            fprintf(stderr, "ssb4d bench view: %s '%s' (see ssb4d bench view --help)\n",
                    c == ':' ? "missing value for" : "unknown option", argv[optind - 1]);
            return CLI_EXIT_USAGE;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "ssb4d bench view: unexpected argument '%s' (see --help)\n", argv[optind]);
        return CLI_EXIT_USAGE;
    }
    char path[4096];
    int rc = 0;
    if (data && (rc = resolve("view", name, data, cache, quiet, path, sizeof path)))
        return rc;
    if (out && (rc = cli_check_output("bench view", out, force, "")))
        return rc;
    /* A backend that cannot run here is said here, before a workload is simulated or the server
     * started (the server would say it too, then not start). */
    if ((rc = cli_backend_check("bench view", backend, NULL)))
        return rc;
    if (!data && (rc = resolve("view", name, data, cache, quiet, path, sizeof path)))
        return rc;

    /* The server: this very binary, `view PATH --port 0 -q`, its URL read from a pipe. */
    int pfd[2];
    if (pipe(pfd))
        return cli_error("bench view", SSB4D_EIO, "pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawn_file_actions_addclose(&fa, pfd[0]);
    char *args[12] = {"ssb4d", "view", path, "--port", "0", "-q", "--backend", (char *)cli_backend_kind_name(backend)};
    int na = 8;
    if (memory) {
        args[na++] = "--memory";
        args[na++] = (char *)memory;
    }
    args[na] = NULL;
    pid_t pid;
    int se = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    if (se) {
        close(pfd[0]);
        return cli_error("bench view", SSB4D_EIO, "cannot start ssb4d view");
    }
    FILE *fp = fdopen(pfd[0], "r");
    char line[256] = {0}, token[64] = {0};
    int port = 0;
    if (!fp || !fgets(line, sizeof line, fp) || sscanf(line, "ssb4d view: http://127.0.0.1:%d/?token=%63s", &port, token) != 2) {
        fprintf(stderr, "ssb4d bench view: the server did not start\n");
        if (fp)
            fclose(fp);
        else
            close(pfd[0]);
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        return CLI_EXIT_USAGE;
    }
    double t0 = ssb_clock_s(), c10 = 0, ready_s = 0;
    size_t n_bf = 0, shape[4] = {0};
    char backend_name[16] = "";
    for (;;) { /* until calibrated and fitted */
        http_answer a;
        int bad = http(port, token, "GET", "/api/state", NULL, &a);
        cJSON *s = bad ? NULL : cJSON_Parse(a.body);
        free(a.raw);
        if (!s) {
            rc = cli_error("bench view", SSB4D_EIO, "the server does not answer");
            break;
        }
        const cJSON *job = cJSON_GetObjectItem(s, "job");
        int ready = cJSON_IsTrue(cJSON_GetObjectItem(s, "ready")) && !cJSON_IsTrue(cJSON_GetObjectItem(job, "busy"));
        if (ready) {
            const char *e = cJSON_GetStringValue(cJSON_GetObjectItem(s, "error"));
            if (e && *e) {
                fprintf(stderr, "ssb4d bench view: %s\n", e);
                rc = CLI_EXIT_USAGE;
            }
            c10 = cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(s, "current"), "C10_nm"));
            n_bf = (size_t)cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(s, "calibration"), "n_bf"));
            for (int k = 0; k < 4; k++)
                shape[k] = (size_t)cJSON_GetNumberValue(cJSON_GetArrayItem(cJSON_GetObjectItem(s, "shape"), k));
            ready_s = ssb_clock_s() - t0;
            const char *b = cJSON_GetStringValue(cJSON_GetObjectItem(s, "backend"));
            snprintf(backend_name, sizeof backend_name, "%s", b ? b : "");
        }
        cJSON_Delete(s);
        if (ready)
            break;
        usleep(200000);
    }
    timing drag = {0}, rel = {0};
    int seq = 0;
    if (!rc)
        rc = time_kind(port, token, c10, &seq, (size_t)drags, (size_t)subset, 0, &drag);
    if (!rc)
        rc = time_kind(port, token, c10, &seq, (size_t)releases, 0, 1, &rel);
    kill(pid, SIGTERM);
    int ws = 0;
    waitpid(pid, &ws, 0);
    fclose(fp);
    if (rc)
        return rc;
    printf("viewer round trips: %s, %zux%zu scan, %zux%zu detector, %zu BF pixels; ready after %.1f s\n", path,
           shape[0], shape[1], shape[2], shape[3], n_bf, ready_s);
    printf("  drag     (subset %ld) n=%-3zu median %8.1f ms  min %8.1f  max %8.1f  (server %8.1f ms)\n", subset, drag.n,
           drag.med_ms, drag.min_ms, drag.max_ms, drag.server_med_ms);
    printf("  release  (all BF, loss) n=%-3zu median %8.1f ms  min %8.1f  max %8.1f  (server %8.1f ms)\n", rel.n,
           rel.med_ms, rel.min_ms, rel.max_ms, rel.server_med_ms);
    printf("  backend  %s\n", backend_name);
    if (out) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "schema", "ssb4d-bench-view/1");
        cJSON_AddStringToObject(j, "data", path);
        cJSON *sh = cJSON_AddArrayToObject(j, "shape");
        for (int k = 0; k < 4; k++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)shape[k]));
        cJSON_AddNumberToObject(j, "n_bf", (double)n_bf);
        cJSON_AddNumberToObject(j, "subset", (double)subset);
        cJSON_AddNumberToObject(j, "ready_s", ready_s);
        cJSON_AddStringToObject(j, "backend", backend_name);
        cJSON_AddItemToObject(j, "drag", timing_json(&drag));
        cJSON_AddItemToObject(j, "release", timing_json(&rel));
        char *txt = cJSON_Print(j);
        cJSON_Delete(j);
        ssb4d_err err = {0};
        ssb4d_status st = txt ? ssb4d_write_text_atomic(out, txt, &err) : SSB4D_ENOMEM;
        free(txt);
        if (st)
            return cli_error("bench view", st, txt ? err.msg : "out of memory");
        if (!quiet)
            fprintf(stderr, "wrote %s\n", out);
    }
    return CLI_EXIT_OK;
}
