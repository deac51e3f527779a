/* repl.h - what the files of the `lumen` program share: the command-line
 * tools and the interactive loop.  Running chunks under Ctrl-C protection
 * is host.h's; completion complete.h's, showing values show.h's. */
#ifndef LM_REPL_H
#define LM_REPL_H

#include <stdbool.h>
#include <stdint.h>
#include <lua.h>
#include <lauxlib.h>

/* ---- the command-line tools: each returns the exit status, or -1 when
 * argv is not its subcommand ---- */
int lm_cli_files(int argc, char **argv);    /* cli_files.c: compare, inspect */
int lm_cli_diff(int argc, char **argv);     /* cli_diff.c: diff (two dumps) */
/* cli_models.c: an flock on an output folder while an output is renamed in
 * (lumen upscale, lumen generate); -1 with "lumen PROG: ..." printed */
int lm_cli_lock_dir(const char *dir, const char *prog);
/* ... the folder dir of output out made and writable: 0, or 1 printed */
int lm_cli_out_dir(const char *dir, const char *out, const char *prog);
int lm_cli_batch(int argc, char **argv);    /* batch.c */
int lm_cli_models(int argc, char **argv);   /* cli_models.c: upscale, convert */
int lm_cli_generate(int argc, char **argv); /* cli_generate.c */
/* ... the `parameters` infotext it writes into each PNG (malloc'd), for
 * lumen serve; clip_skip is A1111's (1 = the last layer) */
struct lm_sd_pipeline;
typedef struct lm_cli_infotext_args {
    const struct lm_sd_pipeline *pipeline;
    const char *prompt, *negative, *sampler;   /* negative NULL: none given */
    int64_t steps, clip_skip, width, height;
    double cfg, strength;                      /* strength: img2img's */
    uint64_t seed;
    bool img2img;
    const char *lora_hashes;                   /* A1111's Lora hashes value, or NULL */
    bool inpaint;                              /* a mask: A1111's Mask blur is written */
    double mask_blur;
    bool full_res;                             /* "Only masked" with its padding */
    int64_t padding;
} lm_cli_infotext_args;
char *lm_cli_generate_infotext(const lm_cli_infotext_args *i);
/* An init image read as [C,H,W] f32 (taken: released here) as [3,H,W]:
 * lm_image_rgb's (alpha dropped, gray repeated; lm.image.rgb in Lua); NULL
 * in, NULL out (the reader's error). */
struct lm_array *lm_cli_init_rgb(struct lm_array *img);
int lm_cli_serve(int argc, char **argv);    /* serve.c: lumen serve */

/* ---- repl.c ---- */
int lm_repl_interactive(lua_State *L);

#endif
