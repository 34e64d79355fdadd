/* public.c — the .qem folder's calls for clients (include/ssb4d.h). */
#include "codec/codec.h"
#include "ssb4d_advanced.h"

#include <stdint.h>

size_t ssb4d_qem_index_check_bytes(size_t det_rows, size_t det_cols)
{
    return qem_spatial_fields(det_rows, det_cols) * QEM_INTERVAL * sizeof(uint32_t);
}
