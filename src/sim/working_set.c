/* working_set.c — the simulator's largest buffers, checked against a budget before it runs
 * (ssb4d_sim_working_set_of; `ssb4d simulate --memory`). */
#include "codec/codec.h"
#include "common/parallel.h"
#include "qem/qem.h"
#include "sim/sim.h"

/* The simulator's largest buffers (src/sim/sim.c and, for .qem, src/qem/qem_write.c): it has no
 * memory context, so its known working set is checked up front instead. Parts in bytes. */
ssb4d_sim_working_set ssb4d_sim_working_set_of(const ssb4d_sim_params *p, const ssb4d_sim_info *info, int to_qem)
{
    ssb4d_sim_working_set w = {0, 0, 0, 0, 0};
    size_t nt = (size_t)ssb_threads_resolve(p->threads), N = (size_t)p->scan_n;
    size_t MM = (size_t)info->grid * (size_t)info->grid, DD = (size_t)p->det * (size_t)p->det;
    /* probe, the layers' transmission functions (2 per cell; Si 4), propagator and one wave per
     * thread (complex64), the aperture and the mask; the grid is that of the oversampled window
     * (about S× per axis) */
    const sim_crystal *cr = sim_crystal_get(p->specimen);
    size_t nl = cr ? (size_t)cr->n_layers : 2;
    w.grid = (2 + nl + nt) * MM * 8 + 2 * MM * 4;
    /* a block of whole scan rows (~8 MiB of uint16 counts), its sums, a pattern per thread and
     * the two phase images */
    size_t rows = sim_rows_per_block(p);
    w.blocks = rows * N * (DD * 2 + 16) + nt * DD * 4 + 2 * N * N * 4;
    /* pattern reuse: the kept row tables, and the block's scratch tables when not all are kept */
    size_t n_tables, table = sim_reuse_table_bytes(p, &n_tables), kept = sim_reuse_cache_bytes(p);
    if (table)
        w.reuse = kept + (kept < n_tables * table ? (rows < n_tables ? rows : n_tables) * table : 0);
    if (to_qem) { /* one chunk of frames (the writer's default size), its encoder scratch */
        size_t cs = ((size_t)128 << 20) / (2 * DD) / QEM_INTERVAL * QEM_INTERVAL;
        cs = cs < QEM_INTERVAL ? QEM_INTERVAL : cs > 8192 ? 8192 : cs;
        cs = cs > N * N ? N * N : cs;
        size_t nb = (cs + QEM_INTERVAL - 1) / QEM_INTERVAL;
        w.writer = cs * DD * 2 + DD * (qem_stream_bound(QEM_INTERVAL) + 8) + nb * DD * 5;
    }
    w.total = w.grid + w.blocks + w.writer + w.reuse;
    return w;
}
