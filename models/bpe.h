/* bpe.h - what the byte-level BPE tokenizers share (CLIP's in
 * clip_tokenizer.c, Qwen2's in qwen_tokenizer.c): the vocabulary as a
 * string -> id table, the merges as an id pair -> (rank, merged id) table,
 * GPT-2's byte-to-unicode table, reading vocab.json / merges.txt /
 * tokenizer.json's model.merges, and the merge loop.
 *
 * The merge loop is the tokenizers library's: a priority queue of the
 * adjacent pairs by (rank, position), one merge at a time, so a word of n
 * symbols takes O(n log n), not O(n^2).  For merge lists whose ranks grow as
 * each merge builds on earlier ones (every trained list) it gives what
 * merging all occurrences of the best pair pass after pass gives.
 *
 * Every merge "a b" must name two tokens whose concatenation is a token too
 * (as the tokenizers library requires), so a word is an array of ids.
 * what: the tokenizer's name in messages ("clip tokenizer"). */
#ifndef LM_BPE_H
#define LM_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "error.h"

typedef struct lm_bpe_ent {
    char *key;          /* NULL = empty; NUL-terminated copy */
    uint32_t klen;
    int32_t id;         /* vocab: the id; caches: number of ids */
    int32_t *ids;       /* caches only (freed by lm_bpe_table_clear) */
} lm_bpe_ent;

typedef struct lm_bpe_table {
    lm_bpe_ent *e;
    size_t cap, n;
} lm_bpe_table;

lm_bpe_ent *lm_bpe_table_find(const lm_bpe_table *t, const char *k, size_t n);
/* Inserts (copying k) or returns the existing entry (*fresh false); NULL +
 * error when out of memory. */
lm_bpe_ent *lm_bpe_table_put(lm_bpe_table *t, const char *k, size_t n, bool *fresh);
void lm_bpe_table_clear(lm_bpe_table *t);

typedef struct lm_bpe_merge {
    uint64_t pair;      /* a << 32 | b, +1 so that 0 is empty */
    int32_t rank, id;
} lm_bpe_merge;

typedef struct lm_bpe {
    const char *what;          /* name in messages */
    lm_bpe_table vocab;
    int64_t nids;              /* largest id + 1 */
    lm_bpe_merge *merges;
    size_t mcap;
    char byte_utf8[256][3];    /* each byte's printable stand-in, UTF-8 */
} lm_bpe;

/* Sets what and the byte table; the tables start empty. */
void lm_bpe_init(lm_bpe *b, const char *what);
void lm_bpe_free(lm_bpe *b);

int32_t lm_bpe_id(const lm_bpe *b, const char *s, size_t n);   /* -1 when absent */
/* Adds s with id unless s is there already (the first id stays); id must be
 * an integer in [0, 2^31).  file: for messages. */
lm_status lm_bpe_add(lm_bpe *b, const char *s, size_t n, double id, const char *file);
/* model.vocab of tokenizer.json or vocab.json: an object token -> id. */
lm_status lm_bpe_load_vocab(lm_bpe *b, const cJSON *v, const char *file);
/* merges.txt: the first max_merges merges ("#version" first line skipped). */
lm_status lm_bpe_load_merges_txt(lm_bpe *b, const char *path, size_t max_merges);
/* tokenizer.json's model.merges: "a b" strings or ["a", "b"] pairs. */
lm_status lm_bpe_load_merges_json(lm_bpe *b, const cJSON *merges, const char *file);

/* Merges the n ids of w in place (ids < 0 never merge); returns the new
 * count, or -1 + error when out of memory. */
int64_t lm_bpe_merge_word(const lm_bpe *b, int32_t *w, size_t n);

/* UTF-8 of code point c into o (4 bytes room); returns the byte count. */
size_t lm_bpe_put_utf8(unsigned char *o, int32_t c);

#endif
