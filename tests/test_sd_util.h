/* test_sd_util.h - what the SD pipeline tests share (tests/test_sd_*.c):
 * the prompt pair the references of tests/ref/tiny_pipes.py were made with,
 * and generation options holding it. */
#ifndef LM_TEST_SD_UTIL_H
#define LM_TEST_SD_UTIL_H
#include "testutil.h"
#include "models/sd_pipeline.h"

static const char *const PROMPT = "a photo of an astronaut riding a horse";
static const char *const NEGATIVE = "blurry, low quality";

/* o with one prompt and one negative (the pair above), 4 steps, CFG 7 and
 * sampler; the rest lm_sd_gen_opts_init's */
static inline void sd_gen_opts(lm_sd_gen_opts *o, const char *sampler)
{
    static const char *pr[1], *ng[1];
    pr[0] = PROMPT;
    ng[0] = NEGATIVE;
    lm_sd_gen_opts_init(o);
    o->prompts = pr;
    o->nprompts = 1;
    o->negatives = ng;
    o->nnegatives = 1;
    o->steps = 4;
    o->cfg = 7;
    o->sampler = sampler;
}

#endif
