/* model.c — the float32 instance of the multislice model and its adjoint (model_core.inc), the
 * engine's; the float64 instance is compiled by the gradient test from the same source. */
#include "refine/refine.h"

#include "common/fftw_lock.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RR float
#define FX(name) fftwf_##name
#define MC(name) name##_f
#define RMODEL_LOCK() ssb_fftw_lock()
#define RMODEL_UNLOCK() ssb_fftw_unlock()
#include "refine/model_core.inc"

struct refine_model {
    rmodel_f m;
    unsigned long version; /* refine_model_set's count (a device copy of the tables follows it) */
};
struct refine_work {
    rwork_f w;
};

refine_model *refine_model_new(int nr, int nc, int ns)
{
    refine_model *m = calloc(1, sizeof *m);
    if (!m || rmodel_init_f(&m->m, nr, nc, ns)) {
        free(m);
        return NULL;
    }
    return m;
}

void refine_model_delete(refine_model *m)
{
    if (!m)
        return;
    rmodel_free_f(&m->m);
    free(m);
}

void refine_model_set(refine_model *m, const refine_geo *geo, const double th[RP_N])
{
    rmodel_set_f(&m->m, geo, th);
    m->version++;
}

void refine_model_tables(const refine_model *m, refine_tables *t)
{
    t->P = m->m.P, t->prop = m->m.prop, t->dchi = m->m.dchi, t->dth = m->m.dth, t->fr = m->m.fr, t->fc = m->m.fc;
    t->version = m->version;
}

refine_work *refine_work_new(const refine_model *m)
{
    refine_work *w = calloc(1, sizeof *w);
    if (!w || rwork_init_f(&w->w, &m->m)) {
        free(w);
        return NULL;
    }
    return w;
}

void refine_work_delete(refine_work *w)
{
    if (!w)
        return;
    rwork_free_f(&w->w);
    free(w);
}

double refine_model_position(const refine_model *m, float *const *obj, size_t ostride, double s0, double s1,
                             const float *cnt, const unsigned char *valid, double scale, int amplitude,
                             refine_work *w, float *gt, double *g, float *Iout, double *dev, double *sumI)
{
    return rmodel_position_f(&m->m, obj, ostride, s0, s1, cnt, valid, scale, amplitude, &w->w, gt, g, Iout, dev, sumI);
}

void refine_model_probe(const refine_model *m, float *out)
{
    size_t n = m->m.n;
    memcpy(out, m->m.P, 2 * n * sizeof(float));
    fftwf_execute_dft(m->m.bwd, (fftwf_complex *)out, (fftwf_complex *)out);
    float s = (float)(1.0 / sqrt((double)n));
    for (size_t q = 0; q < 2 * n; q++)
        out[q] *= s;
}
