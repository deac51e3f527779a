/* test_sd_family.c - models/family.c: the family table (every row complete,
 * detection from single-file keys and from folders) and the one source of
 * the generation options' ranges (the checks the core, `lumen generate` and
 * Lua's pipe:generate share: issue 34's values that used to be narrowed or
 * read as the default are errors naming the option and the range). */
#include "testutil.h"
#include "models/family.h"

/* every row has what the loaders and the pipeline read */
static void test_rows(void **state)
{
    (void)state;
    assert_null(lm_sd_family_get(LM_SD_UNKNOWN));
    assert_null(lm_sd_family_get(LM_SD_FAMILY_COUNT));
    assert_string_equal(lm_sd_family_name(LM_SD_UNKNOWN), "unknown");
    for (int f = LM_SD_UNKNOWN + 1; f < LM_SD_FAMILY_COUNT; f++) {
        const lm_sd_family_row *r = lm_sd_family_get((lm_sd_family)f);
        assert_non_null(r);
        assert_int_equal(r->id, f);
        assert_non_null(r->name);
        assert_non_null(r->title);
        assert_non_null(r->pipeline_class);
        assert_int_not_equal(r->denoiser, LM_SD_NET_NONE);
        assert_int_not_equal(r->vae, LM_SD_NET_NONE);
        assert_non_null(r->denoiser_dir);
        assert_non_null(r->vae_dir);
        /* SD rows: single-file prefixes; DiT rows: a flow-matching
         * schedule and Qwen3 hidden states to take */
        bool sd = r->denoiser == LM_SD_NET_UNET2D;
        assert_true(sd != r->flow);
        if (sd) {
            assert_non_null(r->denoiser_prefix);
            assert_non_null(r->vae_prefix);
        }
        assert_true(r->n_encoders >= 1 && r->n_encoders <= LM_SD_MAX_ENCODERS);
        for (int e = 0; e < r->n_encoders; e++) {
            assert_int_not_equal(r->encoders[e].kind, LM_SD_TE_NONE);
            assert_non_null(r->encoders[e].dir);
            assert_non_null(r->encoders[e].tokenizer);
            if (sd) assert_non_null(r->encoders[e].prefix);
            else assert_true(r->encoders[e].kind == LM_SD_TE_QWEN3 && r->encoders[e].n_layers >= 1 &&
                             r->encoders[e].n_layers <= LM_SD_MAX_LAYERS && r->encoders[e].max_length > 0);
        }
        assert_true(r->latent_channels > 0 && r->scaling_factor > 0 && r->sample_size > 0 &&
                    r->vae_sample_size > 0);
        assert_non_null(r->scheduler);
        /* the row's defaults are in the options' ranges */
        assert_int_equal(lm_sd_option_check_int(LM_SD_OPT_STEPS, NULL, NULL, r->defaults.steps), LM_OK);
        assert_int_equal(lm_sd_option_check_num(LM_SD_OPT_CFG, NULL, NULL, r->defaults.cfg), LM_OK);
        assert_int_equal(lm_sd_option_check_num(LM_SD_OPT_STRENGTH, NULL, NULL, r->defaults.strength), LM_OK);
        assert_int_equal(lm_sd_option_check_int(LM_SD_OPT_BATCH, NULL, NULL, r->defaults.batch), LM_OK);
        assert_int_equal(lm_sd_option_check_int(LM_SD_OPT_CLIP_SKIP, NULL, NULL, r->defaults.clip_skip), LM_OK);
        assert_non_null(r->defaults.sampler);
        printf("  %-5s %s: %d encoder%s, latents %d x %g, default %d steps, cfg %g, %s\n", r->name,
               r->title, r->n_encoders, r->n_encoders == 1 ? "" : "s", r->latent_channels,
               r->scaling_factor, r->defaults.steps, r->defaults.cfg, r->defaults.sampler);
    }
    assert_string_equal(lm_sd_family_name(LM_SD_XL), "sdxl");
}

static void test_detect(void **state)
{
    (void)state;
    const char *sd1[] = {"model.diffusion_model.x", "first_stage_model.y", "cond_stage_model.transformer.z"};
    const char *sd2[] = {"model.diffusion_model.x", "cond_stage_model.model.z", "first_stage_model.y"};
    const char *xl[] = {"conditioner.embedders.0.transformer.a", "conditioner.embedders.1.model.b",
                        "model.diffusion_model.x"};
    const char *mix[] = {"cond_stage_model.transformer.z", "cond_stage_model.model.z"};
    const char *half[] = {"conditioner.embedders.0.transformer.a", "model.diffusion_model.x"};
    assert_int_equal(lm_sd_family_from_keys(sd1, 3), LM_SD_1);
    assert_int_equal(lm_sd_family_from_keys(sd2, 3), LM_SD_2);
    assert_int_equal(lm_sd_family_from_keys(xl, 3), LM_SD_XL);
    assert_int_equal(lm_sd_family_from_keys(mix, 2), LM_SD_UNKNOWN);    /* two families' encoders */
    assert_int_equal(lm_sd_family_from_keys(half, 2), LM_SD_UNKNOWN);   /* SDXL's first encoder alone */
    assert_int_equal(lm_sd_family_from_keys(NULL, 0), LM_SD_UNKNOWN);
    /* folders: the encoders model_index.json names, the UNet's projections,
     * or the first encoder's kind (the writer reads hidden_act) */
    assert_int_equal(lm_sd_family_match(1, 0, -1), LM_SD_1);
    assert_int_equal(lm_sd_family_match(1, 1, -1), LM_SD_2);
    assert_int_equal(lm_sd_family_match(2, 1, -1), LM_SD_XL);
    assert_int_equal(lm_sd_family_match(2, 0, -1), LM_SD_XL);
    assert_int_equal(lm_sd_family_match(1, -1, 1), LM_SD_2);
    assert_int_equal(lm_sd_family_match(1, -1, 0), LM_SD_1);
    assert_int_equal(lm_sd_family_match(3, -1, -1), LM_SD_UNKNOWN);
}

static void expect_error(lm_status st, const char *text)
{
    assert_int_equal(st, LM_ERR_ARG);
    if (!strstr(lm_error_message(), text)) fprintf(stderr, "got: %s\nwant: %s\n", lm_error_message(), text);
    assert_non_null(strstr(lm_error_message(), text));
}

static void test_ranges(void **state)
{
    (void)state;
    /* issue 34, item 4: these were narrowed to int or read as the default */
    expect_error(lm_sd_option_check_int(LM_SD_OPT_STEPS, "pipe:generate", NULL, 4294967298LL),
                 "pipe:generate: steps 4294967298: expected a whole number from 1 to 10000");
    expect_error(lm_sd_option_check_int(LM_SD_OPT_BATCH, "g", NULL, 4294967297LL),
                 "g: batch 4294967297: expected a whole number from 1 to 4096");
    expect_error(lm_sd_option_check_int(LM_SD_OPT_CLIP_SKIP, "g", NULL, 4294967296LL),
                 "clip_skip 4294967296: expected a whole number from 0 to 63");
    expect_error(lm_sd_option_check_int(LM_SD_OPT_SIZE, "g", "width", -40), "g: width -40: expected");
    expect_error(lm_sd_option_check_int(LM_SD_OPT_SIZE, NULL, NULL, 0), "size 0: expected a whole number from 8 to 65536");
    expect_error(lm_sd_option_check_int(LM_SD_OPT_SEED, NULL, NULL, -1), "seed -1: expected a whole number >= 0");
    expect_error(lm_sd_option_check_num(LM_SD_OPT_CFG, NULL, NULL, NAN), "cfg nan: expected a number from 0 to 1000");
    expect_error(lm_sd_option_check_num(LM_SD_OPT_CFG, NULL, NULL, INFINITY), "cfg inf");
    expect_error(lm_sd_option_check_num(LM_SD_OPT_STRENGTH, NULL, NULL, 0), "strength 0: expected a number in (0, 1]");
    expect_error(lm_sd_option_check_num(LM_SD_OPT_STEPS, NULL, NULL, 64.5), "steps 64.5");
    expect_error(lm_sd_option_check_num(LM_SD_OPT_STEPS, NULL, NULL, 1e300), "steps 1.0000000000000001e+300");
    /* the bounds themselves are in */
    assert_int_equal(lm_sd_option_check_int(LM_SD_OPT_STEPS, NULL, NULL, 1), LM_OK);
    assert_int_equal(lm_sd_option_check_int(LM_SD_OPT_STEPS, NULL, NULL, 10000), LM_OK);
    assert_int_equal(lm_sd_option_check_int(LM_SD_OPT_SEED, NULL, NULL, INT64_MAX), LM_OK);
    assert_int_equal(lm_sd_option_check_num(LM_SD_OPT_STRENGTH, NULL, NULL, 1), LM_OK);
    assert_int_equal(lm_sd_option_check_num(LM_SD_OPT_CFG, NULL, NULL, 0), LM_OK);
    assert_int_equal(lm_sd_option_check_num(LM_SD_OPT_STEPS, NULL, NULL, 20.0), LM_OK);
    char buf[96];
    assert_string_equal(lm_sd_option_range(LM_SD_OPT_CLIP_SKIP, 1, buf, sizeof buf),
                        "a whole number from 1 to 64");   /* the CLI's A1111 Clip skip */
}

static void test_size_parse(void **state)
{
    (void)state;
    int64_t w = 0, h = 0;
    assert_int_equal(lm_sd_size_parse(NULL, NULL, "512x768", &w, &h), LM_OK);
    assert_true(w == 512 && h == 768);
    assert_int_equal(lm_sd_size_parse(NULL, NULL, "64", &w, &h), LM_OK);
    assert_true(w == 64 && h == 64);
    static const char *const bad[] = {"0x0", "-64x-64", "64x64junk", "64x", "x64", "", "64 x 64",
                                      "0", "7x64", "65544x64", "+64x64", "64x64x64", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char want[64];
        snprintf(want, sizeof want, "size \"%s\": expected WxH or N", bad[i]);
        expect_error(lm_sd_size_parse("pipe:generate", NULL, bad[i], &w, &h), want);
    }
    expect_error(lm_sd_size_parse("g", "--size", NULL, &w, &h), "g: --size \"\": expected");
}

/* issue 34 item 12: a batch's seeds seed..seed+batch-1 must each be one that
 * can be given back; the message names the last seed and the largest that fits */
static void test_seeds_check(void **state)
{
    (void)state;
    assert_int_equal(lm_sd_seeds_check(NULL, "seed", "batch", INT64_MAX, 1), LM_OK);
    assert_int_equal(lm_sd_seeds_check(NULL, "seed", "batch", INT64_MAX - 1, 2), LM_OK);
    assert_int_equal(lm_sd_seeds_check(NULL, "seed", "batch", 0, 4096), LM_OK);
    expect_error(lm_sd_seeds_check("lumen generate", "--seed", "--batch-size", INT64_MAX, 2),
                 "lumen generate: --seed 9223372036854775807 with --batch-size 2: the last image's "
                 "seed would be 9223372036854775808, past the largest seed 9223372036854775807; "
                 "give --seed 9223372036854775806 or less");
    expect_error(lm_sd_seeds_check(NULL, "seed", "batch", INT64_MAX - 2, 4096), "give seed 9223372036854771712 or less");
    expect_error(lm_sd_seeds_check(NULL, "seed", "batch", -1, 1), "seed -1: expected a whole number >= 0");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_size_parse),
        cmocka_unit_test(test_seeds_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
