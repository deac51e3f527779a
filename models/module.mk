# models/module.mk - the model code: networks people trained, their loaders,
# tokenizers, samplers and pipelines, on a floor of their own above the engine
# (core/) and the file formats (core/io/); tests/floors.sh keeps the arrows
# pointing down.  It goes into the one library with the engine.
TEST_SCRIPTS += tests/floors.sh
# models/tfjs.c and the diffusers configs are read with cJSON (Debian libcjson-dev)
LIB_EXTRA += $(CJSON_LIBS)
# models/clip_tokenizer.c, qwen_tokenizer.c: NFC, lowercasing and letter/number classes
# from ICU (Debian libicu-dev), the same Unicode data the tokenizers library uses;
# qwen_tokenizer.c splits with its regular expressions (uregex, icu-i18n)
LIB_EXTRA += $(shell pkg-config --libs icu-uc icu-i18n 2>/dev/null || echo -licui18n -licuuc -licudata)
