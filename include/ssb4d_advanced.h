/* ssb4d_advanced.h — the advanced part of ssb4d.h (the stages one by one), for programs written
 * against it: it is ssb4d.h with SSB4D_ADVANCED defined. New code may define SSB4D_ADVANCED and
 * include ssb4d.h instead. */
#ifndef SSB4D_ADVANCED
#define SSB4D_ADVANCED
#endif
#include "ssb4d.h"
