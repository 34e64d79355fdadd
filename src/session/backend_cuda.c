/* backend_cuda.c — the CUDA backend (src/session/backend.h): G is built as the CPU builds it,
 * then its planes go to the GPU (cuda_G_attach) with the CUDA pass table (src/ssb/backend.h);
 * every pass over that G (the fit's candidate batches, previews, the object, releases, region
 * refits) runs on the GPU through that table. */
#include "session/backend.h"

#ifdef SSB4D_HAVE_CUDA /* CMakeLists.txt: the CUDA backend is in this build */
#include "common/err.h"
#include "cuda/cuda.h"
#include "dist/dist.h"

static ssb4d_status cuda_gbuild(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix, size_t n_bf,
                                const ssb4d_gbuild_opts *o, ssb4d_mem *mem, ssb4d_G **out, ssb4d_err *err)
{
    ssb4d_status st = ssb4d_gbuild(src, g, bf_pix, n_bf, o, mem, out, err);
    if (st)
        return st;
    st = cuda_G_attach(*out, mem, err);
    if ((*out)->dist) /* every rank's device copy is made, or the job stops on every rank */
        st = dist_agree((*out)->dist, st, err);
    if (st) {
        ssb4d_G_free(*out);
        *out = NULL;
    }
    return st;
}

static const session_backend cuda = {
    .name = "cuda",
    .available = cuda_available,
    .gbuild = cuda_gbuild,
};

const session_backend *session_backend_cuda(void) { return &cuda; }
#endif
