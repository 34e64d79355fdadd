/* mem.c — the one allocator layer for large buffers: counts live, cached and peak bytes per stage.
 *
 * Each block carries a 64-byte header (size, tag, magic) so that frees need no lookup. Freed blocks
 * may be parked in a reuse cache (exact-size match), which is what GPU allocators do and what the
 * seed document reports as "cache"; here it keeps the accounting honest across stages.
 */
#include "common/err.h"
#include "common/mem_device.h"
#include "ssb4d_advanced.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MEM_ALIGN 64
#define MEM_MAGIC 0x55b4d3e11ULL
#define MAX_STAGES 64
#define MAX_CACHE 64
#define HUGE_MIN ((size_t)16 << 20)
#define HUGE_ALIGN ((size_t)2 << 20)

typedef struct {
    uint64_t magic;
    size_t bytes;
    char tag[40];
    uint64_t pad;
} block_header;
_Static_assert(sizeof(block_header) == MEM_ALIGN, "header must keep 64-byte alignment");

struct ssb4d_mem {
    pthread_mutex_t lock;
    size_t limit, live, cached, peak_all, stage_peak;
    void *cache[MAX_CACHE];
    size_t n_cache;
    int in_stage;
    struct timespec stage_t0;
    ssb4d_stage_record cur;
    ssb4d_stage_record stages[MAX_STAGES];
    size_t n_stages;
    /* The call's progress and cancel (ssb4d_mem_set_progress): any thread may poll; one calls
     * the callback at a time (cb_lock, tried, never waited on), at most every POLL_NS. */
    atomic_int cancelled;
    ssb4d_progress_fn progress;
    void *progress_user;
    pthread_mutex_t cb_lock;
    _Atomic long long last_call_ns;
    _Atomic double fraction;
    atomic_int fraction_owned; /* a call reports its own fraction over its passes (the fit):
                                  the passes' own then only poll (ssb4d_mem_progress_outer) */
    /* Fault injection (ssb4d_mem_fail_after), under lock: the allocations counted so far, the
     * count at which the next one is refused (0: none), whether every later one is refused too,
     * and the faults injected. */
    long n_allocs, fail_at, n_faults;
    int fail_persistent;
};

#define POLL_NS 20000000LL /* 20 ms: the callback runs often enough to cancel within ~50 ms */

static void note_peak(ssb4d_mem *m)
{
    size_t total = m->live + m->cached;
    if (total > m->peak_all)
        m->peak_all = total;
    if (total > m->stage_peak)
        m->stage_peak = total;
}

ssb4d_mem *ssb4d_mem_create(size_t limit_bytes)
{
    ssb4d_mem *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_init(&m->cb_lock, NULL);
    m->limit = limit_bytes;
    return m;
}

static void release_block(void *p)
{
    free((char *)p - MEM_ALIGN);
}

void ssb4d_mem_trim(ssb4d_mem *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n_cache; i++) {
        block_header *h = (block_header *)((char *)m->cache[i] - MEM_ALIGN);
        m->cached -= h->bytes;
        release_block(m->cache[i]);
    }
    m->n_cache = 0;
    pthread_mutex_unlock(&m->lock);
}

void ssb4d_mem_destroy(ssb4d_mem *m)
{
    if (!m)
        return;
    ssb4d_mem_trim(m);
    pthread_mutex_destroy(&m->lock);
    pthread_mutex_destroy(&m->cb_lock);
    free(m);
}

void *ssb4d_mem_alloc(ssb4d_mem *m, size_t bytes, const char *tag, ssb4d_err *err)
{
    if (bytes == 0)
        bytes = 1;
    if (bytes > SIZE_MAX - 2 * MEM_ALIGN) {
        ssb_fail(err, SSB4D_ENOMEM, "allocation of %zu bytes for %s is too large", bytes,
                 tag ? tag : "buffer");
        return NULL;
    }
    if (m) {
        pthread_mutex_lock(&m->lock);
        if (++m->n_allocs == m->fail_at) { /* an injected fault (tests): as if the system refused */
            m->fail_at = m->fail_persistent ? m->fail_at + 1 : 0;
            m->n_faults++;
            long n = m->n_allocs;
            pthread_mutex_unlock(&m->lock);
            ssb_fail(err, SSB4D_ENOMEM, "could not allocate %.1f MiB for %s (injected fault at allocation %ld)",
                     bytes / 1048576.0, tag ? tag : "buffer", n);
            return NULL;
        }
        for (size_t i = 0; i < m->n_cache; i++) {
            block_header *h = (block_header *)((char *)m->cache[i] - MEM_ALIGN);
            if (h->bytes == bytes) {
                void *p = m->cache[i];
                m->cache[i] = m->cache[--m->n_cache];
                m->cached -= bytes;
                m->live += bytes;
                snprintf(h->tag, sizeof h->tag, "%s", tag ? tag : "");
                note_peak(m);
                pthread_mutex_unlock(&m->lock);
                return p;
            }
        }
        /* Over budget: give the cache back first, then refuse. */
        if (m->limit && m->live + m->cached + bytes > m->limit && m->n_cache) {
            pthread_mutex_unlock(&m->lock);
            ssb4d_mem_trim(m);
            pthread_mutex_lock(&m->lock);
        }
        if (m->limit && m->live + bytes > m->limit) {
            size_t live = m->live, limit = m->limit;
            pthread_mutex_unlock(&m->lock);
            ssb_fail(err, SSB4D_ENOMEM,
                     "%s needs %.1f MiB but the memory budget (%.1f MiB) has only %.1f MiB left",
                     tag ? tag : "buffer", bytes / 1048576.0, limit / 1048576.0,
                     (limit - live) / 1048576.0);
            return NULL;
        }
        pthread_mutex_unlock(&m->lock);
    }
    size_t padded = (bytes + MEM_ALIGN - 1) / MEM_ALIGN * MEM_ALIGN;
    void *raw = NULL;
    /* Large blocks (G, decode blocks) on 2 MiB boundaries with transparent huge pages: first-touch
     * page faults otherwise cost seconds for a multi-GiB G in a virtual machine. */
    int huge = bytes >= HUGE_MIN;
    if (posix_memalign(&raw, huge ? HUGE_ALIGN : MEM_ALIGN, padded + MEM_ALIGN) != 0 || !raw) {
        ssb_fail(err, SSB4D_ENOMEM, "could not allocate %.1f MiB for %s", bytes / 1048576.0,
                 tag ? tag : "buffer");
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    if (huge)
        madvise(raw, (padded + MEM_ALIGN) / HUGE_ALIGN * HUGE_ALIGN, MADV_HUGEPAGE);
#endif
    block_header *h = raw;
    memset(h, 0, sizeof *h);
    h->magic = MEM_MAGIC;
    h->bytes = bytes;
    snprintf(h->tag, sizeof h->tag, "%s", tag ? tag : "");
    if (m) {
        pthread_mutex_lock(&m->lock);
        m->live += bytes;
        note_peak(m);
        pthread_mutex_unlock(&m->lock);
    }
    return (char *)raw + MEM_ALIGN;
}

ssb4d_status ssb4d_mem_external(ssb4d_mem *m, size_t bytes, int add, const char *tag, ssb4d_err *err)
{
    if (!m)
        return SSB4D_OK;
    pthread_mutex_lock(&m->lock);
    if (!add) {
        m->live -= bytes <= m->live ? bytes : m->live;
        pthread_mutex_unlock(&m->lock);
        return SSB4D_OK;
    }
    if (m->limit && m->live + bytes > m->limit) {
        size_t limit = m->limit;
        pthread_mutex_unlock(&m->lock);
        return ssb_fail(err, SSB4D_ENOMEM, "%s (%.1f MiB) does not fit in the memory budget (%.1f MiB)",
                        tag ? tag : "external data", bytes / 1048576.0, limit / 1048576.0);
    }
    m->live += bytes;
    note_peak(m);
    pthread_mutex_unlock(&m->lock);
    return SSB4D_OK;
}

void *ssb4d_mem_calloc(ssb4d_mem *m, size_t bytes, const char *tag, ssb4d_err *err)
{
    void *p = ssb4d_mem_alloc(m, bytes, tag, err);
    if (p)
        memset(p, 0, bytes);
    return p;
}

void ssb4d_mem_free(ssb4d_mem *m, void *p, int keep_in_cache)
{
    if (!p)
        return;
    block_header *h = (block_header *)((char *)p - MEM_ALIGN);
    if (h->magic != MEM_MAGIC)
        abort(); /* not ours: a programming error, never input-dependent */
    if (m) {
        pthread_mutex_lock(&m->lock);
        m->live -= h->bytes;
        if (keep_in_cache && m->n_cache < MAX_CACHE) {
            m->cache[m->n_cache++] = p;
            m->cached += h->bytes;
            pthread_mutex_unlock(&m->lock);
            return;
        }
        pthread_mutex_unlock(&m->lock);
    }
    h->magic = 0;
    release_block(p);
}

void ssb4d_mem_fail_after(ssb4d_mem *m, long n, int persistent)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    m->fail_at = n > 0 ? m->n_allocs + n : 0;
    m->fail_persistent = persistent != 0;
    pthread_mutex_unlock(&m->lock);
}

long ssb4d_mem_alloc_count(const ssb4d_mem *m)
{
    if (!m)
        return 0;
    pthread_mutex_lock(&((ssb4d_mem *)m)->lock);
    long n = m->n_allocs;
    pthread_mutex_unlock(&((ssb4d_mem *)m)->lock);
    return n;
}

long ssb4d_mem_fault_count(const ssb4d_mem *m)
{
    if (!m)
        return 0;
    pthread_mutex_lock(&((ssb4d_mem *)m)->lock);
    long n = m->n_faults;
    pthread_mutex_unlock(&((ssb4d_mem *)m)->lock);
    return n;
}

size_t ssb4d_mem_live(const ssb4d_mem *m) { return m ? m->live : 0; }
size_t ssb4d_mem_cached(const ssb4d_mem *m) { return m ? m->cached : 0; }
size_t ssb4d_mem_peak(const ssb4d_mem *m) { return m ? m->peak_all : 0; }
size_t ssb4d_mem_limit(const ssb4d_mem *m) { return m ? m->limit : 0; }

/* A "Key:   N kB" line of a /proc file (status, meminfo), in bytes; 0 if unavailable. */
static size_t proc_kib(const char *file, const char *key)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return 0;
    char line[256];
    size_t klen = strlen(key), v = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            v = (size_t)strtoull(line + klen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v * 1024;
}

static size_t proc_status_kib(const char *key) { return proc_kib("/proc/self/status", key); }

size_t ssb4d_mem_available(void) { return proc_kib("/proc/meminfo", "MemAvailable"); }
size_t ssb4d_mem_total(void) { return proc_kib("/proc/meminfo", "MemTotal"); }

size_t ssb4d_rss_now(void) { return proc_status_kib("VmRSS"); }
size_t ssb4d_rss_peak(void) { return proc_status_kib("VmHWM"); }

static void rss_reset_peak(void)
{
    /* Writing 5 resets VmHWM to the current RSS (Linux >= 4.0); harmless if refused. */
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    if (fd >= 0) {
        ssize_t w = write(fd, "5", 1);
        (void)w;
        close(fd);
    }
}

static double since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

void ssb4d_mem_stage_begin(ssb4d_mem *m, const char *name)
{
    if (!m)
        return;
    if (m->in_stage)
        ssb4d_mem_stage_end(m);
    rss_reset_peak();
    pthread_mutex_lock(&m->lock);
    memset(&m->cur, 0, sizeof m->cur);
    snprintf(m->cur.name, sizeof m->cur.name, "%s", name ? name : "stage");
    m->stage_peak = m->live + m->cached;
    m->in_stage = 1;
    clock_gettime(CLOCK_MONOTONIC, &m->stage_t0);
    pthread_mutex_unlock(&m->lock);
}

void ssb4d_mem_stage_end(ssb4d_mem *m)
{
    if (!m || !m->in_stage)
        return;
    size_t rss_peak = ssb4d_rss_peak(), rss_now = ssb4d_rss_now();
    pthread_mutex_lock(&m->lock);
    m->cur.seconds = since(&m->stage_t0);
    m->cur.peak_bytes = m->stage_peak;
    m->cur.after_bytes = m->live + m->cached;
    m->cur.live_after = m->live;
    m->cur.cache_bytes = m->cached;
    m->cur.rss_peak_bytes = rss_peak;
    m->cur.rss_after_bytes = rss_now;
    if (m->n_stages < MAX_STAGES)
        m->stages[m->n_stages++] = m->cur;
    m->in_stage = 0;
    pthread_mutex_unlock(&m->lock);
}

void ssb_mem_stage_device_peak(ssb4d_mem *m, size_t bytes)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    if (m->in_stage && bytes > m->cur.device_peak_bytes)
        m->cur.device_peak_bytes = bytes;
    pthread_mutex_unlock(&m->lock);
}

size_t ssb4d_mem_stage_count(const ssb4d_mem *m) { return m ? m->n_stages : 0; }

const ssb4d_stage_record *ssb4d_mem_stage(const ssb4d_mem *m, size_t i)
{
    return (m && i < m->n_stages) ? &m->stages[i] : NULL;
}

void ssb4d_mem_report_print(const ssb4d_mem *m, FILE *f)
{
    if (!m)
        return;
    const double G = 1024.0 * 1024.0 * 1024.0;
    fprintf(f, "memory report (GiB)           tracked peak / after   cache after   "
               "footprint peak / after   seconds\n");
    size_t rss_max = 0, tr_max = 0;
    for (size_t i = 0; i < m->n_stages; i++) {
        const ssb4d_stage_record *s = &m->stages[i];
        fprintf(f, "  %-28s %8.3f / %-8.3f %11.3f %12.3f / %-8.3f %9.3f\n", s->name,
                s->peak_bytes / G, s->after_bytes / G, s->cache_bytes / G, s->rss_peak_bytes / G,
                s->rss_after_bytes / G, s->seconds);
        if (s->rss_peak_bytes > rss_max)
            rss_max = s->rss_peak_bytes;
        if (s->peak_bytes > tr_max)
            tr_max = s->peak_bytes;
    }
    fprintf(f, "  %-28s %8.3f (footprint %.3f)\n", "session peak", tr_max / G, rss_max / G);
}

/* ---- progress and cancel ---------------------------------------------------------------------- */

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

void ssb4d_mem_set_progress(ssb4d_mem *m, ssb4d_progress_fn fn, void *user)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->cb_lock);
    m->progress = fn;
    m->progress_user = user;
    atomic_store(&m->fraction, 0.0);
    atomic_store(&m->last_call_ns, 0);
    pthread_mutex_unlock(&m->cb_lock);
}

void ssb4d_mem_cancel(ssb4d_mem *m)
{
    if (m)
        atomic_store(&m->cancelled, 1);
}

void ssb4d_mem_cancel_clear(ssb4d_mem *m)
{
    if (m) { /* a new call starts: no cancel, and its passes report their fraction until it
                reports its own */
        atomic_store(&m->cancelled, 0);
        atomic_store(&m->fraction_owned, 0);
    }
}

int ssb4d_mem_cancelled(const ssb4d_mem *m)
{
    return m && atomic_load(&((ssb4d_mem *)m)->cancelled);
}

/* Calls the callback when it is due (or force) and this thread gets the lock. */
static void call_progress(ssb4d_mem *m, int force)
{
    if (!m->progress)
        return;
    long long t = now_ns();
    if (!force && t - atomic_load(&m->last_call_ns) < POLL_NS)
        return;
    if (pthread_mutex_trylock(&m->cb_lock))
        return; /* another thread is in the callback: it answers for this moment too */
    atomic_store(&m->last_call_ns, t);
    const char *stage = m->in_stage ? m->cur.name : "";
    if (m->progress && m->progress(m->progress_user, stage, atomic_load(&m->fraction)))
        atomic_store(&m->cancelled, 1);
    pthread_mutex_unlock(&m->cb_lock);
}

/* The poll; force: call the callback however recently it ran. */
static int poll_now(ssb4d_mem *m, int force)
{
    if (atomic_load(&m->cancelled))
        return 1;
    call_progress(m, force);
    return atomic_load(&m->cancelled);
}

int ssb4d_mem_poll(ssb4d_mem *m) { return m ? poll_now(m, 0) : 0; }

int ssb4d_mem_progress(ssb4d_mem *m, double fraction)
{
    if (!m)
        return 0;
    if (!atomic_load(&m->fraction_owned)) /* else each pass inside a fit would reset it to 0 */
        atomic_store(&m->fraction, fraction < 0 ? 0.0 : fraction > 1 ? 1.0 : fraction);
    /* the end is always passed on: a last report within 20 ms of the one before would leave the
     * caller's bar short of done */
    return poll_now(m, fraction >= 1.0);
}

int ssb4d_mem_progress_outer(ssb4d_mem *m, double fraction)
{
    if (!m)
        return 0;
    atomic_store(&m->fraction_owned, 1);
    atomic_store(&m->fraction, fraction < 0 ? 0.0 : fraction > 1 ? 1.0 : fraction);
    return poll_now(m, fraction >= 1.0);
}
