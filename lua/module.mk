# lua/module.mk - the Lua module `lumen` (build/lumen.so) and the objects
# the REPL links in.  The .so leaves Lua's symbols to the host interpreter
# (stock lua5.4 or our REPL), so it does not link liblua.
LUA_CFLAGS := $(shell pkg-config --cflags lua5.4 2>/dev/null || echo -I/usr/include/lua5.4)
LUA_LIBS   := $(shell pkg-config --libs lua5.4 2>/dev/null || echo -llua5.4)
LUA_SRC    := $(wildcard lua/*.c)
LUA_OBJ    := $(LUA_SRC:%.c=$(BUILD)/obj/%.o)
# where Debian's lua5.4 looks for C modules (package.cpath)
LUA_CMOD_DIR ?= $(PREFIX)/lib/lua/5.4

$(BUILD)/obj/lua/%.o: CFLAGS += $(LUA_CFLAGS)

# FreeType (Debian libfreetype-dev): the labels of the X/Y/Z grids of
# `lumen generate --xyz` and `lumen batch --xyz` (lua/xyz_grid.c, in both
# lumen.so and the lumen binary), in a font found at run time
# (fonts-dejavu-core)
FREETYPE_CFLAGS := $(shell pkg-config --cflags freetype2 2>/dev/null || echo -I/usr/include/freetype2)
FREETYPE_LIBS := $(shell pkg-config --libs freetype2 2>/dev/null || echo -lfreetype)
$(BUILD)/obj/lua/xyz_grid.o: CFLAGS += $(FREETYPE_CFLAGS)

# -z nodelete: stock lua5.4 dlcloses C modules when its state closes, while
# the CPU pool's worker threads still run code inside the library (they
# are never joined at exit); unmapping under them crashed scripts at exit.
$(BUILD)/lumen.so: $(LUA_OBJ) $(LIB)
	$(CC) -shared -Wl,-z,nodelete -o $@ $(LUA_OBJ) $(LIB) $(LDFLAGS) $(LIB_EXTRA) $(CJSON_LIBS) $(CHAFA_LIBS) $(FREETYPE_LIBS) -lm -lpthread -ldl

ALL_TARGETS += $(BUILD)/lumen.so
TEST_SCRIPTS += tests/lua/run.sh tests/lua/run_grad_vulkan.sh tests/lua/diff_vae.sh tests/lua/run_dit_lora_vulkan.sh

-include $(LUA_OBJ:.o=.d)

# lm.grad & co. and lm.optim are Lua (lua/l_grad.lua, lua/l_optim.lua),
# embedded in l_grad.o as one C string.
LUA_EMBED := lua/l_grad.lua lua/l_optim.lua
$(BUILD)/gen/l_grad_lua.h: $(LUA_EMBED)
	@mkdir -p $(dir $@)
	{ echo 'static const char lm_grad_lua_src[] ='; sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $(LUA_EMBED); echo ';'; } > $@
$(BUILD)/obj/lua/l_grad.o: $(BUILD)/gen/l_grad_lua.h
$(BUILD)/obj/lua/l_grad.o: CFLAGS += -I$(BUILD)/gen
BENCH_SCRIPTS += bench/train.sh bench/train_flow.sh

# lm.batch is Lua (lua/l_batch.lua, then its timeline: lua/l_batch_timeline.lua,
# one chunk) over C helpers in l_batch.c (JSON by cJSON).
$(BUILD)/gen/l_batch_lua.h: lua/l_batch.lua lua/l_batch_timeline.lua
	@mkdir -p $(dir $@)
	{ echo 'static const char lm_batch_lua_src[] ='; sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $^; echo ';'; } > $@
# lumen batch --xyz's expansion of a job into the cells of a grid
$(BUILD)/gen/l_batch_xyz_lua.h: lua/l_batch_xyz.lua
	@mkdir -p $(dir $@)
	{ echo 'static const char lm_batch_xyz_lua_src[] ='; sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $<; echo ';'; } > $@
$(BUILD)/obj/lua/l_batch.o: $(BUILD)/gen/l_batch_lua.h $(BUILD)/gen/l_batch_xyz_lua.h
$(BUILD)/obj/lua/l_batch.o: CFLAGS += -I$(BUILD)/gen $(CJSON_CFLAGS)

# inline images (lua/term_image.c): libchafa encodes kitty, iTerm2, sixel
# and half blocks
$(BUILD)/obj/lua/term_image.o: CFLAGS += $(CHAFA_CFLAGS)
TEST_SCRIPTS += tests/show/run.sh
