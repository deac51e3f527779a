# models.mk - `make models`: the pretrained ESRGAN packages from npm
# (tests/models/fetch.sh: pinned versions and integrity hashes) unpacked
# into build/models/; `make test` prepares them for the golden tests.
.PHONY: models
models:
	@BUILD=$(BUILD) sh tests/models/fetch.sh $(BUILD)/models || [ $$? = 77 ]
TEST_PREREQS += models

# `make install` also installs the packages `make models` fetched, where an
# installed lumen looks for them (<prefix>/share/lumen/models; see
# models/tfjs_find.c).  Nothing fetched: nothing to install, and a note.
.PHONY: install-models
install: install-models
install-models:
	@dest='$(DESTDIR)$(PREFIX)/share/lumen/models'; n=0; \
	for d in $(BUILD)/models/*/; do \
	  [ -f "$$d.integrity" ] || continue; \
	  name=$$(basename "$$d"); install -d "$$dest" && rm -rf "$$dest/$$name.new" && \
	  cp -R "$$d" "$$dest/$$name.new" && rm -rf "$$dest/$$name" && \
	  mv "$$dest/$$name.new" "$$dest/$$name" && n=$$((n + 1)) || exit 1; \
	done; \
	if [ $$n = 0 ]; then echo "install: no models in $(BUILD)/models (\`make models\` fetches them)"; \
	else echo "install: $$n model packages into $$dest"; fi

TEST_SCRIPTS += tests/models/golden.sh tests/models/upscale.sh
TEST_SCRIPTS += tests/models/generate.sh
TEST_SCRIPTS += tests/models/grid.sh tests/models/batch_grid.sh
BENCH_SCRIPTS += bench/esrgan.sh
# bench/esrgan.c is not a bench_*.c: it takes the models folder (bench/esrgan.sh)
$(BUILD)/bench/esrgan: bench/esrgan.c bench/bench.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ibench $< -o $@ $(LIB) $(LDFLAGS) $(LIBS) $(LIB_EXTRA)
ALL_TARGETS += $(BUILD)/bench/esrgan
# in-place concats beside the copying path (bench/esrgan_concat.sh)
BENCH_SCRIPTS += bench/esrgan_concat.sh
$(BUILD)/bench/esrgan_concat: bench/esrgan_concat.c bench/bench.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ibench $< -o $@ $(LIB) $(LDFLAGS) $(LIBS) $(LIB_EXTRA)
ALL_TARGETS += $(BUILD)/bench/esrgan_concat

# The diffusion fixtures in the original single-file layout (issue 24) are built
# from the committed diffusers folders (tests/ref/diffusion/sd1, sd2, sdxl) by
# tests/ref/make_single.py (numpy only), so the repository holds the weights once.
# Tests find them in $BUILD/ref/diffusion/.
DIFF_SINGLE := $(BUILD)/ref/diffusion/sd1.safetensors $(BUILD)/ref/diffusion/sd2.safetensors \
  $(BUILD)/ref/diffusion/sdxl.safetensors
$(BUILD)/ref/diffusion/%.safetensors: tests/ref/make_single.py tests/ref/diffusion/%/model_index.json
	@mkdir -p $(@D)
	/usr/bin/python3 tests/ref/make_single.py tests/ref/diffusion/$* $* $@
.PHONY: diffusion-fixtures
diffusion-fixtures: $(DIFF_SINGLE)
TEST_PREREQS += diffusion-fixtures

# The DiT transformers as single files (issue 35): tests/ref/dit/{zimage,klein}/transformer
# in the original layout ComfyUI and stable-diffusion.cpp load (Z-Image under
# model.diffusion_model., Klein without a prefix) and as ComfyUI-GGUF's Q8_0 GGUF, by
# tests/ref/make_dit_single.py (plain Python).  tests/test_dit_files.c reads them.
DIT_SINGLE := $(BUILD)/ref/dit/zimage.safetensors $(BUILD)/ref/dit/klein.safetensors \
  $(BUILD)/ref/dit/zimage_q8_0.gguf $(BUILD)/ref/dit/klein_q8_0.gguf
$(BUILD)/ref/dit/%.safetensors: tests/ref/make_dit_single.py tests/ref/dit/%/transformer/config.json
	@mkdir -p $(@D)
	/usr/bin/python3 tests/ref/make_dit_single.py tests/ref/dit/$*/transformer $@ $(if $(filter zimage,$*),--prefix)
$(BUILD)/ref/dit/%_q8_0.gguf: tests/ref/make_dit_single.py tests/ref/dit/%/transformer/config.json
	@mkdir -p $(@D)
	/usr/bin/python3 tests/ref/make_dit_single.py tests/ref/dit/$*/transformer $@ --q8_0
.PHONY: dit-fixtures
dit-fixtures: $(DIT_SINGLE)
TEST_PREREQS += dit-fixtures
TEST_SCRIPTS += tests/models/dit_files.sh

# The 9-channel inpainting folders (issue 37): the tiny SD 1.x and SDXL folders with
# the conv_in tests/ref/gen_inpaint.py drew (tests/ref/inpaint/ref_inpaint.safetensors),
# built by tests/ref/make_inpaint.py (plain Python), sd1_inpaint also as a single file
# (make_single.py).  tests/test_sd_inpaint.c reads them.
INPAINT_REF := tests/ref/inpaint/ref_inpaint.safetensors
INPAINT_FIX := $(BUILD)/ref/diffusion/sd1_inpaint/model_index.json \
  $(BUILD)/ref/diffusion/sdxl_inpaint/model_index.json $(BUILD)/ref/diffusion/sd1_inpaint.safetensors
$(BUILD)/ref/diffusion/%_inpaint/model_index.json: tests/ref/make_inpaint.py $(INPAINT_REF) \
  tests/ref/diffusion/%/model_index.json
	@mkdir -p $(BUILD)/ref/diffusion
	/usr/bin/python3 tests/ref/make_inpaint.py tests/ref/diffusion/$* $(INPAINT_REF) $*.conv_in \
	  $(BUILD)/ref/diffusion/$*_inpaint
$(BUILD)/ref/diffusion/sd1_inpaint.safetensors: tests/ref/make_single.py \
  $(BUILD)/ref/diffusion/sd1_inpaint/model_index.json
	/usr/bin/python3 tests/ref/make_single.py $(BUILD)/ref/diffusion/sd1_inpaint sd1 $@
.PHONY: inpaint-fixtures
inpaint-fixtures: $(INPAINT_FIX)
TEST_PREREQS += inpaint-fixtures
