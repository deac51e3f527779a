/* cli_generate.c - `lumen generate`: one prompt to PNG images with a Stable
 * Diffusion pipeline (models/sd_pipeline.h).
 *
 *   lumen generate "prompt" --model DIR|FILE -o out.png [options]  (usage() lists them)
 *
 * Each PNG carries a `parameters` tEXt chunk written as AUTOMATIC1111's
 * create_infotext writes it, so A1111, ComfyUI and image browsers read the
 * prompt and settings back.  With --batch-size N the N images (seeds seed,
 * seed+1, ...) run in one UNet call and go to OUT with "%d" replaced by the
 * index, or "_0000"... before the extension, as core/io's batch writer names
 * them.  Outputs are checked (their folders made, as lumen upscale makes
 * them) before the model loads, and again, under an flock on the folder,
 * just before each is renamed into place: an existing file is replaced only
 * with --overwrite.  A NaN in any stage is an error and writes nothing
 * (lm_sd_generate names the stage).  "--" ends the options (a prompt may
 * then start with "-").  Exit 0 when every image was written, 1 on a
 * failure, 2 on a usage error. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "core/io/image.h"
#include "core/io/io.h"
#include "core/lumen.h"
#include "models/dit_pipeline.h"
#include "models/lora.h"
#include "models/sampler.h"
#include "models/sd_hires.h"
#include "models/sd_pipeline.h"
#include "lua/term_image.h"
#include "lua/xyz_grid.h"
#include "repl.h"

typedef struct gen_args {
    const char *prompt, *negative, *model, *out, *sampler, *init, *tokenizer, *prediction;
#define GEN_MAX_REFS 8
    const char *refs[GEN_MAX_REFS];   /* --ref: FLUX.2-klein's reference images, in order */
    int nrefs;
    int text_layers[LM_SD_MAX_LAYERS], n_text_layers;   /* --text-layers: DiT families */
    const char *device_name;
    lm_device *device;
    lm_dtype dtype;
    int64_t steps, width, height, batch, clip_skip;
    double cfg, strength;
    uint64_t seed;
    bool has_seed, overwrite, quiet, offload;
    bool show;   /* --show: each image drawn in the terminal (lua/term_image.h) */
    bool plain_prompt;   /* --no-prompt-syntax */
    const char *embeddings;   /* --embeddings DIR */
    bool has_steps, has_cfg, has_sampler, has_strength;   /* else the model family's */
#define GEN_MAX_LORAS 32
    const char *loras[GEN_MAX_LORAS];   /* --lora FILE[:W], in order (models/lora.h) */
    int nloras;
    const char *lora_dir;               /* --lora-dir: where <lora:NAME:W> tags are found */
    char lora_hashes[2048];             /* the infotext's Lora hashes, once loaded */
    /* the hires fix (models/sd_hires.h), A1111's variation seed, X/Y/Z grids */
    bool hires, has_var_seed;
    double hires_scale, hires_denoise, var_strength;
    int64_t hires_steps, hires_w, hires_h, base_w, base_h, resize_w, resize_h;
    const char *hires_upscaler, *font;
    uint64_t var_seed;
#define GEN_MAX_AXES 3
    const char *xyz[GEN_MAX_AXES];
    int nxyz;
    /* inpainting (models/sd_inpaint.h): --mask, --mask-blur, --mask-overlay */
    const char *mask;
    double mask_blur;
    bool has_mask_blur, mask_overlay, full_res, has_padding;
    int64_t padding;      /* --inpaint-padding (A1111's default 32) */
    lm_array *mask_img;   /* the --mask PNG [C,H,W] f32, read once */
} gen_args;

static int usage(const char *msg)
{
    const lm_sd_defaults *d = &lm_sd_defaults_generic;
    char names[1024];
    if (msg) fprintf(stderr, "lumen generate: %s\n", msg);
    fprintf(msg ? stderr : stdout,
            "usage: lumen generate \"PROMPT\" --model DIR|FILE -o OUT.png [options]\n"
            "  --model DIR|FILE   a diffusers folder (model_index.json: SD 1.x, 2.x, SDXL,\n"
            "                     Z-Image, FLUX.2-klein) or a single-file .safetensors or\n"
            "                     .gguf checkpoint (SD 1.x, 2.x, SDXL)\n"
            "  --negative TEXT    the negative prompt (default none: SDXL then conditions on\n"
            "                     zeros, as diffusers does; --negative '' on the empty prompt)\n"
            "  --steps N          sampler steps (default: the model family's, %d for SD)\n"
            "  --cfg X            classifier-free guidance scale; <= 1 runs without (default: the\n"
            "                     model family's, %g for SD)\n"
            "  --sampler NAME     %s,\n"
            "                     or A1111's names (\"Euler a\", \"DPM++ 2M Karras\"...) (default:\n"
            "                     the model family's, %s for SD); --sampler list prints the\n"
            "                     table (Lumen's and A1111's names, the diffusers scheduler)\n"
            "  --seed N           the seed (default: a random one, printed)\n"
            "  --size WxH         image size, multiples of 8 (default: the model's, 512x512 for\n"
            "                     SD 1.5, 1024x1024 for SDXL)\n"
            "  --init IN.png      img2img: start from this image (its size is the output's;\n"
            "                     with --size, resized to it first, A1111's \"Just resize\")\n"
            "  --strength X       img2img: how much to change it, (0, 1] (default %g)\n"
            "  --mask M.png       inpainting with --init: repaint the mask's white part (the\n"
            "                     init image's size or resized to it; >= 50%% gray repaints),\n"
            "                     as diffusers'\n"
            "                     inpaint pipelines: a 9-channel inpainting model gets the\n"
            "                     mask, another keeps the init image outside it\n"
            "  --mask-blur N      blur the mask first by N pixels (PIL's GaussianBlur, as\n"
            "                     diffusers' mask_processor.blur; default 0)\n"
            "  --mask-overlay     paste the init image back outside the (blurred) mask after\n"
            "                     the decode (A1111's overlay)\n"
            "  --inpaint-full-res A1111's \"Only masked\": inpaint the mask's box (padded, grown\n"
            "                     to the image's aspect) at the image's size, paste it back\n"
            "  --inpaint-padding N  ... the box's padding in pixels (default 32)\n"
            "  --ref IN.png       FLUX.2-klein: a reference image to edit from (repeatable, in\n"
            "                     order; sides >= 64, at most 1024x1024 pixels, centre-cropped\n"
            "                     to multiples of 16; the first one's size is the default size)\n"
            "  --batch-size N     N images (seeds N, N+1, ...) in one UNet call; each is the\n"
            "                     same bytes as alone (default 1)\n"
            "  --device D         cpu, vulkan, vulkan:N (default: $LUMEN_DEVICE or the best device)\n"
            "  --dtype T          f32, f16 or bf16 (default f16 on a GPU, f32 on the CPU)\n"
            "  --tokenizer DIR    single files: a diffusers folder (or tokenizer folder) to take\n"
            "                     tokenizer/ [tokenizer_2/] and scheduler/ from\n"
            "  --prediction P     epsilon or v_prediction, overriding the scheduler config\n"
            "  --offload          Z-Image, FLUX.2-klein: one network on the device at a time (both\n"
            "                     read again for each image): the peak is the larger one's\n"
            "  --text-layers L,.. Z-Image, FLUX.2-klein: the text encoder's hidden states taken\n"
            "                     (1-based, as diffusers' hidden_states[L]; default the family's)\n"
            "  --clip-skip N      A1111's Clip skip: 1 = the text encoder's last layer (default),\n"
            "                     2 = the penultimate (diffusers' clip_skip=1)\n"
            "  --lora FILE[:W]    merge a LoRA / LoHa / LoKr .safetensors at weight W (default 1;\n"
            "                     repeatable); <lora:NAME:W> in the prompt loads NAME.safetensors\n"
            "                     from --lora-dir DIR\n"
            "  --no-prompt-syntax the prompts as plain text cut at 77 tokens (diffusers); by\n"
            "                     default A1111's: (word:1.2), [word], BREAK, long prompts in\n"
            "                     chunks of 75 tokens, <lora:...> tags removed (SD families;\n"
            "                     Z-Image, FLUX.2-klein: the tags removed, the rest literal)\n"
            "  --embeddings DIR   textual-inversion embeddings (A1111's *.safetensors): a\n"
            "                     file's name in the prompt stands for its vectors\n"
            "  --hires X          hires fix: generate at --size, upscale by X, then img2img there\n"
            "  --hires-size WxH   ... to this size instead (0 for one side keeps the aspect)\n"
            "  --hires-steps N    ... the img2img's steps (int(N * denoise) run; default --steps)\n"
            "  --hires-denoise X  ... its strength, (0, 1] (default 0.7)\n"
            "  --hires-upscaler U latent (bilinear), latent-nearest, latent-bilinear, or a Lumen\n"
            "                     upscaler (esrgan-thick, ...; lumen upscale's names) (default latent)\n"
            "  --variation-seed N A1111's variation seed: the start noise slerped toward N's\n"
            "  --variation-strength X  ... by X in [0, 1] (default 0: off)\n"
            "  --seed-resize-from WxH  A1111's: the start noise drawn for this size, pasted\n"
            "                     centred into the image's (a composition kept across sizes)\n"
            "  --xyz NAME=V1,V2   an X/Y/Z plot axis (up to 3: X, Y, Z): seed, cfg, steps, sampler,\n"
            "                     strength, clip_skip, prompt_sr (the first value replaced by each),\n"
            "                     variation_seed, variation_strength, hires_steps, hires_denoise,\n"
            "                     hires_scale, lora:NAME (the weight of --lora's NAME.safetensors or\n"
            "                     of a <lora:NAME> tag); writes each image plus OUT_grid.png (one per Z)\n"
            "  --font FILE        the grid labels' font (default DejaVu Sans, fonts-dejavu-core)\n"
            "  -o OUT.png         the output (its folder is made); --overwrite replaces an\n"
            "                     existing file\n"
            "  -q, --quiet        no progress bar or result line\n"
            "  --show             draw each image in the terminal after writing it (kitty,\n"
            "                     iTerm2, sixel or half blocks; nothing when stdout is not a\n"
            "                     terminal; LUMEN_IMAGES=kitty|iterm|sixel|blocks|off chooses)\n"
            "  --                 the end of the options: a prompt after it may start with -\n",
            d->steps, d->cfg, lm_sampler_list(names, sizeof names, false), d->sampler,
            d->strength);
    return 2;
}

static int bad_value(const char *opt, const char *val, const char *accepted)
{
    fprintf(stderr, "lumen generate: %s %s: expected %s\n", opt, val, accepted);
    return 2;
}

/* a whole number in option id's range (models/family.h), the CLI's value
 * being the option's plus offset (A1111's Clip skip: 1); else the usage
 * error naming the option and the range */
static int parse_opt_int(const char *opt, const char *s, lm_sd_opt id, int64_t offset, int64_t *out)
{
    char *end, range[96];
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || lm_sd_option_check_int(id, NULL, NULL, (int64_t)v - offset) != LM_OK) {
        lm_error_clear();
        return bad_value(opt, s, lm_sd_option_range(id, offset, range, sizeof range));
    }
    *out = v;
    return 0;
}

static int parse_opt_num(const char *opt, const char *s, lm_sd_opt id, double *out)
{
    char *end, range[96];
    double v = strtod(s, &end);
    if (!*s || *end || v != v || lm_sd_option_check_num(id, NULL, NULL, v) != LM_OK) {
        lm_error_clear();
        return bad_value(opt, s, lm_sd_option_range(id, 0, range, sizeof range));
    }
    *out = v;
    return 0;
}

/* the error, after what unless the message names it already */
static void report(const char *what)
{
    const char *msg = lm_error_message();
    if (!strncmp(msg, "generate: ", 10)) msg += 10;
    if (what && strstr(msg, what)) what = NULL;
    fprintf(stderr, "lumen generate: %s%s%s\n", what ? what : "", what ? ": " : "", msg);
}

/* the hires fix's, the variation seed's and the grid's options: 0 parsed,
 * -1 not one of them, else the exit status */
static int parse_more(const char *s, const char *v, gen_args *a)
{
    int64_t n;
    int rc;
    char *end;
    if (!strcmp(s, "--hires")) {
        a->hires_scale = strtod(v, &end);
        if (!*v || *end || !(a->hires_scale > 0 && a->hires_scale <= 16))
            return bad_value(s, v, "a number in (0, 16]");
        a->hires = true;
    } else if (!strcmp(s, "--hires-size")) {
        if (sscanf(v, "%" SCNd64 "x%" SCNd64 "%n", &a->hires_w, &a->hires_h, &rc) != 2 || v[rc] ||
            a->hires_w < 0 || a->hires_h < 0 || (!a->hires_w && !a->hires_h) || a->hires_w > 65536 ||
            a->hires_h > 65536)
            return bad_value(s, v, "WxH, each 0 to 65536 pixels, not both 0 (0 keeps the aspect)");
        a->hires = true;
    } else if (!strcmp(s, "--hires-steps")) {
        if ((rc = parse_opt_int(s, v, LM_SD_OPT_STEPS, 0, &a->hires_steps))) return rc;
    } else if (!strcmp(s, "--hires-denoise")) {
        if ((rc = parse_opt_num(s, v, LM_SD_OPT_STRENGTH, &a->hires_denoise))) return rc;
    } else if (!strcmp(s, "--hires-upscaler")) {
        a->hires_upscaler = v;
    } else if (!strcmp(s, "--variation-seed")) {
        if ((rc = parse_opt_int(s, v, LM_SD_OPT_SEED, 0, &n))) return rc;
        a->var_seed = (uint64_t)n;
        a->has_var_seed = true;
    } else if (!strcmp(s, "--variation-strength")) {
        a->var_strength = strtod(v, &end);
        if (!*v || *end || !(a->var_strength >= 0 && a->var_strength <= 1))
            return bad_value(s, v, "a number from 0 to 1");
    } else if (!strcmp(s, "--seed-resize-from")) {
        if (lm_sd_size_parse(NULL, NULL, v, &a->resize_w, &a->resize_h) != LM_OK) {
            lm_error_clear();
            return bad_value(s, v, "WxH or N (pixels)");
        }
    } else if (!strcmp(s, "--xyz")) {
        if (a->nxyz == GEN_MAX_AXES) return usage("--xyz: at most 3 axes (X, Y, Z)");
        a->xyz[a->nxyz++] = v;
    } else if (!strcmp(s, "--font")) {
        a->font = v;
    } else return -1;
    return 0;
}

/* 0 = parsed, -1 = help printed, else the exit status */
static int parse_args(int argc, char **argv, gen_args *a)
{
    bool options = true;
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        if (options && !strcmp(s, "--")) {   /* getopt's end of options */
            options = false;
            continue;
        }
        if (!options) {
            if (a->prompt)
                return usage("one prompt only (quote it: lumen generate -- \"-a red fox\" ...)");
            a->prompt = s;
            continue;
        }
        static const char *const valued[] = {
            "-o", "--model", "--negative", "--steps", "--cfg", "--sampler", "--seed", "--size",
            "--init", "--strength", "--device", "--dtype", "--batch-size", "--tokenizer",
            "--prediction", "--clip-skip", "--ref", "--text-layers", "--lora", "--lora-dir",
            "--embeddings", "--hires", "--hires-size", "--hires-steps", "--hires-denoise",
            "--hires-upscaler", "--variation-seed", "--variation-strength", "--xyz", "--font",
            "--seed-resize-from", "--mask", "--mask-blur", "--inpaint-padding", NULL};
        bool takes = false;
        for (int k = 0; valued[k]; k++) takes |= !strcmp(s, valued[k]);
        if (takes && i + 1 >= argc) {
            fprintf(stderr, "lumen generate: %s needs a value (lumen generate --help lists the "
                    "options)\n", s);
            return 2;
        }
        const char *v = takes ? argv[++i] : NULL;
        int64_t n;
        int rc = 0;
        if (!strcmp(s, "-o")) a->out = v;
        else if (!strcmp(s, "--model")) a->model = v;
        else if (!strcmp(s, "--negative")) a->negative = v;
        else if (!strcmp(s, "--sampler")) a->sampler = v, a->has_sampler = true;
        else if (!strcmp(s, "--init")) a->init = v;
        else if (!strcmp(s, "--mask")) a->mask = v;
        else if (!strcmp(s, "--mask-blur")) {
            char *end;
            a->mask_blur = strtod(v, &end);
            if (!*v || *end || !(a->mask_blur >= 0 && a->mask_blur <= 256))
                return bad_value(s, v, "a blur radius in pixels from 0 to 256");
            a->has_mask_blur = true;
        }
        else if (!strcmp(s, "--mask-overlay")) a->mask_overlay = true;
        else if (!strcmp(s, "--inpaint-full-res")) a->full_res = true;
        else if (!strcmp(s, "--inpaint-padding")) {
            char *end;
            long long pv = strtoll(v, &end, 10);
            if (!*v || *end || pv < 0 || pv > 65536)
                return bad_value(s, v, "a padding in pixels from 0 to 65536");
            a->padding = pv;
            a->has_padding = true;
        }
        else if (!strcmp(s, "--ref")) {
            if (a->nrefs == GEN_MAX_REFS)
                return usage("--ref: at most 8 reference images");
            a->refs[a->nrefs++] = v;
        }
        else if (!strcmp(s, "--lora")) {
            if (a->nloras == GEN_MAX_LORAS) return usage("--lora: at most 32 LoRAs");
            a->loras[a->nloras++] = v;
        }
        else if (!strcmp(s, "--lora-dir")) a->lora_dir = v;
        else if (!strcmp(s, "--tokenizer")) a->tokenizer = v;
        else if (!strcmp(s, "--embeddings")) a->embeddings = v;
        else if (!strcmp(s, "--device")) a->device_name = v;
        else if (!strcmp(s, "--prediction")) {
            if (strcmp(v, "epsilon") && strcmp(v, "v_prediction"))
                return bad_value(s, v, "epsilon or v_prediction");
            a->prediction = v;
        } else if (!strcmp(s, "--steps")) {
            if ((rc = parse_opt_int(s, v, LM_SD_OPT_STEPS, 0, &a->steps))) return rc;
            a->has_steps = true;
        } else if (!strcmp(s, "--clip-skip")) {
            /* A1111's: 1 = the last layer, 2 = the penultimate (diffusers' 1) */
            if ((rc = parse_opt_int(s, v, LM_SD_OPT_CLIP_SKIP, 1, &a->clip_skip))) return rc;
        } else if (!strcmp(s, "--batch-size")) {
            if ((rc = parse_opt_int(s, v, LM_SD_OPT_BATCH, 0, &a->batch))) return rc;
        } else if (!strcmp(s, "--seed")) {
            if ((rc = parse_opt_int(s, v, LM_SD_OPT_SEED, 0, &n))) return rc;
            a->seed = (uint64_t)n;
            a->has_seed = true;
        } else if (!strcmp(s, "--cfg")) {
            if ((rc = parse_opt_num(s, v, LM_SD_OPT_CFG, &a->cfg))) return rc;
            a->has_cfg = true;
        } else if (!strcmp(s, "--strength")) {
            if ((rc = parse_opt_num(s, v, LM_SD_OPT_STRENGTH, &a->strength))) return rc;
            a->has_strength = true;
        } else if (!strcmp(s, "--size")) {
            if (lm_sd_size_parse(NULL, NULL, v, &a->width, &a->height) != LM_OK) {
                char range[96], what[128];
                lm_error_clear();
                lm_sd_option_range(LM_SD_OPT_SIZE, 0, range, sizeof range);
                snprintf(what, sizeof what, "WxH or N, each %s (pixels)", range);
                return bad_value(s, v, what);
            }
            if (a->width % 8 || a->height % 8)
                return bad_value(s, v, "a width and height divisible by 8 (the VAE's scale)");
        } else if (!strcmp(s, "--dtype")) {
            if (!lm_dtype_from_name(v, &a->dtype) ||
                (a->dtype != LM_F32 && a->dtype != LM_F16 && a->dtype != LM_BF16))
                return bad_value(s, v, "f32, f16 or bf16");
        } else if (!strcmp(s, "--text-layers")) {
            const char *q = v;
            a->n_text_layers = 0;
            while (*q) {
                char *end;
                long l = strtol(q, &end, 10);
                if (end == q || (*end && *end != ',') || l < 1 || l > 4096 ||
                    a->n_text_layers == LM_SD_MAX_LAYERS)
                    return bad_value(s, v, "1 to 4 layer numbers (1 to 4096) separated by commas, "
                                     "as 9,18,27");
                a->text_layers[a->n_text_layers++] = (int)l;
                q = *end ? end + 1 : end;
                if (*end && !*q) return bad_value(s, v, "no comma at the end");
            }
            if (!a->n_text_layers) return bad_value(s, v, "1 to 4 layer numbers separated by commas");
        } else if (!strcmp(s, "--offload")) a->offload = true;
        else if (!strcmp(s, "--overwrite")) a->overwrite = true;
        else if (!strcmp(s, "--no-prompt-syntax")) a->plain_prompt = true;
        else if ((rc = parse_more(s, v, a)) >= 0) {
            if (rc) return rc;
        }
        else if (!strcmp(s, "--quiet") || !strcmp(s, "-q")) a->quiet = true;
        else if (!strcmp(s, "--show")) a->show = true;
        else if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            usage(NULL);
            return -1;
        } else if (s[0] == '-' && s[1]) {
            fprintf(stderr, "lumen generate: unknown option %s (lumen generate --help lists "
                    "the options)\n", s);
            return 2;
        } else if (a->prompt) {
            return usage("one prompt only (quote it: lumen generate \"a red fox\" ...)");
        } else a->prompt = s;
    }
    /* --sampler list: the sampler table (issue 37) */
    if (a->sampler && !strcmp(a->sampler, "list")) {
        const lm_sampler_info *r;
        char full[96];
        printf("%-24s %-28s %s\n", "name", "A1111 (Sampler Schedule)", "diffusers");
        for (int i = 0; (r = lm_sampler_info_at(i)); i++)
            printf("%-24s %-28s %s\n", r->name, lm_sampler_a1111_name(r, full, sizeof full), r->diffusers);
        return -1;
    }
    if (!a->prompt) return usage("no prompt given");
    if (!a->model) return usage("no model given (--model DIR|FILE)");
    if (!a->out || !*a->out) return usage("no output given (-o OUT.png)");
    if (a->out[strlen(a->out) - 1] == '/') {
        fprintf(stderr, "lumen generate: -o %s names a folder; -o takes the image's file name "
                "(%simage.png)\n", a->out, a->out);
        return 2;
    }
    /* options that would do nothing: refused, not ignored */
    if (a->has_strength && !a->init) {
        fprintf(stderr, "lumen generate: --strength is img2img's: give --init IN.png\n");
        return 2;
    }
    if ((a->mask && !a->init) || ((a->has_mask_blur || a->mask_overlay || a->full_res) && !a->mask)) {
        fprintf(stderr, "lumen generate: %s: give --init IN.png --mask M.png (inpainting repaints the "
                "mask's white part of the init image)\n", a->mask ? "--mask" : a->has_mask_blur ?
                "--mask-blur" : a->mask_overlay ? "--mask-overlay" : "--inpaint-full-res");
        return 2;
    }
    if (a->has_padding && !a->full_res) {
        fprintf(stderr, "lumen generate: --inpaint-padding is --inpaint-full-res's\n");
        return 2;
    }
    if (!a->hires && (a->hires_steps || a->hires_denoise > 0 || a->hires_upscaler)) {
        fprintf(stderr, "lumen generate: --hires-steps, --hires-denoise and --hires-upscaler are the "
                "hires fix's: give --hires X or --hires-size WxH\n");
        return 2;
    }
    if (a->hires && (a->init || a->nrefs)) {
        fprintf(stderr, "lumen generate: --hires follows a text-to-image generation: not with %s\n",
                a->init ? "--init" : "--ref");
        return 2;
    }
    if (a->has_var_seed && !(a->var_strength > 0) && !a->nxyz) {
        fprintf(stderr, "lumen generate: --variation-seed needs --variation-strength X (0 < X <= 1)\n");
        return 2;
    }
    if (a->font && !a->nxyz) {
        fprintf(stderr, "lumen generate: --font is for the grid's labels: give --xyz\n");
        return 2;
    }
    struct stat msb;
    if (a->tokenizer && stat(a->model, &msb) == 0 && S_ISDIR(msb.st_mode)) {
        fprintf(stderr, "lumen generate: --tokenizer %s: --model %s is a diffusers folder, which "
                "has its own tokenizer; --tokenizer is for single-file checkpoints (.safetensors, "
                ".gguf)\n", a->tokenizer, a->model);
        return 2;
    }
    /* the batch's seeds, each one that can be given back */
    if (a->has_seed &&
        lm_sd_seeds_check(NULL, "--seed", "--batch-size", (int64_t)a->seed, a->batch) != LM_OK) {
        fprintf(stderr, "lumen generate: %s\n", lm_error_message());
        return 2;
    }
    /* img2img's steps, when known before the model (else the family's, checked once it loads) */
    if (a->init && a->has_steps && a->has_strength &&
        lm_sd_img2img_check_for(NULL, lm_sd_family_peek(a->model), a->steps, a->strength) != LM_OK) {
        fprintf(stderr, "lumen generate: --%s\n", lm_error_message());
        return 2;
    }
    const char *schedule;
    if (a->sampler && !lm_sd_sampler_a1111(a->sampler, &schedule)) {
        char names[1024], a1111[1024], all[2100];
        snprintf(all, sizeof all, "%s, or A1111's %s", lm_sampler_list(names, sizeof names, false),
                 lm_sampler_list(a1111, sizeof a1111, true));
        return bad_value("--sampler", a->sampler, all);
    }
    if (a->device_name && !(a->device = lm_device_find(a->device_name))) {
        report("--device");
        return 2;
    }
    return 0;
}

/* ---- outputs ---- */

/* The name of image i of n, as lm_png_write names a batch: "%d" / "%0Nd" in
 * the path replaced by i, else "_%04d" before the extension. */
static char *out_name(const char *out, int i, int n)
{
    size_t len = strlen(out) + 32;
    char *r = malloc(len);
    if (!r) return NULL;
    if (n == 1) {
        snprintf(r, len, "%s", out);
        return r;
    }
    const char *pct = strchr(out, '%');
    if (pct) {
        const char *d = pct + 1;
        while (*d >= '0' && *d <= '9') d++;
        if (*d == 'd') {
            char fmt[16];
            snprintf(fmt, sizeof fmt, "%%%.*sd", (int)(d - pct - 1), pct + 1);
            char num[24];
            snprintf(num, sizeof num, fmt, i);
            snprintf(r, len, "%.*s%s%s", (int)(pct - out), out, num, d + 1);
            return r;
        }
    }
    const char *slash = strrchr(out, '/'), *dot = strrchr(out, '.');
    if (!dot || (slash && dot < slash)) dot = out + strlen(out);
    snprintf(r, len, "%.*s_%04d%s", (int)(dot - out), out, i, dot);
    return r;
}

/* why OUT cannot be written, or NULL */
static const char *out_problem(const gen_args *a, const char *o, char *why, size_t n)
{
    struct stat sb;
    if (lstat(o, &sb) != 0) return NULL;
    if (S_ISDIR(sb.st_mode)) snprintf(why, n, "%s is a folder", o);
    else if (!S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode))   /* found now, not after the run */
        snprintf(why, n, "%s exists and is %s; only regular files are written", o,
                 S_ISFIFO(sb.st_mode) ? "a FIFO (named pipe)" : S_ISSOCK(sb.st_mode) ? "a socket"
                 : "a device");
    else if (!a->overwrite) snprintf(why, n, "%s exists (--overwrite replaces it)", o);
    else {
        /* the output must not be one of the images read */
        struct stat ib;
        const char *in[GEN_MAX_REFS + 1];
        int nin = 0;
        if (a->init) in[nin++] = a->init;
        for (int k = 0; k < a->nrefs; k++) in[nin++] = a->refs[k];
        for (int k = 0; k < nin; k++)
            if (stat(in[k], &ib) == 0 && stat(o, &sb) == 0 && ib.st_dev == sb.st_dev && ib.st_ino == sb.st_ino) {
                snprintf(why, n, "%s is the %s image", o, in[k] == a->init ? "--init" : "--ref");
                return why;
            }
        return NULL;
    }
    return why;
}

/* the folder of path ("." for none) */
static void dir_of(const char *path, char *dir, size_t n)
{
    snprintf(dir, n, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) slash == dir ? (void)(slash[1] = 0) : (void)(*slash = 0);
    else snprintf(dir, n, ".");
}

/* Whether a file can be made beside path under a name as long as the PNG
 * writer's temporary (core/io's "PATH.PID-K-HEX.tmp"): made and removed at
 * once, so a name too long for the folder, a read-only file system or a
 * permission is found before the model loads, not after the run.  0, or 1
 * with the reason printed. */
static int probe_name(const char *path)
{
    size_t n = strlen(path) + 64;
    char *t = malloc(n);
    if (!t) return 1;
    snprintf(t, n, "%s.%ld-9999-fffff.tmp", path, (long)getpid());
    int fd = open(t, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666), e = errno;
    if (fd >= 0) {
        close(fd);
        unlink(t);
    }
    free(t);
    if (fd >= 0 || e == EEXIST) return 0;
    fprintf(stderr, "lumen generate: output %s: cannot create a file there: %s%s\n", path,
            strerror(e), e == ENAMETOOLONG ? " (the writer's temporary adds about 20 bytes to the "
            "name)" : "");
    return 1;
}

/* the folder of path, locked as lumen upscale locks its outputs' */
static int lock_dir(const char *path)
{
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    return lm_cli_lock_dir(dir, "generate");
}

/* A1111's infotext_utils.quote: a value with ',', ':' or a newline is
 * written as a JSON string */
static void put_value(char *buf, size_t n, size_t *at, const char *v)
{
    bool q = strpbrk(v, ",:\n") != NULL;
    if (*at >= n) return;
    if (!q) {
        *at += (size_t)snprintf(buf + *at, n - *at, "%s", v);
        return;
    }
    *at += (size_t)snprintf(buf + *at, n - *at, "\"");
    for (const char *c = v; *c && *at < n; c++) {
        if (*c == '"' || *c == '\\') *at += (size_t)snprintf(buf + *at, n - *at, "\\%c", *c);
        else if (*c == '\n') *at += (size_t)snprintf(buf + *at, n - *at, "\\n");
        else if ((unsigned char)*c < 0x20) *at += (size_t)snprintf(buf + *at, n - *at, "\\u%04x", *c);
        else *at += (size_t)snprintf(buf + *at, n - *at, "%c", *c);
    }
    if (*at < n) *at += (size_t)snprintf(buf + *at, n - *at, "\"");
}

/* The `parameters` text as A1111's create_infotext writes it (its key order;
 * values it would leave out are left out).  malloc'd. */
static char *infotext(const gen_args *a, const lm_sd_family_row *row, const char *model, uint64_t seed,
                      int64_t w, int64_t h)
{
    const char *schedule, *sampler = lm_sd_sampler_a1111(a->sampler, &schedule);
    /* a flow-matching family's Euler runs its release's shifted sigmas:
     * Forge and ComfyUI name that schedule Simple */
    if (row->flow) schedule = "Simple";
    size_t n = strlen(a->prompt) + (a->negative ? strlen(a->negative) : 0) + 2 * strlen(model) + 512 +
               2 * strlen(a->lora_hashes);
    char *t = malloc(n);
    if (!t) return NULL;
    size_t at = (size_t)snprintf(t, n, "%s", a->prompt);
    /* given, even empty: "Negative prompt: " with nothing after it is the
     * empty prompt, no line is none (SDXL's zeros; A1111 reads both back
     * as an empty negative, the only one it has) */
    if (a->negative)
        at += (size_t)snprintf(t + at, n - at, "\nNegative prompt: %s", a->negative);
    at += (size_t)snprintf(t + at, n - at, "\nSteps: %" PRId64 ", Sampler: %s, Schedule type: %s, "
                           "CFG scale: %g, Seed: %" PRIu64 ", Size: %" PRId64 "x%" PRId64 ", Model: ",
                           a->steps, sampler, schedule, a->cfg, seed, w, h);
    put_value(t, n, &at, model);
    /* A1111's Variation seed (per image: the batch's subseed + i) */
    if (a->var_strength > 0 && at < n)
        at += (size_t)snprintf(t + at, n - at, ", Variation seed: %" PRIu64 ", Variation seed strength: "
                               "%g", a->var_seed + (seed - a->seed), a->var_strength);
    if (a->resize_w > 0 && at < n)
        at += (size_t)snprintf(t + at, n - at, ", Seed resize from: %" PRId64 "x%" PRId64, a->resize_w,
                               a->resize_h);
    if (a->init && at < n) at += (size_t)snprintf(t + at, n - at, ", Denoising strength: %g", a->strength);
    if (a->mask && at < n) at += (size_t)snprintf(t + at, n - at, ", Mask blur: %g", a->mask_blur);
    if (a->mask && a->full_res && at < n)
        at += (size_t)snprintf(t + at, n - at, ", Inpaint area: Only masked, Masked area padding: %" PRId64,
                               a->padding);
    if (a->hires && at < n) at += (size_t)snprintf(t + at, n - at, ", Denoising strength: %g", a->hires_denoise);
    if (a->clip_skip > 1 && at < n)
        at += (size_t)snprintf(t + at, n - at, ", Clip skip: %" PRId64, a->clip_skip);
    if (a->lora_hashes[0] && at < n) {   /* A1111's Lora extension: Lora hashes: "name: hash, ..." */
        at += (size_t)snprintf(t + at, n - at, ", Lora hashes: ");
        put_value(t, n, &at, a->lora_hashes);
    }
    /* A1111's hires fix: Size is the first pass's */
    if (a->hires && at < n) {
        if (a->hires_w || a->hires_h)
            at += (size_t)snprintf(t + at, n - at, ", Hires resize: %" PRId64 "x%" PRId64, a->hires_w,
                                   a->hires_h);
        else at += (size_t)snprintf(t + at, n - at, ", Hires upscale: %g", a->hires_scale);
        if (a->hires_steps && at < n)
            at += (size_t)snprintf(t + at, n - at, ", Hires steps: %" PRId64, a->hires_steps);
        if (at < n) at += (size_t)snprintf(t + at, n - at, ", Hires upscaler: ");
        put_value(t, n, &at, lm_sd_hires_upscaler_a1111(a->hires_upscaler));
    }
    /* A1111 strips the whole text */
    while (at > 0 && at < n && (t[at - 1] == ' ' || t[at - 1] == '\n')) t[--at] = 0;
    return t;
}

/* The same text for lumen serve (repl/serve_worker.c), whose PNGs carry
 * what lumen generate writes for the same settings. */
char *lm_cli_generate_infotext(const lm_cli_infotext_args *i)
{
    gen_args a = {.prompt = i->prompt, .negative = i->negative, .sampler = i->sampler,
                  .init = i->img2img ? "" : NULL, .steps = i->steps, .cfg = i->cfg,
                  .strength = i->strength, .clip_skip = i->clip_skip,
                  .mask = i->inpaint ? "" : NULL, .mask_blur = i->mask_blur, .full_res = i->full_res,
                  .padding = i->padding};
    if (i->lora_hashes) snprintf(a.lora_hashes, sizeof a.lora_hashes, "%s", i->lora_hashes);
    return infotext(&a, lm_sd_pipeline_row(i->pipeline), lm_sd_pipeline_name(i->pipeline),
                    i->seed, i->width, i->height);
}

/* ---- progress on a terminal ---- */

typedef struct bar { bool on; int64_t images; } bar;

static void progress(void *ctx, int step, int steps)
{
    bar *b = ctx;
    if (!b->on) return;
    int width = 30, fill = steps ? step * width / steps : width;
    fprintf(stderr, "\rgenerate %" PRId64 " image%s [%.*s%*s] %d/%d steps", b->images,
            b->images == 1 ? "" : "s", fill, "##############################", width - fill, "",
            step, steps);
    if (step == steps) fputs("\r\033[K", stderr);
    fflush(stderr);
}

static uint64_t random_seed(void)
{
    uint64_t s = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &s, sizeof s) != (ssize_t)sizeof s) s = 0;
        close(fd);
    }
    if (!s) s = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    return s % 4294967296u;   /* A1111's seeds are 32-bit */
}

lm_array *lm_cli_init_rgb(lm_array *img)
{
    lm_array *r = lm_image_rgb(img);
    lm_array_release(img);
    return r;
}

/* the init PNG as [3,H,W] f32 in 0..1 (alpha dropped, gray repeated) */
static lm_array *read_init(const char *path)
{
    lm_png_opts ro;
    lm_png_opts_init(&ro);
    ro.dtype = LM_F32;
    ro.has_dtype = true;
    return lm_cli_init_rgb(lm_png_read(path, &ro, NULL));
}

static int write_images(const gen_args *a, lm_sd_pipeline *p, lm_array *imgs, char **names,
                        const uint64_t *seeds)
{
    int failed = 0;
    for (int i = 0; i < (int)a->batch; i++) {
        lm_array *one = lm_slice(imgs, 0, i, i + 1, 1), *sq = one ? lm_squeeze(one, 0) : NULL;
        char *text = infotext(a, lm_sd_pipeline_row(p), lm_sd_pipeline_name(p), seeds[i],
                              a->hires ? a->base_w : imgs->shape[3], a->hires ? a->base_h : imgs->shape[2]);
        lm_kv kv[1] = {{"parameters", text}};
        lm_png_opts wo;
        lm_png_opts_init(&wo);
        wo.ntext = 1;
        wo.text = kv;
        char why[4200];
        lm_status st = LM_ERR_IO;
        int fd = sq && text ? lock_dir(names[i]) : -1;
        if (fd >= 0 && out_problem(a, names[i], why, sizeof why))
            fprintf(stderr, "lumen generate: %s (written meanwhile by another run?); not "
                    "replaced\n", why);
        else if (fd >= 0 && (st = lm_png_write(names[i], sq, &wo)) != LM_OK)
            report(NULL);   /* the writer's message names the file */
        else if (!sq || !text)
            report(NULL);
        if (fd >= 0) close(fd);
        if (st == LM_OK && !a->quiet) printf("%s (seed %" PRIu64 ")\n", names[i], seeds[i]);
        /* the image is written: a terminal that cannot show it is a warning */
        if (st == LM_OK && a->show && lm_term_show_file(names[i], NULL, NULL) != LM_OK)
            fprintf(stderr, "lumen generate: --show: %s\n", lm_error_message());
        failed += st != LM_OK;
        free(text);
        lm_array_release(one);
        lm_array_release(sq);
    }
    return failed ? 1 : 0;
}

/* One generation of a's settings: [B,3,H,W], or NULL with the error set */
static lm_array *run_one(const gen_args *a, lm_sd_pipeline *p, lm_array *init, lm_array **refs, int nref,
                         const uint64_t *seeds, bar *b)
{
    lm_sd_gen_opts go;
    lm_sd_gen_opts_init_for(&go, p);
    /* the text encoded: the cell's prompt without its <lora:...> tags (loaded
     * once before the cells; the infotext keeps them, as A1111's does) */
    char *clean = NULL;
    if (lm_lora_tags(a->prompt, &clean, NULL, NULL, 0) < 0) return NULL;
    const char *prompts[1] = {clean}, *negs[1] = {a->negative};
    go.batch = (int)a->batch;
    go.prompts = prompts;
    go.nprompts = 1;
    go.negatives = negs;
    go.nnegatives = a->negative ? 1 : 0;
    go.seeds = seeds;
    go.steps = (int)a->steps;
    go.cfg = a->cfg;
    go.sampler = a->sampler;
    go.width = a->width;
    go.height = a->height;
    go.init = init;
    go.strength = a->strength;
    go.mask = a->mask_img;
    go.mask_blur = a->mask_blur;
    go.mask_overlay = a->mask_overlay;
    go.inpaint_crop = a->full_res;
    go.inpaint_padding = a->padding;
    go.refs = refs;
    go.nrefs = nref;
    go.clip_skip = a->clip_skip > 1 ? (int)a->clip_skip - 1 : 0;
    go.text_layers = a->n_text_layers ? a->text_layers : NULL;
    go.n_text_layers = a->n_text_layers;
    go.plain_prompt = a->plain_prompt;
    go.progress = progress;
    go.progress_ctx = b;
    /* A1111's variation seed: image i's start noise slerped toward var_seed + i's */
    go.subseed = a->var_seed;
    go.subseed_strength = a->var_strength;
    go.seed_resize_w = a->resize_w;
    go.seed_resize_h = a->resize_h;
    lm_array *r;
    if (!a->hires) {
        r = lm_sd_generate(p, &go);
        free(clean);
        return r;
    }
    lm_sd_hires_opts ho;
    lm_sd_hires_opts_init(&ho);
    if (a->hires_scale > 0) ho.scale = a->hires_scale;
    ho.width = a->hires_w;
    ho.height = a->hires_h;
    ho.steps = (int)a->hires_steps;
    if (a->hires_denoise > 0) ho.denoise = a->hires_denoise;
    if (a->hires_upscaler) ho.upscaler = a->hires_upscaler;
    r = lm_sd_generate_hires(p, &go, &ho);
    free(clean);
    return r;
}

/* ---- X/Y/Z plots ---- */

/* c's settings with axis ax at value k: 0, or the exit status with the
 * message printed.  *owned gets a prompt made here (freed by the caller). */
static int apply_axis(gen_args *c, const lm_xyz_axis *ax, int k, char **owned)
{
    const char *v = ax->values[k], *name = ax->name;
    char opt[96];
    int64_t n;
    int rc = 0;
    snprintf(opt, sizeof opt, "--xyz %s", name);
    if (!strncmp(name, "lora:", 5)) {
        /* a LoRA's weight: its <lora:NAME:W> tag in the prompt, else the
         * --lora FILE whose stem is NAME (cmd_generate merges each cell's) */
        const char *ln = name + 5;
        size_t nl = strlen(ln);
        char *end;
        (void)strtod(v, &end);
        if (!nl || !*v || *end) return bad_value(opt, v, "a LoRA weight (a number)");
        char tag[128];
        snprintf(tag, sizeof tag, "<lora:%s", ln);
        const char *hit = strstr(c->prompt, tag);
        while (hit && hit[strlen(tag)] != ':' && hit[strlen(tag)] != '>') hit = strstr(hit + 1, tag);
        if (hit) {   /* the tag's weight (its te:unet pair: both) replaced */
            const char *close = strchr(hit, '>');
            size_t head = (size_t)(hit - c->prompt) + strlen(tag);
            char *r = close ? malloc(strlen(c->prompt) + strlen(v) + 2) : NULL;
            if (!r) return 1;
            sprintf(r, "%.*s:%s%s", (int)head, c->prompt, v, close);
            owned[0] = r;
            c->prompt = r;
            return 0;
        }
        for (int i = 0; i < c->nloras; i++) {
            const char *spec = c->loras[i], *colon = strrchr(spec, ':');
            size_t fl = strlen(spec);
            if (colon && colon[1]) {
                char *e;
                (void)strtod(colon + 1, &e);
                if (!*e) fl = (size_t)(colon - spec);
            }
            const char *base = spec;
            for (const char *q = spec; q < spec + fl; q++)
                if (*q == '/') base = q + 1;
            size_t bl = (size_t)(spec + fl - base);
            if (bl > 12 && !strncmp(base + bl - 12, ".safetensors", 12)) bl -= 12;
            if (bl != nl || strncmp(base, ln, nl)) continue;
            char *r = malloc(fl + strlen(v) + 2);
            if (!r) return 1;
            sprintf(r, "%.*s:%s", (int)fl, spec, v);
            owned[1] = r;
            c->loras[i] = r;
            return 0;
        }
        fprintf(stderr, "lumen generate: --xyz %s: no LoRA %s (a <lora:%s:W> tag in the prompt, or --lora "
                "DIR/%s.safetensors)\n", name, ln, ln, ln);
        return 2;
    }
    if (!strcmp(name, "seed")) {
        if ((rc = parse_opt_int(opt, v, LM_SD_OPT_SEED, 0, &n))) return rc;
        c->seed = (uint64_t)n;
        if (lm_sd_seeds_check(NULL, opt, "--batch-size", n, c->batch) != LM_OK) {
            fprintf(stderr, "lumen generate: %s\n", lm_error_message());
            return 2;
        }
    } else if (!strcmp(name, "cfg")) rc = parse_opt_num(opt, v, LM_SD_OPT_CFG, &c->cfg);
    else if (!strcmp(name, "steps")) rc = parse_opt_int(opt, v, LM_SD_OPT_STEPS, 0, &c->steps);
    else if (!strcmp(name, "clip_skip")) rc = parse_opt_int(opt, v, LM_SD_OPT_CLIP_SKIP, 1, &c->clip_skip);
    else if (!strcmp(name, "strength")) {
        if (!c->init) {
            fprintf(stderr, "lumen generate: --xyz strength is img2img's: give --init IN.png\n");
            return 2;
        }
        rc = parse_opt_num(opt, v, LM_SD_OPT_STRENGTH, &c->strength);
    } else if (!strcmp(name, "sampler")) {
        const char *schedule;
        if (!lm_sd_sampler_a1111(v, &schedule)) {
            char names[512];
            return bad_value(opt, v, lm_sampler_list(names, sizeof names, false));
        }
        c->sampler = v;
    } else if (!strcmp(name, "prompt_sr")) {
        /* A1111's Prompt S/R: the first value, found in the prompt (or the
         * negative), is replaced by each value in turn */
        const char *find = ax->values[0];
        bool in_neg = c->negative && strstr(c->negative, find);
        if (!strstr(c->prompt, find) && !in_neg) {
            fprintf(stderr, "lumen generate: --xyz prompt_sr: the first value, %s, is not in the prompt "
                    "or the negative prompt (each value replaces it)\n", find);
            return 2;
        }
        const char *texts[2] = {c->prompt, c->negative};
        for (int t = 0; t < 2; t++) {
            if (!texts[t]) continue;
            size_t fl = strlen(find), vl = strlen(v), cnt = 0;
            for (const char *q = strstr(texts[t], find); q; q = strstr(q + fl, find)) cnt++;
            char *r = malloc(strlen(texts[t]) + cnt * vl + 1), *w = r;
            if (!r) return 1;
            for (const char *q = texts[t];;) {
                const char *hit = strstr(q, find);
                if (!hit) {
                    strcpy(w, q);
                    break;
                }
                memcpy(w, q, (size_t)(hit - q));
                w += hit - q;
                memcpy(w, v, vl);
                w += vl;
                q = hit + fl;
            }
            owned[t] = r;
            if (t) c->negative = r;
            else c->prompt = r;
        }
    } else if (!strcmp(name, "variation_seed")) {
        if ((rc = parse_opt_int(opt, v, LM_SD_OPT_SEED, 0, &n))) return rc;
        c->var_seed = (uint64_t)n;
    } else if (!strcmp(name, "variation_strength")) {
        char *end;
        double x = strtod(v, &end);
        if (!*v || *end || !(x >= 0 && x <= 1)) return bad_value(opt, v, "a number from 0 to 1");
        c->var_strength = x;
    } else if (!strcmp(name, "hires_scale")) {
        if (!c->hires) {
            fprintf(stderr, "lumen generate: --xyz hires_scale is the hires fix's: give --hires X\n");
            return 2;
        }
        char *end;
        double x = strtod(v, &end);
        if (!*v || *end || !(x > 0 && x <= 16)) return bad_value(opt, v, "a number in (0, 16]");
        c->hires_scale = x;
        c->hires_w = c->hires_h = 0;   /* the scale decides the size, as --hires X does */
    } else if (!strcmp(name, "hires_steps") || !strcmp(name, "hires_denoise")) {
        if (!c->hires) {
            fprintf(stderr, "lumen generate: --xyz %s is the hires fix's: give --hires X\n", name);
            return 2;
        }
        rc = name[6] == 's' ? parse_opt_int(opt, v, LM_SD_OPT_STEPS, 0, &c->hires_steps)
                            : parse_opt_num(opt, v, LM_SD_OPT_STRENGTH, &c->hires_denoise);
    } else {
        char list[512];
        size_t at = 0;
        for (int i = 0; lm_xyz_axes[i][0] && at < sizeof list; i++)
            at += (size_t)snprintf(list + at, sizeof list - at, "%s, ", lm_xyz_axes[i][0]);
        if (at < sizeof list) snprintf(list + at, sizeof list - at, "lora:NAME");
        fprintf(stderr, "lumen generate: --xyz %s: unknown axis (expected one of %s)\n", name, list);
        return 2;
    }
    return rc;
}

/* the grid of z's tiles written to name (the first cell's infotext in it) */
static int write_grid(const gen_args *a, lm_grid_font *font, const lm_xyz_axis *ax, int nx, int ny, int z,
                      int nz, const lm_grid_tile *tiles, const char *name, char *text)
{
    char xl[LM_XYZ_MAX_VALUES][256], yl[LM_XYZ_MAX_VALUES][256], title[256], why[4200];
    const char *xs[LM_XYZ_MAX_VALUES], *ys[LM_XYZ_MAX_VALUES];
    for (int i = 0; i < nx; i++) lm_xyz_label(&ax[0], i, xl[i], sizeof xl[i]), xs[i] = xl[i];
    for (int i = 0; a->nxyz > 1 && i < ny; i++) lm_xyz_label(&ax[1], i, yl[i], sizeof yl[i]), ys[i] = yl[i];
    if (nz > 1) lm_xyz_label(&ax[2], z, title, sizeof title);
    int64_t gh, gw;
    float *g = lm_grid_compose(font, nx, ny, tiles + (size_t)z * (size_t)(nx * ny), xs, a->nxyz > 1 ? ys : NULL,
                               nz > 1 ? title : NULL, &gh, &gw, why, sizeof why);
    if (!g) {
        fprintf(stderr, "lumen generate: grid %s: %s\n", name, why);
        return 1;
    }
    int64_t shape[3] = {3, gh, gw};
    lm_array *img = lm_from_data(3, shape, LM_F32, g, lm_device_cpu());
    free(g);
    lm_kv kv[1] = {{"parameters", text}};
    lm_png_opts wo;
    lm_png_opts_init(&wo);
    wo.ntext = text ? 1 : 0;
    wo.text = kv;
    lm_status st = LM_ERR_IO;
    int fd = img ? lock_dir(name) : -1;
    if (fd >= 0 && out_problem(a, name, why, sizeof why))
        fprintf(stderr, "lumen generate: %s (written meanwhile by another run?); not replaced\n", why);
    else if (fd >= 0 && (st = lm_png_write(name, img, &wo)) != LM_OK) report(NULL);
    else if (!img) report(NULL);
    if (fd >= 0) close(fd);
    if (st == LM_OK && !a->quiet) printf("%s (grid %lldx%lld)\n", name, (long long)gw, (long long)gh);
    lm_array_release(img);
    return st == LM_OK ? 0 : 1;
}

/* the LoRAs c merges, as one string: --lora's specs, then the prompt's tags */
static void lora_key_of(const gen_args *c, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < c->nloras && at < n; i++) at += (size_t)snprintf(buf + at, n - at, "%s;", c->loras[i]);
    enum { MAXT = 64 };
    char *clean = NULL, *names[MAXT];
    double w[MAXT];
    int t = lm_lora_tags(c->prompt, &clean, names, w, MAXT);
    for (int i = 0; i < t && i < MAXT; i++) {
        if (at < n) at += (size_t)snprintf(buf + at, n - at, "<%s:%.17g>", names[i], w[i]);
        free(names[i]);
    }
    free(clean);
}

/* A LoRA weight axis's cell: its LoRAs (--lora's, then the tags) merged
 * when they are not those of *key (the last merged, updated); c's infotext
 * hashes.  0, or 1 with the error set. */
static int cell_loras(gen_args *c, lm_sd_pipeline *p, char *key, size_t n)
{
    char now[4096];
    lora_key_of(c, now, sizeof now);
    if (strcmp(now, key)) {
        char *clean = NULL;
        key[0] = 0;   /* nothing known merged until the loads succeed */
        lm_lora_unload_all(p);
        for (int i = 0; i < c->nloras; i++)
            if (lm_lora_load_spec(p, c->loras[i], true) != LM_OK) return 1;
        if (lm_lora_load_tags(p, c->prompt, c->lora_dir, "--lora-dir DIR", true, &clean) != LM_OK) return 1;
        free(clean);
        snprintf(key, n, "%s", now);
    }
    lm_lora_hashes(p, c->lora_hashes, sizeof c->lora_hashes);
    return 0;
}

static int cmd_generate(int argc, char **argv)
{
    const lm_sd_defaults *d = &lm_sd_defaults_generic;
    gen_args a = {.sampler = NULL, .dtype = LM_DTYPE_COUNT, .steps = d->steps, .cfg = d->cfg,
                  .strength = d->strength, .batch = d->batch, .clip_skip = d->clip_skip + 1, .padding = 32};
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    /* --show: the terminal asked (and LUMEN_IMAGES read) before the work */
    lm_term_proto shown_as;
    if (a.show && lm_term_detect(&shown_as, NULL) != LM_OK) {
        fprintf(stderr, "lumen generate: --show: %s\n", lm_error_message());
        return 2;
    }
    if (!a.has_seed) a.seed = random_seed();
    /* A1111's variation seed -1: a random one */
    if (!a.has_var_seed) a.var_seed = random_seed();
    /* the X/Y/Z axes, every value tried on the settings now (usage errors
     * before anything runs) */
    lm_xyz_axis ax[GEN_MAX_AXES];
    memset(ax, 0, sizeof ax);
    int nax = 0, dims[GEN_MAX_AXES] = {1, 1, 1}, cells = 1;
    lm_grid_font *font = NULL;
    char **names = NULL, **gnames = NULL;
    lm_grid_tile *tiles = NULL;   /* each cell's first image, of its own size */
    uint64_t *seeds = calloc((size_t)a.batch, sizeof *seeds);
    lm_array *init = NULL, *imgs = NULL, *refs[GEN_MAX_REFS] = {NULL};
    int nref = 0, total = 0;
    lm_sd_pipeline *p = NULL;
    char *clean = NULL;   /* the prompt without its <lora:...> tags */
    char *first_text = NULL;
    for (; nax < a.nxyz; nax++) {
        char why[1200];
        if (lm_xyz_parse(a.xyz[nax], &ax[nax], why, sizeof why)) {
            fprintf(stderr, "lumen generate: %s\n", why);
            rc = 2;
            goto done;
        }
        dims[nax] = ax[nax].n;
        cells *= ax[nax].n;
        for (int k = 0; k < ax[nax].n; k++) {
            gen_args c = a;
            char *owned[2] = {NULL, NULL};
            rc = apply_axis(&c, &ax[nax], k, owned);
            free(owned[0]);
            free(owned[1]);
            if (rc) {
                nax++;
                goto done;
            }
        }
    }
    if (a.nxyz) {
        char why[1200];
        if (!(font = lm_grid_font_open(a.font, why, sizeof why))) {
            fprintf(stderr, "lumen generate: %s\n", why);
            rc = 2;
            goto done;
        }
    }
    /* cheap checks first: the outputs, the init image, then the model */
    total = (int)a.batch * cells;
    names = calloc((size_t)total, sizeof *names);
    gnames = calloc((size_t)dims[2], sizeof *gnames);
    tiles = calloc((size_t)cells, sizeof *tiles);
    rc = 1;
    if (!names || !seeds || !gnames || !tiles) goto done;
    for (int i = 0; i < total + (a.nxyz ? dims[2] : 0); i++) {
        char why[4200];
        char **slot = i < total ? &names[i] : &gnames[i - total];
        if (!(*slot = i < total ? out_name(a.out, i, total) : lm_xyz_grid_name(a.out, i - total, dims[2])))
            goto done;
        for (int j = 0; j < i; j++)
            if (!strcmp(*slot, j < total ? names[j] : gnames[j - total])) {
                fprintf(stderr, "lumen generate: images %d and %d would both be %s\n", j, i, *slot);
                goto done;
            }
        if (out_problem(&a, *slot, why, sizeof why)) {
            fprintf(stderr, "lumen generate: %s; not replaced\n", why);
            goto done;
        }
    }
    /* the folders, made now: a generation is not thrown away for want of one */
    for (int i = 0; i < total + (a.nxyz ? dims[2] : 0); i++) {
        char dir[4096];
        const char *nm = i < total ? names[i] : gnames[i - total];
        dir_of(nm, dir, sizeof dir);
        if (lm_cli_out_dir(dir, nm, "generate") || probe_name(nm)) goto done;
    }
    if (a.init && !(init = read_init(a.init))) {
        report("--init");   /* the reader's message names the file */
        goto done;
    }
    if (a.mask) {
        lm_png_opts mo;
        lm_png_opts_init(&mo);
        mo.dtype = LM_F32;
        mo.has_dtype = true;
        if (!(a.mask_img = lm_png_read(a.mask, &mo, NULL))) {
            report("--mask");
            goto done;
        }
    }
    for (; nref < a.nrefs; nref++)
        if (!(refs[nref] = read_init(a.refs[nref]))) {
            report(a.refs[nref]);
            goto done;
        }
    lm_sd_load_opts lo;
    lm_sd_load_opts_init(&lo);
    lo.dtype = a.dtype;
    lo.device = a.device;
    lo.tokenizer_dir = a.tokenizer;
    lo.prediction = a.prediction;
    lo.tokenizer_option = "--tokenizer DIR";
    lo.offload = a.offload;
    lo.embeddings_dir = a.embeddings;
    lo.prewarm_width = a.width;   /* the load's dry run plans the first image's size and sampler */
    lo.prewarm_height = a.height;
    if (a.has_sampler) lo.prewarm_sampler = a.sampler;
    if (!(p = lm_sd_pipeline_load(a.model, &lo))) {
        report(NULL);
        goto done;
    }
    if ((a.offload || a.n_text_layers) && !lm_sd_pipeline_dit(p)) {
        fprintf(stderr, "lumen generate: %s: only the DiT families (Z-Image, FLUX.2-klein) take it; "
                "%s is %s\n", a.offload ? "--offload" : "--text-layers", a.model,
                lm_sd_pipeline_row(p)->title);
        rc = 2;
        goto done;
    }
    /* LoRAs: --lora's, then the prompt's <lora:NAME:W> tags (encoded without them;
     * the infotext keeps the prompt as given, as A1111 does) */
    for (int i = 0; i < a.nloras; i++)
        if (lm_lora_load_spec(p, a.loras[i], true) != LM_OK) {
            report(NULL);
            goto done;
        }
    if (lm_lora_load_tags(p, a.prompt, a.lora_dir, "--lora-dir DIR", true, &clean) != LM_OK) {
        report(NULL);
        goto done;
    }
    lm_lora_hashes(p, a.lora_hashes, sizeof a.lora_hashes);
    /* what was not given is the model family's (the infotext records what ran) */
    const lm_sd_defaults *fd = lm_sd_pipeline_defaults(p);
    if (!a.has_steps) a.steps = fd->steps;
    if (!a.has_cfg) a.cfg = fd->cfg;
    if (!a.has_sampler) a.sampler = fd->sampler;
    if (!a.has_strength) a.strength = fd->strength;
    if (a.hires) {
        /* the first pass's size, the infotext's Size */
        a.base_w = a.width ? a.width : lm_sd_pipeline_default_size(p);
        a.base_h = a.height ? a.height : lm_sd_pipeline_default_size(p);
        if (!a.hires_denoise) a.hires_denoise = 0.7;
        if (!a.hires_upscaler) a.hires_upscaler = "latent";
    }
    rc = 0;
    /* a LoRA weight axis: each cell's LoRAs merged anew when they differ
     * from the cell before's (cell_loras) */
    bool lora_axis = false;
    char lora_key[4096] = "";
    for (int k = 0; k < a.nxyz; k++) lora_axis |= !strncmp(ax[k].name, "lora:", 5);
    if (lora_axis) lora_key_of(&a, lora_key, sizeof lora_key);
    for (int cell = 0; cell < cells; cell++) {
        gen_args c = a;
        char *owned[GEN_MAX_AXES][2] = {{NULL}};
        int at[GEN_MAX_AXES] = {cell % dims[0], cell / dims[0] % dims[1], cell / (dims[0] * dims[1])};
        for (int k = 0; k < a.nxyz && !rc; k++) rc = apply_axis(&c, &ax[k], at[k], owned[k]);
        if (!rc && lora_axis && (rc = cell_loras(&c, p, lora_key, sizeof lora_key)) != 0) report(NULL);
        bar b = {!c.quiet && isatty(2), c.batch};
        for (int i = 0; i < (int)c.batch; i++) seeds[i] = c.seed + (uint64_t)i;
        if (init && lm_sd_img2img_check_for(NULL, lm_sd_pipeline_row(p), c.steps, c.strength) != LM_OK) {
            fprintf(stderr, "lumen generate: --%s\n", lm_error_message());
            rc = 2;   /* a usage error, as when --steps was given */
        } else if (!rc && !(imgs = run_one(&c, p, init, refs, nref, seeds, &b))) {
            if (b.on) fputs("\r\033[K", stderr);
            report(NULL);
            rc = 1;
        } else if (!rc) {
            rc = write_images(&c, p, imgs, names + (size_t)cell * (size_t)c.batch, seeds);
            /* the grid's tile: the cell's first image (cells may differ in
             * size, as under a hires_scale axis: lm_grid_compose pads them) */
            if (!rc && a.nxyz) {
                lm_array *one = lm_slice(imgs, 0, 0, 1, 1);
                int64_t th = imgs->shape[2], tw = imgs->shape[3];
                tiles[cell].h = th;
                tiles[cell].w = tw;
                tiles[cell].rgb = one ? malloc(sizeof *tiles[cell].rgb * 3 * (size_t)(th * tw)) : NULL;
                if (!tiles[cell].rgb || lm_array_read(one, tiles[cell].rgb, LM_F32) != LM_OK) rc = 1, report(NULL);
                lm_array_release(one);
                if (!cell) first_text = infotext(&c, lm_sd_pipeline_row(p), lm_sd_pipeline_name(p), seeds[0],
                                                 c.hires ? c.base_w : tw, c.hires ? c.base_h : th);
            }
            lm_array_release(imgs);
            imgs = NULL;
        }
        for (int k = 0; k < GEN_MAX_AXES; k++) free(owned[k][0]), free(owned[k][1]);
        if (rc) goto done;
    }
    for (int z = 0; a.nxyz && z < dims[2]; z++)
        rc |= write_grid(&a, font, ax, dims[0], dims[1], z, dims[2], tiles, gnames[z], first_text);
done:
    free(clean);
    lm_array_release(imgs);
    lm_array_release(init);
    lm_array_release(a.mask_img);
    for (int k = 0; k < nref; k++) lm_array_release(refs[k]);
    lm_sd_pipeline_free(p);
    for (int i = 0; names && i < total; i++) free(names[i]);
    for (int i = 0; gnames && i < dims[2]; i++) free(gnames[i]);
    for (int i = 0; tiles && i < cells; i++) free(tiles[i].rgb);
    for (int k = 0; k < nax; k++) lm_xyz_free(&ax[k]);
    lm_grid_font_close(font);
    free(first_text);
    free(tiles);
    free(names);
    free(gnames);
    free(seeds);
    return rc;
}

int lm_cli_generate(int argc, char **argv)
{
    if (argc < 2 || !argv[1] || strcmp(argv[1], "generate")) return -1;
    if (lm_init() != LM_OK) {
        fprintf(stderr, "lumen: %s\n", lm_error_message());
        return 2;
    }
    return cmd_generate(argc, argv);
}
