/* prompt.h - AUTOMATIC1111's prompt syntax: emphasis weights, BREAK, its
 * extra-network tags, and the 75-token chunks its CLIP wrapper encodes.
 *
 * lm_prompt_parse gives the (text, weight) pairs A1111's
 * modules/prompt_parser.py parse_prompt_attention gives, bit for bit
 * (tests/test_prompt.c against tests/ref/gen_prompt.py's fixture):
 *   (text) x1.1, (text:W) xW, [text] /1.1, nested multiplying; \( \) \[ \]
 *   \\ escapes (a lone backslash before anything else vanishes); a bracket
 *   never closed multiplies everything after it (round ones first, then
 *   square ones); a closer with no opener, ':' and a "(text:W)" weight with
 *   no "(" open are plain text; BREAK (a whole word, with the whitespace
 *   around it) is its own pair ("BREAK", -1), multiplied by the brackets
 *   around it like any other pair (so "(a BREAK b)" holds ("BREAK", -1.1),
 *   which A1111 then encodes as the word); neighbours of equal weight are
 *   merged; no text at all is one pair ("", 1).  "\s", "\b" and the digits
 *   of a weight are Unicode's, as Python's re: "(x:\u0661.\u0665)" is 1.5.
 *   A weight that matches [+-]?[.0-9]+ but is no number ("(a:1.2.3)",
 *   "(a:.)") is LM_ERR_ARG naming it (Python's float() raises there too).
 *   A1111's scheduling ([a:b:0.5]) and alternation ([a|b]) are not parsed
 *   here, as parse_prompt_attention does not: they are square-bracketed text.
 *
 * lm_prompt_extra_networks removes the <kind:arg[:arg...]> tags
 * (<lora:name:0.8>, <lyco:...>, <hypernet:...>) as A1111's
 * modules/extra_networks.py parse_prompt does: leftmost first, kind one or
 * more word characters, then ':' and at least one character other than '>'
 * up to the first '>'; args split at ':'.
 *
 * lm_prompt_chunk_tokens is sd_hijack_clip.py's tokenize_line given the
 * pairs' token ids: chunks of 75 tokens (BOS + 75 + EOS = 77), a BREAK pair
 * closing the chunk (padded), a chunk that fills while the last comma is at
 * most 20 tokens back moving the tokens after that comma to the next chunk
 * (A1111's comma_padding_backtrack, default 20), padding with EOS (multiplier
 * 1), at least one chunk.  The caller replaces the ids after the first EOS
 * by the tokenizer's pad id where that differs (SD 2.x, SDXL's second
 * encoder), as A1111's process_tokens does.
 *
 * Ownership: every structure filled here is freed with its _free function
 * (which also accepts a zeroed one); nothing is borrowed. */
#ifndef LM_PROMPT_H
#define LM_PROMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "error.h"

typedef struct lm_prompt_pair {
    char *text;        /* NUL-terminated copy (len bytes; the text may hold NULs) */
    size_t len;
    double weight;     /* -1 (times the brackets around it) for BREAK */
} lm_prompt_pair;

typedef struct lm_prompt {
    lm_prompt_pair *pairs;
    int64_t n;
} lm_prompt;

/* len bytes of UTF-8 (an invalid byte is a character of its own that is
 * neither a word character nor whitespace).  *out is filled (zeroed first);
 * LM_ERR_ARG for a weight that is no number, LM_ERR_NOMEM. */
lm_status lm_prompt_parse(const char *text, size_t len, lm_prompt *out);
void lm_prompt_free(lm_prompt *p);
/* whether a pair is A1111's BREAK: text "BREAK" and weight exactly -1 */
bool lm_prompt_pair_is_break(const lm_prompt_pair *p);

typedef struct lm_prompt_network {
    char *kind;        /* "lora", "lyco", "hypernet", ... */
    int nargs;         /* >= 1 */
    char **args;       /* the text between the first ':' and '>' split at ':' */
} lm_prompt_network;

typedef struct lm_prompt_networks {
    lm_prompt_network *items;
    int n;
} lm_prompt_networks;

/* *clean: a new NUL-terminated string (free()), the text without the tags;
 * *clean_len (may be NULL) its length.  list may be NULL (the tags are only
 * removed). */
lm_status lm_prompt_extra_networks(const char *text, size_t len, char **clean, size_t *clean_len,
                                   lm_prompt_networks *list);
void lm_prompt_networks_free(lm_prompt_networks *l);

#define LM_PROMPT_CHUNK 75             /* tokens of a chunk, BOS and EOS aside */
#define LM_PROMPT_COMMA_BACKTRACK 20

typedef struct lm_prompt_chunks {
    int64_t n;          /* chunks */
    int32_t *ids;       /* [n][LM_PROMPT_CHUNK + 2] */
    float *mults;       /* [n][LM_PROMPT_CHUNK + 2] */
} lm_prompt_chunks;

/* p: the pairs; tokens[i] / ntokens[i]: pair i's ids without BOS / EOS (a
 * BREAK pair's are ignored).  comma: the id of ",</w>" (-1 = none). */
lm_status lm_prompt_chunk_tokens(const lm_prompt *p, const int32_t *const *tokens,
                                 const int64_t *ntokens, int32_t bos, int32_t eos, int32_t comma,
                                 lm_prompt_chunks *out);
void lm_prompt_chunks_free(lm_prompt_chunks *c);

/* A prompt's chunks as A1111 encodes them with a CLIP tokenizer: the
 * extra-network tags removed, the pairs parsed, each pair tokenized alone
 * (no BOS / EOS, untruncated), chunked as above with the tokenizer's bos,
 * eos and ",</w>", then the ids after each chunk's first eos replaced by the
 * tokenizer's pad id (a no-op where pad is eos, as on SD 1.x). */
struct lm_clip_tokenizer;
lm_status lm_prompt_clip_chunks(struct lm_clip_tokenizer *tok, const char *text, size_t len,
                                lm_prompt_chunks *c);

#endif
