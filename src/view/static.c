/* static.c — the page's files, embedded into the binary at build time (cmake/embed_web.cmake
 * writes view_assets.c from the files of web/). Only the names in that fixed list are served: a URL is looked
 * up, never joined to a path, so no path traversal is possible. */
#include "view/view_internal.h"

#include <string.h>

/* Defined in the generated view_assets.c. */
extern const view_asset view_assets[];
extern const size_t view_n_assets;

const view_asset *view_static_find(const char *url)
{
    if (!strcmp(url, "/") || !strcmp(url, "/index.html"))
        url = "/index.html";
    for (size_t i = 0; i < view_n_assets; i++)
        if (!strcmp(url, view_assets[i].url))
            return &view_assets[i];
    return NULL;
}
