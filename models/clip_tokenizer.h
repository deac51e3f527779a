/* clip_tokenizer.h - CLIP's byte-level BPE tokenizer, read from a
 * checkpoint's tokenizer folder, giving the ids transformers' CLIPTokenizer
 * gives (transformers 5, the tokenizers-backed class; see docs/DIFFUSION.md).
 *
 * Files: vocab.json + merges.txt (as SD checkpoints ship them), or
 * tokenizer.json alone (as newer save_pretrained writes), plus
 * tokenizer_config.json and special_tokens_map.json for the bos / eos / pad /
 * unk tokens and model_max_length (77 when absent).  Every file is untrusted:
 * sizes are bounded and a bad file is LM_ERR_FORMAT naming the file and key
 * (or line).
 *
 * Text goes through: special tokens (<|startoftext|> ... written in the text)
 * split out first; NFC; every run of Unicode whitespace becomes one space;
 * full Unicode lowercasing, one code point at a time (as the tokenizers
 * library does: "İ" becomes "i" + U+0307); CLIP's pre-tokenizer pattern
 * 's|'t|'re|'ve|'m|'ll|'d|\p{L}+|\p{N}|[^\s\p{L}\p{N}]+ ; each piece's UTF-8
 * bytes through the GPT-2 byte-to-unicode table; BPE merges by rank with
 * "</w>" on the last symbol of each piece; a symbol not in the vocabulary is
 * the unk id.  No HTML unescaping and no ftfy: transformers does neither
 * (ftfy is absent there), so neither does this.
 *
 * Ownership: lm_clip_tokenizer_load returns a tokenizer freed with
 * lm_clip_tokenizer_free.  Not thread-safe (the BPE cache is per object). */
#ifndef LM_CLIP_TOKENIZER_H
#define LM_CLIP_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "error.h"

typedef struct lm_clip_tokenizer lm_clip_tokenizer;

/* dir: a tokenizer folder (tokenizer/ or tokenizer_2/ of a diffusers model).
 * NULL + error on failure. */
lm_clip_tokenizer *lm_clip_tokenizer_load(const char *dir);
void lm_clip_tokenizer_free(lm_clip_tokenizer *t);   /* NULL is fine */

/* Encodes len bytes of UTF-8 text (invalid bytes become U+FFFD) as
 * transformers' tokenizer(text, padding="max_length", truncation=True) does:
 * bos, the first max_length-2 tokens, eos, then pad ids up to max_length
 * when pad is true.  ids must hold max_length entries; *n gets the number
 * written and *n_full (may be NULL) the count before truncation (bos and
 * eos included), so callers can tell that a prompt was cut.  Texts over
 * 1 MiB, and single words (pre-tokenizer pieces) over 16 KiB, are
 * LM_ERR_ARG. */
lm_status lm_clip_tokenizer_encode(lm_clip_tokenizer *t, const char *text, size_t len, bool pad,
                                   int32_t *ids, int64_t *n, int64_t *n_full);

/* The ids of len bytes of text without bos / eos and untruncated, as
 * transformers' tokenizer(text, add_special_tokens=False, truncation=False)
 * gives them: *ids is borrowed, valid until the next call on t. */
lm_status lm_clip_tokenizer_tokens(lm_clip_tokenizer *t, const char *text, size_t len,
                                   const int32_t **ids, int64_t *n);
/* The id of a vocabulary string (byte-level form: ",</w>"), or -1. */
int32_t lm_clip_tokenizer_find(const lm_clip_tokenizer *t, const char *token);

int64_t lm_clip_tokenizer_max_length(const lm_clip_tokenizer *t);
int64_t lm_clip_tokenizer_vocab_size(const lm_clip_tokenizer *t);  /* largest id + 1 */
int32_t lm_clip_tokenizer_bos(const lm_clip_tokenizer *t);
int32_t lm_clip_tokenizer_eos(const lm_clip_tokenizer *t);
int32_t lm_clip_tokenizer_pad(const lm_clip_tokenizer *t);
/* The vocabulary string of id (byte-level form, "</w>" kept), or NULL. */
const char *lm_clip_tokenizer_token(const lm_clip_tokenizer *t, int32_t id);

#endif
