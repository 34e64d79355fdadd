/* public.c — the source folder's calls for clients (include/ssb4d.h, "For clients"). */
#include "source/source.h"

int ssb4d_sidecar_find(const char *data, char *out, size_t n) { return ssb_sidecar_find(data, out, n); }

void ssb4d_source_done_with(ssb4d_source *s, size_t pos0, size_t npos) { ssb_source_done_with(s, pos0, npos); }
