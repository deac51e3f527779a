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
#include "array.h"
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
    int32_t *extra;     /* NULL when no textual-inversion embedding is used, else
                           [n][LM_PROMPT_CHUNK + 2]: -1, or the row of the
                           embeddings' vector table that replaces the token
                           embedding there (whose id is 0, as A1111 writes it) */
} lm_prompt_chunks;

/* Textual-inversion embeddings as the chunker sees them: embedding i is
 * found where the tokens of its name (ids[i], nids[i] of them) stand in a
 * pair's tokens (the longest name first, as A1111's find_embedding_at_position),
 * and stands for vectors[i] tokens whose rows in the vector table start at
 * row[i]. */
typedef struct lm_prompt_ti {
    int n;
    const int32_t *const *ids;
    const int64_t *nids, *vectors, *row;
} lm_prompt_ti;

/* p: the pairs; tokens[i] / ntokens[i]: pair i's ids without BOS / EOS (a
 * BREAK pair's are ignored).  comma: the id of ",</w>" (-1 = none).  ti:
 * NULL or the embeddings to find.  An embedding that does not fit in the
 * chunk's room starts the next chunk (A1111's rule); one of more than 75
 * vectors is LM_ERR_ARG.  Where the comma backtrack moves an embedding's
 * tokens to the next chunk its vectors move with them (A1111 leaves its
 * "fixes" behind in the closed chunk, over the padding). */
lm_status lm_prompt_chunk_tokens(const lm_prompt *p, const int32_t *const *tokens,
                                 const int64_t *ntokens, int32_t bos, int32_t eos, int32_t comma,
                                 const lm_prompt_ti *ti, lm_prompt_chunks *out);

/* ---- textual-inversion embeddings ---- */

typedef struct lm_prompt_embedding {
    char *name;          /* the file's name without .safetensors: the word in prompts */
    char *file;
    int64_t vectors;     /* tokens it stands for */
    lm_array *vec[2];    /* [vectors, D] f32: the one-encoder form (A1111's emb_params,
                            string_to_param, or a file's single tensor) in vec[0];
                            SDXL's clip_l in vec[0] and clip_g in vec[1] */
    bool sdxl;           /* clip_l + clip_g */
} lm_prompt_embedding;

typedef struct lm_prompt_embeddings {
    lm_prompt_embedding *items;   /* sorted by name */
    int n;
} lm_prompt_embeddings;

/* Every *.safetensors file in dir (not its subfolders).  A file with
 * clip_l and clip_g is SDXL's; else its one tensor (emb_params,
 * string_to_param.*, or any single name) of rank 1 or 2 is the vectors.
 * Anything else (several tensors, rank 3, no rows) is LM_ERR_FORMAT naming
 * the file and its keys.  Files in other forms (.pt, .bin: pickles) are not
 * read.  *out is filled (zeroed first). */
lm_status lm_prompt_embeddings_load(const char *dir, lm_prompt_embeddings *out);
void lm_prompt_embeddings_free(lm_prompt_embeddings *e);
void lm_prompt_chunks_free(lm_prompt_chunks *c);

/* A prompt's chunks as A1111 encodes them with a CLIP tokenizer: the
 * extra-network tags removed, the pairs parsed, each pair tokenized alone
 * (no BOS / EOS, untruncated), chunked as above with the tokenizer's bos,
 * eos and ",</w>", then the ids after each chunk's first eos replaced by the
 * tokenizer's pad id (a no-op where pad is eos, as on SD 1.x). */
struct lm_clip_tokenizer;
lm_status lm_prompt_clip_chunks(struct lm_clip_tokenizer *tok, const char *text, size_t len,
                                lm_prompt_chunks *c);
/* ... finding the embeddings of db usable with an encoder: which is the
 * encoder's index (0, or 1 for SDXL's second), width its hidden size,
 * n_encoders the family's (an SDXL file is used on SDXL only, a
 * one-encoder file elsewhere only, and only where its width matches, as
 * A1111 skips the others).  *table gets the vector table [rows, width] f32
 * (a new reference; NULL when none is usable); c->extra indexes it. */
lm_status lm_prompt_clip_chunks_ti(struct lm_clip_tokenizer *tok, const char *text, size_t len,
                                   const lm_prompt_embeddings *db, int which, int n_encoders,
                                   int64_t width, lm_prompt_chunks *c, lm_array **table);

#endif
