/* rans_tables.h — derived constant tables (generated with the frequency table, rans_table.c). */
#ifndef SSB4D_CODEC_RANS_TABLES_H
#define SSB4D_CODEC_RANS_TABLES_H
#include "codec/codec.h"

/* start[m][s] = sum of freq[m][0..s); start[m][33] = 1024. */
extern const uint16_t qem_rans_start[QEM_MODELS][QEM_SYMBOLS + 1];
/* The symbol that owns each of the 1024 slots of model m. */
extern const uint8_t qem_rans_slot_symbol[QEM_MODELS][1024];
#endif
