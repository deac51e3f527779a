/* fuzz_tokenizer.h - shared by the tokenizer harnesses: the CLIP tokenizer
 * reads a folder, so each input is written into files of one folder made
 * once per process, loaded, and (when it loads) made to encode fixed texts
 * and the input's own bytes, so BPE runs over the merges it read. */
#ifndef FUZZ_TOKENIZER_H
#define FUZZ_TOKENIZER_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/lumen.h"
#include "models/clip_tokenizer.h"

static const char *fz_dir(void)
{
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/lumen_fuzz_tok_XXXXXX");
        if (!mkdtemp(dir)) abort();   /* the harness's own set-up, not the input */
        lm_init();
    }
    return dir;
}

/* writes n bytes to dir/name, or removes it when data is NULL */
static void fz_put(const char *name, const void *data, size_t n)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s", fz_dir(), name);
    unlink(p);
    if (!data) return;
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) abort();
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, (const char *)data + done, n - done);
        if (w <= 0) abort();
        done += (size_t)w;
    }
    close(fd);
}

static void fz_load_and_encode(const unsigned char *text, size_t n)
{
    lm_clip_tokenizer *t = lm_clip_tokenizer_load(fz_dir());
    if (!t) {
        lm_error_clear();
        return;
    }
    int64_t m = lm_clip_tokenizer_max_length(t);
    int32_t *ids = malloc(sizeof *ids * (size_t)(m > 0 ? m : 1));
    if (ids) {
        static const char *const fixed[] = {"a photo of an astronaut riding a horse",
                                            "<|startoftext|>x<|endoftext|> İ 's 12 !!", ""};
        int64_t k, full;
        for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
            if (lm_clip_tokenizer_encode(t, fixed[i], strlen(fixed[i]), true, ids, &k, &full) != LM_OK)
                lm_error_clear();
        if (lm_clip_tokenizer_encode(t, (const char *)text, n < 4096 ? n : 4096, false, ids, &k,
                                     &full) != LM_OK)
            lm_error_clear();
        for (int32_t id = 0; id < 8; id++) (void)lm_clip_tokenizer_token(t, id);
    }
    free(ids);
    lm_clip_tokenizer_free(t);
}

#endif
