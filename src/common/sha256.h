/* sha256.h — incremental SHA-256 (OpenSSL libcrypto underneath) for hashes of G, images, traces. */
#ifndef SSB4D_COMMON_SHA256_H
#define SSB4D_COMMON_SHA256_H
#include <stddef.h>

typedef struct ssb4d_sha256 ssb4d_sha256;
ssb4d_sha256 *ssb_sha256_new(void);
void ssb_sha256_update(ssb4d_sha256 *h, const void *data, size_t n);
/* Writes 64 hex digits + NUL and frees h. */
void ssb_sha256_final_hex(ssb4d_sha256 *h, char hex[65]);
void ssb_sha256_hex(const void *data, size_t n, char hex[65]);
#endif
