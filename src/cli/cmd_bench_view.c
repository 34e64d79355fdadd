/* cmd_bench_view.c — `ssb4d bench view`: what a person feels in the viewer, measured the way they
 * feel it: a real `ssb4d view DATA` (this binary, started as a child on an ephemeral port), then
 * drag previews (the drag subset, native sampling) and releases (all BF pixels, the exact loss,
 * native sampling) timed from the request sent to the image's last byte received over HTTP. The
 * first of each kind warms up and is not counted; every request has a new C10 (no cache answers).
 * --drag-rate adds what a person feels on a busy machine: drags sent at a fixed rate without
 * waiting for answers (as the page does), a release in the middle, and the frames the page would
 * draw (every finished answer newer than the last one drawn); --cpu-load starts busy processes
 * beside the server that stop by themselves. */
#include "cli/cli_common.h"
#include "cli/cli_session.h"
#include "cli/cmd_bench_view.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/prctl.h>
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
            "  --drag-rate HZ        also send a stream of drags at HZ per second for --drag-seconds\n"
            "                        without waiting for answers (as the page does while a slider\n"
            "                        moves), with a release half way; records the frames the page\n"
            "                        draws per request, the largest gap between drawn frames and the\n"
            "                        release's latency during the drag (0: no stream; default 0)\n"
            "  --drag-seconds S      how long the stream lasts (default 3)\n"
            "  --cpu-load N          N busy processes beside the server while timing (each stops by\n"
            "                        itself after the bench, at most 15 minutes; default 0)\n"
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
        double t0 = ssb4d_clock_s();
        int bad = http(port, token, "POST", "/api/preview", body, &a);
        double dt = ssb4d_clock_s() - t0;
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
    int bad_stats = count && (ssb4d_bench_stats(rt, count, &t->med_ms, &t->min_ms, &t->max_ms) ||
                              ssb4d_bench_stats(sv, count, &t->server_med_ms, &lo, &hi));
    free(rt), free(sv);
    if (bad_stats) {
        fprintf(stderr, "ssb4d bench view: out of memory\n");
        return CLI_EXIT_INTERNAL;
    }
    return 0;
}

/* ---- a drag stream at a fixed rate (--drag-rate) ------------------------------------------ */

typedef struct {
    int port;
    const char *token;
    char body[256];
    double seq, t_send, t_recv, server_s;
    int status, release;
    pthread_t th;
} stream_req;

static void *stream_send(void *arg)
{
    stream_req *q = arg;
    http_answer a;
    q->t_send = ssb4d_clock_s();
    int bad = http(q->port, q->token, "POST", "/api/preview", q->body, &a);
    q->t_recv = ssb4d_clock_s();
    q->status = bad ? -1 : a.status;
    q->server_s = a.server_s;
    free(a.raw);
    return NULL;
}

typedef struct {
    size_t sent, answered, superseded, drawn, failed;
    double largest_gap_ms, gap_median_ms, gap_p95_ms, release_ms, rate_hz;
} stream_result;

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int by_recv(const void *a, const void *b)
{
    const stream_req *x = *(stream_req *const *)a, *y = *(stream_req *const *)b;
    return (x->t_recv > y->t_recv) - (x->t_recv < y->t_recv);
}

/* Drags at rate_hz for seconds s, each on its own connection and thread so that none waits for
 * another, then a release one interval after the last drag (the slider let go while drags are
 * still in flight); then the page's rule replayed on the answers: a finished image is drawn when
 * its seq is newer than the last drawn one. The largest gap between drawn frames is taken from
 * the first drag sent until the release is sent. */
static int drag_stream(int port, const char *token, double c10, int *seq, double rate_hz, double s, size_t subset,
                       stream_result *out)
{
    size_t n = (size_t)(rate_hz * s + 0.5);
    if (n < 2)
        n = 2;
    stream_req *q = calloc(n + 1, sizeof *q);
    stream_req **order = calloc(n + 1, sizeof *order);
    if (!q || !order) {
        free(q), free(order);
        return cli_error("bench view", SSB4D_ENOMEM, "out of memory");
    }
    size_t nq = 0;
    double t0 = ssb4d_clock_s();
    int rc = 0;
    for (size_t i = 0; i <= n && !rc; i++) {
        double due = t0 + (double)i / rate_hz; /* a fixed schedule, whatever the answers do */
        for (double now; (now = ssb4d_clock_s()) < due;)
            usleep((useconds_t)((due - now) * 1e6));
        {
            int rel = i == n;
            stream_req *r = &q[nq];
            r->port = port, r->token = token, r->release = rel;
            r->seq = ++*seq;
            snprintf(r->body, sizeof r->body,
                     "{\"C10_nm\": %.6f, \"upsample\": 1, \"subset\": %zu, \"want_loss\": %s, \"seq\": %d}",
                     c10 + 0.05 * (*seq % 40), rel ? (size_t)0 : subset, rel ? "true" : "false", *seq);
            if (pthread_create(&r->th, NULL, stream_send, r)) {
                rc = cli_error("bench view", SSB4D_EIO, "cannot start a request thread");
                break;
            }
            nq++;
        }
    }
    for (size_t i = 0; i < nq; i++)
        pthread_join(q[i].th, NULL);
    memset(out, 0, sizeof *out);
    out->rate_hz = rate_hz;
    for (size_t i = 0; i < nq; i++) {
        order[i] = &q[i];
        out->sent += !q[i].release;
        if (q[i].status == 200)
            out->answered += !q[i].release;
        else if (q[i].status == 204)
            out->superseded++;
        else
            out->failed++;
        if (q[i].release)
            out->release_ms = q[i].status == 200 ? 1000 * (q[i].t_recv - q[i].t_send) : NAN;
    }
    qsort(order, nq, sizeof *order, by_recv);
    double last_seq = 0, prev = t0, t_release = nq ? q[nq - 1].t_send : t0;
    double *gaps = calloc(nq + 1, sizeof *gaps); /* the gaps between drawn frames, ms */
    size_t ng = 0;
    for (size_t i = 0; gaps && i < nq; i++) {
        stream_req *r = order[i];
        if (r->status != 200 || r->seq <= last_seq)
            continue;
        last_seq = r->seq;
        out->drawn += !r->release;
        if (r->t_recv <= t_release) {
            gaps[ng++] = 1000 * (r->t_recv - prev);
            prev = r->t_recv;
        }
    }
    if (gaps) {
        gaps[ng++] = 1000 * (t_release - prev); /* nothing drawn from the last frame to the release */
        qsort(gaps, ng, sizeof *gaps, by_double);
        out->largest_gap_ms = gaps[ng - 1];
        out->gap_median_ms = gaps[ng / 2];
        out->gap_p95_ms = gaps[(size_t)(0.95 * (double)(ng - 1) + 0.5)];
        free(gaps);
    }
    free(q), free(order);
    if (!rc && out->failed) {
        fprintf(stderr, "ssb4d bench view: %zu requests of the drag stream failed\n", out->failed);
        rc = CLI_EXIT_INTERNAL;
    }
    return rc;
}

/* --cpu-load: n processes that spin. Each dies with the bench (PR_SET_PDEATHSIG) and in any case
 * after limit_s (alarm), so a crashed bench leaves no load behind. */
static int start_load(int n, unsigned limit_s, pid_t *pids)
{
    for (int i = 0; i < n; i++) {
        pid_t p = fork();
        if (p < 0)
            return -1;
        if (p == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            alarm(limit_s);
            volatile unsigned long x = 0;
            for (;;)
                x++;
        }
        pids[i] = p;
    }
    return 0;
}

static void stop_load(int n, pid_t *pids)
{
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
        }
}

static cJSON *stream_json(const stream_result *r, const timing *drag, const timing *rel)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "rate_hz", r->rate_hz);
    cJSON_AddNumberToObject(o, "drags_sent", (double)r->sent);
    cJSON_AddNumberToObject(o, "drags_answered", (double)r->answered);
    cJSON_AddNumberToObject(o, "superseded", (double)r->superseded);
    cJSON_AddNumberToObject(o, "drags_drawn", (double)r->drawn);
    cJSON_AddNumberToObject(o, "drawn_per_request", r->sent ? (double)r->drawn / (double)r->sent : 0);
    cJSON_AddNumberToObject(o, "largest_gap_ms", r->largest_gap_ms);
    cJSON_AddNumberToObject(o, "gap_median_ms", r->gap_median_ms);
    cJSON_AddNumberToObject(o, "gap_p95_ms", r->gap_p95_ms);
    cJSON_AddNumberToObject(o, "preview_compute_ms", drag->server_med_ms);
    cJSON_AddNumberToObject(o, "gap_over_compute", r->largest_gap_ms / drag->server_med_ms);
    cJSON_AddNumberToObject(o, "release_during_drag_ms", r->release_ms);
    cJSON_AddNumberToObject(o, "release_idle_ms", rel->med_ms);
    cJSON_AddNumberToObject(o, "release_over_idle", r->release_ms / rel->med_ms);
    /* Frames cannot come faster than the drags: the target is 2x the longer of a preview's compute
     * and the input interval (the 2x compute, where the compute is the slower). */
    double interval = 1000 / r->rate_hz, floor_ms = fmax(drag->server_med_ms, interval);
    cJSON_AddNumberToObject(o, "input_interval_ms", interval);
    cJSON_AddNumberToObject(o, "gap_target_ms", 2 * floor_ms);
    cJSON_AddBoolToObject(o, "gap_target_met", r->largest_gap_ms <= 2 * floor_ms);
    cJSON_AddBoolToObject(o, "release_target_met", r->release_ms <= 1.5 * rel->med_ms);
    return o;
}

int bench_view(int argc, char **argv, bench_resolve_fn resolve)
{
    enum { O_WORKLOAD = CLI_OPT_FIRST_FREE, O_DATA, O_CACHE, O_DRAGS, O_RELEASES, O_SUBSET, O_FORCE, O_RATE, O_DSEC,
           O_LOAD };
    static const struct option opts[] = {
        {"workload", required_argument, 0, O_WORKLOAD}, {"data", required_argument, 0, O_DATA},
        {"cache", required_argument, 0, O_CACHE},       {"drags", required_argument, 0, O_DRAGS},
        {"releases", required_argument, 0, O_RELEASES}, {"subset", required_argument, 0, O_SUBSET},
        {"memory", required_argument, 0, CLI_OPT_MEMORY}, {"output", required_argument, 0, 'o'},
        {"force", no_argument, 0, O_FORCE},             {"quiet", no_argument, 0, 'q'},
        {"drag-rate", required_argument, 0, O_RATE},    {"drag-seconds", required_argument, 0, O_DSEC},
        {"cpu-load", required_argument, 0, O_LOAD},
        CLI_BACKEND_OPTION,
        {"help", no_argument, 0, 'h'},                  {0, 0, 0, 0},
    };
    const char *name = NULL, *data = NULL, *cache = NULL, *out = NULL, *memory = NULL;
    ssb4d_backend_kind backend = SSB4D_BACKEND_AUTO;
    const char *device_memory = NULL;
    long drags = 20, releases = 3, subset = 256, load = 0;
    double rate = 0, dsec = 3;
    int force = 0, quiet = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:hq", opts, NULL)) != -1) {
        if (c == O_RATE || c == O_DSEC) {
            double v;
            if (cli_parse_number(optarg, c == O_RATE ? 0 : 0.5, c == O_RATE ? 200 : 600, 0, &v)) {
                fprintf(stderr, "ssb4d bench view: invalid value '%s' for %s (%s)\n", optarg, argv[optind - 1],
                        c == O_RATE ? "0 to 200 per second" : "0.5 to 600 s");
                return CLI_EXIT_USAGE;
            }
            *(c == O_RATE ? &rate : &dsec) = v;
            continue;
        }
        if (c == O_LOAD) {
            double v;
            if (cli_parse_number(optarg, 0, 256, 1, &v)) {
                fprintf(stderr, "ssb4d bench view: invalid value '%s' for --cpu-load (0 to 256 processes)\n", optarg);
                return CLI_EXIT_USAGE;
            }
            load = (long)v;
            continue;
        }
        long *dst = c == O_DRAGS ? &drags : c == O_RELEASES ? &releases : c == O_SUBSET ? &subset : NULL;
        if (dst) {
            double v;
            if (cli_parse_number(optarg, c == O_SUBSET ? 0 : 1, 100000, 1, &v)) {
                fprintf(stderr, "ssb4d bench view: invalid value '%s' for %s\n", optarg, argv[optind - 1]);
                return CLI_EXIT_USAGE;
            }
            *dst = (long)v;
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
        case CLI_OPT_DEVICE_MEMORY: {
            size_t b;
            if (cli_parse_device_memory(optarg, &b))
                return CLI_EXIT_USAGE;
            device_memory = optarg;
            break;
        }
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
    char *args[14] = {"ssb4d", "view", path, "--port", "0", "-q", "--backend", (char *)cli_backend_kind_name(backend)};
    int na = 8;
    if (memory) {
        args[na++] = "--memory";
        args[na++] = (char *)memory;
    }
    if (device_memory) {
        args[na++] = "--device-memory";
        args[na++] = (char *)device_memory;
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
    double t0 = ssb4d_clock_s(), c10 = 0, ready_s = 0;
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
            ready_s = ssb4d_clock_s() - t0;
            const char *b = cJSON_GetStringValue(cJSON_GetObjectItem(s, "backend"));
            snprintf(backend_name, sizeof backend_name, "%s", b ? b : "");
        }
        cJSON_Delete(s);
        if (ready)
            break;
        usleep(200000);
    }
    timing drag = {0}, rel = {0};
    stream_result sr = {0};
    int seq = 0;
    pid_t lpids[256] = {0};
    if (!rc && load && start_load((int)load, 900, lpids)) /* after the start: its fit is not timed */
        rc = cli_error("bench view", SSB4D_EIO, "cannot start the CPU load");
    if (!rc)
        rc = time_kind(port, token, c10, &seq, (size_t)drags, (size_t)subset, 0, &drag);
    if (!rc)
        rc = time_kind(port, token, c10, &seq, (size_t)releases, 0, 1, &rel);
    if (!rc && rate > 0)
        rc = drag_stream(port, token, c10, &seq, rate, dsec, (size_t)subset, &sr);
    stop_load((int)load, lpids);
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
    if (rate > 0)
        printf("  stream   %.0f/s for %.1f s%s: %zu drags, %zu drawn (%.2f per request), %zu superseded;\n"
               "           gaps between drawn frames: median %.1f ms, 95th percentile %.1f ms, largest %.1f ms\n"
               "           (a drag's compute %.1f ms, the input every %.1f ms; target <= 2x the longer), release\n"
               "           during the drag %.1f ms (%.2fx idle %.1f ms; target <= 1.5x)\n",
               rate, dsec, load ? " under load" : "", sr.sent, sr.drawn, sr.sent ? (double)sr.drawn / (double)sr.sent : 0,
               sr.superseded, sr.gap_median_ms, sr.gap_p95_ms, sr.largest_gap_ms, drag.server_med_ms, 1000 / rate,
               sr.release_ms, sr.release_ms / rel.med_ms, rel.med_ms);
    printf("  backend  %s\n", backend_name);
    if (load)
        printf("  load     %ld busy processes beside the server\n", load);
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
        cJSON_AddNumberToObject(j, "cpu_load", (double)load);
        if (rate > 0)
            cJSON_AddItemToObject(j, "stream", stream_json(&sr, &drag, &rel));
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
