/* json_exact.c — numbers in JSON that read back as the very double (ssb4d_json_exact): one
 * rewrite for the command line's --json and the viewer's answers. */
#include "ssb4d.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void ssb4d_json_exact(cJSON *j)
{
    for (cJSON *e = j ? j->child : NULL, *next; e; e = next) {
        next = e->next;
        if (!cJSON_IsNumber(e)) {
            ssb4d_json_exact(e);
            continue;
        }
        char buf[40];
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(buf, sizeof buf, "%.*g", prec, e->valuedouble);
            if (strtod(buf, NULL) == e->valuedouble)
                break;
        }
        cJSON *raw = isfinite(e->valuedouble) ? cJSON_CreateRaw(buf) : cJSON_CreateNull();
        if (raw) { /* the key moves over with its ownership */
            raw->string = e->string;
            raw->type |= e->type & cJSON_StringIsConst;
            e->string = NULL;
            cJSON_ReplaceItemViaPointer(j, e, raw);
        }
    }
}
