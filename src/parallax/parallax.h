/* parallax.h — the parallax (tilt-corrected bright-field) estimate; public API in ssb4d.h. */
#ifndef SSB4D_PARALLAX_PARALLAX_H
#define SSB4D_PARALLAX_PARALLAX_H
#include "ssb4d.h"
#endif
