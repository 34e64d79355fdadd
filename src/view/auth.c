/* auth.c — who may drive the session: the holder of the URL's token (other local users and web
 * pages the person visits must not), through a Host that names this server (a page on another
 * name that rebinds its DNS to 127.0.0.1 sends its own Host: DNS rebinding). */
#include "view/view_internal.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

int view_token_new(char out[33])
{
    unsigned char b[16];
    size_t got = 0;
    while (got < sizeof b) { /* getrandom may return fewer bytes when interrupted */
        ssize_t n = getrandom(b + got, sizeof b - got, 0);
        if (n < 0)
            return -1;
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
    return 0;
}

int view_check_host(const view_server *v, const char *host)
{
    if (!host)
        return 403;
    char a[64], b[64];
    snprintf(a, sizeof a, "127.0.0.1:%d", v->port);
    snprintf(b, sizeof b, "localhost:%d", v->port);
    if (!strcmp(host, a) || !strcmp(host, b))
        return 0;
    /* --allow-host: a proxy in front (JupyterHub, a reverse proxy) sends its own name. The name
     * matches with any port or none; the token is still required. */
    for (int i = 0; i < v->cfg.n_allow_hosts; i++) {
        const char *n = v->cfg.allow_hosts[i];
        size_t k = strlen(n);
        if (!strncasecmp(host, n, k) && (host[k] == 0 || (host[k] == ':' && strspn(host + k + 1, "0123456789") ==
                                                                                   strlen(host + k + 1))))
            return 0;
    }
    return 403;
}

int view_check_token(const view_server *v, const char *token)
{
    if (!token || !*token)
        return 401;
    /* Constant time over the token's length: the comparison does not tell how much matched. */
    size_t n = strlen(token);
    unsigned diff = n != 32;
    for (size_t i = 0; i < 32; i++)
        diff |= (unsigned)(unsigned char)v->token[i] ^ (unsigned)(unsigned char)(i < n ? token[i] : 0);
    return diff ? 403 : 0;
}
