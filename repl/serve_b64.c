/* serve_b64.c - base64 for lumen serve (serve.h): the PNGs it answers with
 * and the init images and masks it is sent (RFC 4648; the URL-safe
 * alphabet read too).  Its own file so that the request parser
 * (serve_req.c) and the worker (serve_worker.c) share it without leaning on
 * each other. */
#include <stdint.h>
#include <stdlib.h>
#include "repl/serve.h"

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *serve_b64_encode(const unsigned char *p, size_t n)
{
    char *r = malloc((n + 2) / 3 * 4 + 1), *o = r;
    if (!r) return NULL;
    size_t i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *o++ = b64chars[v >> 18];
        *o++ = b64chars[(v >> 12) & 63];
        *o++ = b64chars[(v >> 6) & 63];
        *o++ = b64chars[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
        *o++ = b64chars[v >> 18];
        *o++ = b64chars[(v >> 12) & 63];
        *o++ = i + 1 < n ? b64chars[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    *o = 0;
    return r;
}

static int b64val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;   /* '-' '_': the URL-safe alphabet too */
    if (c == '/' || c == '_') return 63;
    return -1;
}

/* NULL for anything but base64 (whitespace skipped, padding optional) */
unsigned char *serve_b64_decode(const char *s, size_t n, size_t *out)
{
    unsigned char *r = malloc(n / 4 * 3 + 3), *o = r;
    if (!r) return NULL;
    uint32_t acc = 0;
    int bits = 0;
    size_t i = 0;
    for (; i < n && s[i] != '='; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
        int v = b64val(c);
        if (v < 0) { free(r); return NULL; }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            *o++ = (unsigned char)(acc >> bits);
        }
    }
    for (; i < n; i++)
        if (s[i] != '=' && s[i] != '\n' && s[i] != '\r') { free(r); return NULL; }
    *out = (size_t)(o - r);
    return r;
}
