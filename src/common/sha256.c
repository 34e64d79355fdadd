/* sha256.c — thin wrapper over OpenSSL's EVP digest. */
#include "common/sha256.h"

#include <openssl/evp.h>
#include <stdio.h>

struct ssb4d_sha256 {
    EVP_MD_CTX *ctx;
};

ssb4d_sha256 *ssb_sha256_new(void)
{
    static const struct ssb4d_sha256 zero; /* read-only */
    ssb4d_sha256 *h = OPENSSL_malloc(sizeof *h);
    if (!h)
        return NULL;
    *h = zero;
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(h->ctx);
        OPENSSL_free(h);
        return NULL;
    }
    return h;
}

void ssb_sha256_update(ssb4d_sha256 *h, const void *data, size_t n)
{
    if (h && n)
        EVP_DigestUpdate(h->ctx, data, n);
}

void ssb_sha256_final_hex(ssb4d_sha256 *h, char hex[65])
{
    unsigned char md[32];
    unsigned int len = 0;
    hex[0] = '\0';
    if (!h)
        return;
    EVP_DigestFinal_ex(h->ctx, md, &len);
    for (unsigned i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    EVP_MD_CTX_free(h->ctx);
    OPENSSL_free(h);
}

void ssb_sha256_hex(const void *data, size_t n, char hex[65])
{
    ssb4d_sha256 *h = ssb_sha256_new();
    ssb_sha256_update(h, data, n);
    ssb_sha256_final_hex(h, hex);
}
