/* qwen_tokenizer.h - Qwen2's byte-level BPE tokenizer (the tokenizer of the
 * Qwen2.5 / Qwen3 text encoders that Z-Image and FLUX.2-klein condition on)
 * and the chat template their pipelines apply, giving what transformers 5's
 * Qwen2TokenizerFast gives (see docs/DIFFUSION.md).
 *
 * Files of a tokenizer folder:
 *  - tokenizer.json: model BPE (vocab, merges as "a b" or ["a", "b"],
 *    unk_token, ignore_merges), normalizer NFC or none, pre_tokenizer
 *    Sequence[Split(Regex, Isolated), ByteLevel(no prefix space, no regex)],
 *    added_tokens with their special / normalized flags, decoder ByteLevel.
 *    Any other normalizer, pre-tokenizer, model, decoder or post-processor is
 *    LM_ERR_UNSUPPORTED naming the key and its value.  truncation / padding
 *    are per-call state there (transformers overrides them on every call) and
 *    are not read.
 *  - or vocab.json + merges.txt (Qwen2Tokenizer: NFC and the Qwen2 split),
 *    with the added tokens of tokenizer_config.json's added_tokens_decoder.
 *  - tokenizer_config.json: eos_token, pad_token, model_max_length,
 *    chat_template, added_tokens_decoder; chat_template.jinja (transformers 5
 *    writes the template there) wins over chat_template.
 * Every file is untrusted: sizes are bounded and a bad file is an error
 * naming the file and key.
 *
 * Text goes through: added tokens matched in the raw text, leftmost then
 * longest, as the tokenizers library does (special ones like <|im_end|> and
 * others like <think> alike; "normalized" ones after NFC); NFC; the split
 * regex (ICU's engine; \s and \S read as Unicode White_Space as Oniguruma
 * reads them); each piece's UTF-8 bytes through the GPT-2 byte table; BPE
 * merges by rank (bpe.c).  No special tokens are added around the text:
 * Qwen2 adds none.
 *
 * Chat template: no general Jinja.  Qwen3's template and ChatML templates
 * (Qwen2 / Qwen2.5's, with their default system message) are recognised by
 * their structure (whitespace and Jinja's "-" trims ignored) and rendered for
 * one user message with the generation prompt; any other template is refused
 * when chat is asked, naming where it came from, its first characters and a
 * hash.
 *
 * Ownership: lm_qwen_tokenizer_load returns a tokenizer freed with
 * lm_qwen_tokenizer_free; strings and ids returned are malloc'd, the
 * caller's to free.  The tokenizer is not changed by encoding, so one may be
 * shared between threads. */
#ifndef LM_QWEN_TOKENIZER_H
#define LM_QWEN_TOKENIZER_H

#include <stdint.h>
#include "error.h"

typedef struct lm_qwen_tokenizer lm_qwen_tokenizer;

/* dir: a tokenizer folder (tokenizer/ of a diffusers Z-Image or FLUX.2
 * folder, or a Qwen model folder).  NULL + error on failure. */
lm_qwen_tokenizer *lm_qwen_tokenizer_load(const char *dir);
void lm_qwen_tokenizer_free(lm_qwen_tokenizer *t);   /* NULL is fine */

/* Largest id + 1, added tokens included (len(tokenizer) in transformers). */
int64_t lm_qwen_tokenizer_vocab_size(const lm_qwen_tokenizer *t);
/* The pad / eos token ids of tokenizer_config.json, -1 when there is none. */
int32_t lm_qwen_tokenizer_pad_id(const lm_qwen_tokenizer *t);
int32_t lm_qwen_tokenizer_eos_id(const lm_qwen_tokenizer *t);
/* tokenizer_config.json's model_max_length, -1 when absent or unset. */
int64_t lm_qwen_tokenizer_max_length(const lm_qwen_tokenizer *t);

/* Encodes NUL-terminated UTF-8 text (invalid bytes become U+FFFD); *ids gets
 * a malloc'd array of *n ids (a valid pointer even when *n is 0).  Texts over
 * 16 MiB are LM_ERR_ARG. */
lm_status lm_qwen_tokenizer_encode(const lm_qwen_tokenizer *t, const char *text, int32_t **ids,
                                   int64_t *n);
/* As tokenizer(text, padding="max_length", max_length=max_length,
 * truncation=True): the first max_length ids, then the pad id up to
 * max_length; mask 1 at the text's ids and 0 at the padding (mask may be
 * NULL).  ids and mask hold max_length entries; *n_real (may be NULL) gets
 * the number of text ids kept.  No pad token is LM_ERR_ARG. */
lm_status lm_qwen_tokenizer_encode_padded(const lm_qwen_tokenizer *t, const char *text,
                                          int64_t max_length, int32_t *ids, int32_t *mask,
                                          int64_t *n_real);
/* The text of n ids, special tokens kept, byte sequences that are not UTF-8
 * as U+FFFD (errors="replace"); malloc'd, NULL + error on an id outside the
 * vocabulary. */
char *lm_qwen_tokenizer_decode(const lm_qwen_tokenizer *t, const int32_t *ids, int64_t n);

/* What apply_chat_template([{"role": "user", "content": user_prompt}],
 * tokenize=False, add_generation_prompt=True, enable_thinking=...) renders;
 * enable_thinking 1 (True), 0 (False) or -1 (not passed).  malloc'd; NULL +
 * error when the folder has no template or an unknown one. */
char *lm_qwen_tokenizer_chat(const lm_qwen_tokenizer *t, const char *user_prompt,
                             int enable_thinking);

#endif
