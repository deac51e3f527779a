/* sha256.h - SHA-256 (FIPS 180-4), incremental.  Used for the hashes A1111
 * writes into infotexts (models/lora.c's "Lora hashes").
 *
 * Ownership: the context is the caller's (no allocation). */
#ifndef LM_SHA256_H
#define LM_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct lm_sha256 {
    uint32_t h[8];
    uint64_t bytes;          /* message length so far */
    uint8_t block[64];
    size_t fill;             /* bytes waiting in block */
} lm_sha256;

void lm_sha256_init(lm_sha256 *s);
void lm_sha256_update(lm_sha256 *s, const void *data, size_t n);
/* The digest (32 bytes) into out; s must be initialised again before reuse. */
void lm_sha256_final(lm_sha256 *s, uint8_t out[32]);
/* The digest of n bytes as 64 lowercase hex digits and a NUL into hex. */
void lm_sha256_hex(const void *data, size_t n, char hex[65]);

#endif
