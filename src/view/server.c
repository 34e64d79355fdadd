/* server.c — the HTTP side of `ssb4d view`: libmicrohttpd bound to 127.0.0.1 only, one thread
 * per connection (a handler may wait for the worker, and a client that sends half a request and
 * stalls only holds its own thread until the connection timeout), bodies capped at 64 KiB, the
 * Host and token checks before anything else, no CORS headers ever. SIGINT/SIGTERM arrive on a
 * signalfd that the serving thread blocks on: no polling while idle. */
#include "view/view_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- answers ------------------------------------------------------------------------------ */

void view_resp_text(view_resp *r, int status, const char *fmt, ...)
{
    view_resp_free(r);
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    /* Errors are JSON too: {"error": "..."} — one line the page shows as is. */
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "error", buf);
    view_resp_json(r, status, j);
}

void view_resp_json(view_resp *r, int status, cJSON *j)
{
    ssb4d_json_exact(j); /* exact numbers: a client reads the very double computed */
    view_resp_free(r);
    r->status = status;
    r->ctype = "application/json";
    r->body = j ? cJSON_PrintUnformatted(j) : NULL;
    r->len = r->body ? strlen(r->body) : 0;
    cJSON_Delete(j);
    if (!r->body) {
        r->status = 500;
        r->body = (char *)"{\"error\":\"out of memory\"}";
        r->len = strlen(r->body);
        r->body_static = 1;
    }
}

void view_resp_header(view_resp *r, const char *name, const char *fmt, ...)
{
    if (r->n_hdr >= 8)
        return;
    snprintf(r->hdr[r->n_hdr][0], sizeof r->hdr[0][0], "%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->hdr[r->n_hdr][1], sizeof r->hdr[0][1], fmt, ap);
    va_end(ap);
    r->n_hdr++;
}

void view_resp_image(view_resp *r, float *img, size_t rows, size_t cols, ssb4d_mem *mem)
{
    view_resp_free(r);
    r->status = 200;
    r->ctype = "application/octet-stream";
    r->body = (char *)img; /* float32, little-endian on every machine this builds for */
    r->mem = mem;
    r->len = rows * cols * sizeof *img;
    view_resp_header(r, "X-Width", "%zu", cols);
    view_resp_header(r, "X-Height", "%zu", rows);
}

void view_resp_free(view_resp *r)
{
    if (r->mem)
        ssb4d_mem_free(r->mem, r->body, 0);
    else if (!r->body_static)
        free(r->body);
    r->mem = NULL;
    r->body = NULL;
    r->len = 0;
    r->body_static = 0;
    r->n_hdr = 0;
}

/* ---- one request -------------------------------------------------------------------------- */

/* What MHD keeps per request between the calls of the access handler. */
typedef struct {
    char *body;
    size_t len;
    int too_large;
} req_ctx;

/* An image body allocated under the session's budget goes back to it once MHD has sent it. */
typedef struct {
    ssb4d_mem *mem;
    void *p;
} budget_body;

static void budget_body_free(void *cls)
{
    budget_body *b = cls;
    ssb4d_mem_free(b->mem, b->p, 0);
    free(b);
}

static enum MHD_Result send_resp(struct MHD_Connection *c, view_resp *r)
{
    struct MHD_Response *res;
    if (r->mem) {
        budget_body *b = malloc(sizeof *b);
        if (!b) {
            view_resp_free(r);
            return MHD_NO;
        }
        b->mem = r->mem, b->p = r->body;
        res = MHD_create_response_from_buffer_with_free_callback_cls(r->len, r->body, budget_body_free, b);
        if (!res) {
            free(b);
            view_resp_free(r);
            return MHD_NO;
        }
        r->body = NULL, r->mem = NULL; /* MHD's now */
    } else if (r->body_static)
        res = MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_PERSISTENT);
    else {
        res = MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_MUST_FREE);
        r->body = NULL; /* MHD frees it */
    }
    if (!res)
        return MHD_NO;
    if (r->ctype)
        MHD_add_response_header(res, "Content-Type", r->ctype);
    MHD_add_response_header(res, "Cache-Control", "no-store");
    MHD_add_response_header(res, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(res, "Content-Security-Policy",
                            "default-src 'self'; img-src 'self' data: blob:; frame-ancestors 'none'");
    MHD_add_response_header(res, "Referrer-Policy", "no-referrer");
    for (int i = 0; i < r->n_hdr; i++)
        MHD_add_response_header(res, r->hdr[i][0], r->hdr[i][1]);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)r->status, res);
    MHD_destroy_response(res);
    view_resp_free(r);
    return ok;
}

static enum MHD_Result quick(struct MHD_Connection *c, int status, const char *msg)
{
    view_resp r = {0};
    view_resp_text(&r, status, "%s", msg);
    return send_resp(c, &r);
}

/* The route of url under --base-url: the part after the prefix ("/api/state", "/"), or NULL when
 * url is not under it. Without a prefix, url itself. */
static const char *under_base(const view_server *v, const char *url)
{
    const char *b = v->cfg.base_url ? v->cfg.base_url : "";
    size_t k = strlen(b);
    if (!k)
        return url;
    return !strncmp(url, b, k) && url[k] == '/' ? url + k : NULL;
}

/* The prefix itself, without its slash: sent on to PREFIX/ (the page's relative requests need
 * the slash), the token kept. */
static enum MHD_Result to_base(view_server *v, struct MHD_Connection *c)
{
    const char *tok = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "token");
    char loc[1400];
    snprintf(loc, sizeof loc, "%s/%s%.64s", v->cfg.base_url, tok ? "?token=" : "", tok ? tok : "");
    if (strspn(tok ? tok : "", "0123456789abcdef") != strlen(tok ? tok : "")) /* no header injection */
        snprintf(loc, sizeof loc, "%s/", v->cfg.base_url);
    view_resp r = {0};
    view_resp_text(&r, 302, "moved to %s/", v->cfg.base_url);
    view_resp_header(&r, "Location", "%s", loc);
    return send_resp(c, &r);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    view_server *v = cls;
    req_ctx *rc = *con_cls;
    const char *route = under_base(v, url);
    if (!rc) { /* headers only: refuse early what will be refused anyway, without reading a body */
        if (view_check_host(v, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host")))
            return quick(c, 403, "forbidden: the Host header must be 127.0.0.1:PORT or localhost:PORT "
                                 "(or a name given with --allow-host)");
        if (!route)
            return v->cfg.base_url && !strcmp(url, v->cfg.base_url) && strcmp(method, "POST") ? to_base(v, c)
                                                                                            : quick(c, 404, "not found");
        if (!strncmp(route, "/api/", 5)) {
            int t = view_check_token(v, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-SSB4D-Token"));
            if (t)
                return quick(c, t, t == 401 ? "the X-SSB4D-Token header is missing" : "wrong token");
        }
        if (strcmp(method, "GET") && strcmp(method, "POST") && strcmp(method, "HEAD"))
            return quick(c, 405, "method not allowed");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > VIEW_BODY_LIMIT)
            return quick(c, 413, "request body too large (64 KiB at most)");
        if (!(rc = calloc(1, sizeof *rc)))
            return MHD_NO;
        *con_cls = rc;
        return MHD_YES;
    }
    if (*upload_size) { /* a piece of the body */
        if (rc->len + *upload_size > VIEW_BODY_LIMIT)
            rc->too_large = 1;
        else {
            char *b = realloc(rc->body, rc->len + *upload_size + 1);
            if (!b)
                rc->too_large = 1;
            else {
                memcpy(b + rc->len, upload, *upload_size);
                rc->body = b;
                rc->len += *upload_size;
                b[rc->len] = 0;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (rc->too_large)
        return quick(c, 413, "request body too large (64 KiB at most)");
    view_resp r = {0};
    if (!route)
        view_resp_text(&r, 404, "not found");
    else if (!strncmp(route, "/api/", 5))
        view_api(v, method, route, MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "kind"),
                 rc->body ? rc->body : "", rc->len, &r);
    else {
        const view_asset *a = !strcmp(method, "POST") ? NULL : view_static_find(route);
        if (!a)
            view_resp_text(&r, 404, "not found");
        else {
            r.status = 200;
            r.ctype = a->ctype;
            r.body = (char *)a->data;
            r.len = a->len;
            r.body_static = 1;
        }
    }
    return send_resp(c, &r);
}

/* URLs are taken as sent: no %-decoding, so "/index.html%00" or "/%2e%2e/x" match nothing in
 * the fixed list (the page and the API need no escapes). Returns the length unchanged. */
static size_t no_unescape(void *cls, struct MHD_Connection *c, char *s) { return strlen(s); }

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    req_ctx *rc = *con_cls;
    if (rc) {
        free(rc->body);
        free(rc);
    }
    *con_cls = NULL;
}

/* ---- the server's life -------------------------------------------------------------------- */

view_server *view_create(const view_config *cfg, ssb4d_err *err)
{
    view_server *v = calloc(1, sizeof *v);
    if (!v) {
        err->code = SSB4D_ENOMEM;
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return NULL;
    }
    v->cfg = *cfg;
    if (view_token_new(v->token)) {
        free(v);
        err->code = SSB4D_EIO;
        snprintf(err->msg, sizeof err->msg, "cannot read random bytes for the token: %s", strerror(errno));
        return NULL;
    }
    pthread_mutex_init(&v->mu, NULL);
    pthread_cond_init(&v->wake, NULL);
    pthread_cond_init(&v->done, NULL);
    v->rotation_deg = NAN;
    return v;
}

view_config *view_cfg(view_server *v) { return &v->cfg; }

int view_progress(void *user, const char *stage, double fraction)
{
    view_server *v = user;
    pthread_mutex_lock(&v->mu);
    snprintf(v->stage, sizeof v->stage, "%s", stage ? stage : "");
    v->fraction = fraction;
    /* The running job's cancel, asked for at any time: ssb4d_session_cancel alone belongs to the
     * library call running when it comes, so a Cancel pressed before the job's call began (its
     * first 0.2 s on the medium dataset) was lost and the fit ran to the end. */
    int cancel = !v->cfg.dist && (v->cancel_job || v->stop); /* distributed: every rank ends the job */
    pthread_mutex_unlock(&v->mu);
    return cancel;
}

int view_block_signals(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGPIPE); /* a client that goes away must not end the server */
    return pthread_sigmask(SIG_BLOCK, &set, NULL) ? -1 : 0;
}

int view_serve(view_server *v, ssb4d_session *s, ssb4d_err *err)
{
    v->s = s;
    ssb4d_session_shape(s, v->shape);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC);
    if (sfd < 0) {
        err->code = SSB4D_EIO;
        snprintf(err->msg, sizeof err->msg, "signalfd: %s", strerror(errno));
        return err->code;
    }
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)v->cfg.port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK); /* 127.0.0.1 only, never 0.0.0.0 */
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL,
        on_request, v, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
        v, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)15, MHD_OPTION_CONNECTION_LIMIT, (unsigned)1500,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)0, MHD_OPTION_THREAD_STACK_SIZE, (size_t)(256 * 1024),
        MHD_OPTION_UNESCAPE_CALLBACK, no_unescape, NULL, /* no SO_REUSEPORT: a second view on the
                                                             same port must fail, not share it */
        MHD_OPTION_END);
    if (!d) {
        close(sfd);
        err->code = SSB4D_EIO;
        snprintf(err->msg, sizeof err->msg, "cannot listen on 127.0.0.1:%d (in use, or not allowed)", v->cfg.port);
        return err->code;
    }
    v->daemon = d;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_LISTEN_FD);
    struct sockaddr_in got;
    socklen_t gl = sizeof got;
    if (di && !getsockname(di->listen_fd, (struct sockaddr *)&got, &gl))
        v->port = ntohs(got.sin_port);
    else
        v->port = v->cfg.port;
    if (view_worker_start(v)) {
        MHD_stop_daemon(d);
        v->daemon = NULL;
        close(sfd);
        err->code = SSB4D_EINTERNAL;
        snprintf(err->msg, sizeof err->msg, "cannot start the worker thread");
        return err->code;
    }
    fprintf(v->cfg.url_out ? v->cfg.url_out : stdout, "ssb4d view: http://127.0.0.1:%d%s/?token=%s\n", v->port,
            v->cfg.base_url ? v->cfg.base_url : "", v->token);
    fflush(v->cfg.url_out ? v->cfg.url_out : stdout);
    struct signalfd_siginfo si;
    for (;;) { /* blocks: nothing runs here until a signal */
        ssize_t n = read(sfd, &si, sizeof si);
        if (n == (ssize_t)sizeof si)
            break;
        if (n < 0 && errno != EINTR)
            break;
    }
    if (!v->cfg.quiet)
        fprintf(stderr, "ssb4d view: %s, stopping\n", si.ssi_signo == SIGINT ? "interrupted" : "terminated");
    /* Stop order: the running call is cancelled, the worker answers what waits and ends, then
     * the daemon (whose handlers have all been answered) stops. */
    view_worker_stop(v);
    MHD_stop_daemon(d);
    v->daemon = NULL;
    close(sfd);
    return 0;
}

void view_destroy(view_server *v)
{
    if (!v)
        return;
    cJSON_Delete(v->trials);
    cJSON_Delete(v->region);
    cJSON_Delete(v->regions);
    if (v->has_region_res)
        ssb4d_fit_result_free(&v->region_res);
    cJSON_Delete(v->refine);
    if (v->has_refine_res)
        ssb4d_refine_result_free(&v->refine_res);
    free(v->cal.mean);
    free(v->cal.flagged);
    if (v->has_virt)
        ssb4d_virtual_free(&v->virt);
    pthread_mutex_destroy(&v->mu);
    pthread_cond_destroy(&v->wake);
    pthread_cond_destroy(&v->done);
    free(v);
}
