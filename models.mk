# models.mk - `make models`: the pretrained ESRGAN packages from npm
# (tests/models/fetch.sh: pinned versions and integrity hashes) unpacked
# into build/models/; `make test` prepares them for the golden tests.
.PHONY: models
models:
	@BUILD=$(BUILD) sh tests/models/fetch.sh $(BUILD)/models || [ $$? = 77 ]
TEST_PREREQS += models

# core/tfjs.c parses model.json with cJSON (Debian libcjson-dev)
LIB_EXTRA += $(CJSON_LIBS)
TEST_SCRIPTS += tests/models/golden.sh tests/models/upscale.sh
BENCH_SCRIPTS += bench/esrgan.sh
