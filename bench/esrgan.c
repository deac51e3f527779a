/* esrgan.c - esrgan-thick x4 on a 256x256 image on the CPU: seconds
 * per run after a warm-up.  The input is the package's fixture resized
 * bilinearly to 256x256; it and Lumen's output go to DIR (in.npy, out.npy)
 * so bench/peer_esrgan.py runs the same input and checks its output.
 *   build/bench/esrgan MODELS_DIR DIR [RUNS]   (run by bench/esrgan.sh) */
#include <stdlib.h>
#include "bench.h"
#include "core/io/io.h"
#include "core/lumen.h"
#include "models/tfjs.h"

static int fail(const char *what)
{
    fprintf(stderr, "esrgan: %s: %s\n", what, lm_error_message());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: esrgan MODELS_DIR OUT_DIR [RUNS]\n");
        return 2;
    }
    int runs = argc > 3 ? atoi(argv[3]) : 2;
    char path[1024];
    if (lm_init() != LM_OK) return fail("init");
    snprintf(path, sizeof path, "%s/esrgan-thick/models/x4/model.json", argv[1]);
    lm_tfjs_model *m = lm_tfjs_load(path, lm_device_cpu());
    if (!m) return fail("load");
    snprintf(path, sizeof path, "%s/esrgan-thick/assets/fixture.png", argv[1]);
    lm_png_opts o;
    lm_png_opts_init(&o);
    o.dtype = LM_F32;
    o.has_dtype = true;
    lm_array *img = lm_png_read(path, &o, NULL);
    lm_array *rgb = lm_slice(img, 0, 0, 3, 1);
    int64_t s4[4] = {1, 3, 128, 128};
    lm_array *r4 = lm_reshape(rgb, 4, s4);
    double sc[2] = {2, 2};
    lm_array *x = lm_upsample(r4, NULL, sc, LM_UPSAMPLE_BILINEAR, false);
    if (!x || lm_array_eval(x) != LM_OK) return fail("input");
    snprintf(path, sizeof path, "%s/in.npy", argv[2]);
    if (lm_save_npy(path, x) != LM_OK) return fail("save input");
    lm_array *y = lm_tfjs_forward(m, x);           /* warm-up, and the output checked */
    if (!y || lm_array_eval(y) != LM_OK) return fail("run");
    snprintf(path, sizeof path, "%s/out.npy", argv[2]);
    if (lm_save_npy(path, y) != LM_OK) return fail("save output");
    lm_array_release(y);
    double t0 = bench_now();
    for (int i = 0; i < runs; i++) {
        y = lm_tfjs_forward(m, x);
        if (!y || lm_array_eval(y) != LM_OK) return fail("run");
        lm_array_release(y);
    }
    RESULT("esrgan_thick_x4_256px", (bench_now() - t0) / runs, "s");
    lm_array_release(x);
    lm_array_release(r4);
    lm_array_release(rgb);
    lm_array_release(img);
    lm_tfjs_free(m);
    return 0;
}
