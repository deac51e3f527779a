# repl/module.mk - build/lumen: the REPL and script runner over the Lua
# module, plus `make run` and `make install`.
REPL_SRC := $(wildcard repl/*.c)
REPL_OBJ := $(REPL_SRC:%.c=$(BUILD)/obj/%.o)

$(BUILD)/obj/repl/%.o: CFLAGS += $(LUA_CFLAGS)
# lumen serve (repl/serve*.c): libmicrohttpd and cJSON
$(BUILD)/obj/repl/serve.o $(BUILD)/obj/repl/serve_http.o $(BUILD)/obj/repl/serve_req.o $(BUILD)/obj/repl/serve_worker.o \
  $(BUILD)/obj/repl/serve_b64.o: CFLAGS += $(MHD_CFLAGS) $(CJSON_CFLAGS)
# MPI (optional): only `lumen batch` uses it (repl/batch.c)
ifeq ($(MPI_ENABLED),yes)
$(BUILD)/obj/repl/batch.o: CFLAGS += -DLM_HAVE_MPI $(MPI_CFLAGS)
REPL_MPI_LIBS := $(MPI_LIBS)
endif

# FreeType: the grids' labels (lua/xyz_grid.c; FREETYPE_* in lua/module.mk)

# lumen.so (lua/module.mk) is made with it: both link the lua/ objects, and
# a `make build/lumen` after editing lua/*.c left the module that stock
# lua5.4 loads (tests/lua/run.sh's second run) stale.  Order-only: the
# binary does not load the .so, so a newer .so needs no relink.
$(BUILD)/lumen: $(REPL_OBJ) $(LUA_OBJ) $(LIB) | $(BUILD)/lumen.so
	$(CC) -o $@ $(REPL_OBJ) $(LUA_OBJ) $(LIB) $(LDFLAGS) $(LIB_EXTRA) $(CJSON_LIBS) $(CHAFA_LIBS) $(MHD_LIBS) $(REPL_MPI_LIBS) $(LUA_LIBS) $(FREETYPE_LIBS) -lreadline -lm -lpthread -ldl

ALL_TARGETS += $(BUILD)/lumen
TEST_SCRIPTS += tests/repl/run.sh tests/batch/run.sh tests/batch/safety.sh tests/batch/mpi.sh
TEST_SCRIPTS += tests/batch/mpi_bytes.sh tests/sweep/run.sh
TEST_SCRIPTS += tests/batch/timeline.sh
TEST_SCRIPTS += tests/serve/run.sh tests/repl/make_deps.sh
# lumen serve's test client, the openai npm package (pinned), fetched at
# set-up into $(BUILD)/node; tests/serve/run.sh skips that part without it
.PHONY: serve-client
serve-client:
	@BUILD=$(BUILD) sh tests/serve/fetch.sh $(BUILD)/node || [ $$? = 77 ]
TEST_PREREQS += serve-client

run: $(BUILD)/lumen
	$(BUILD)/lumen

install: $(BUILD)/lumen $(BUILD)/lumen.so
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(LUA_CMOD_DIR)
	install -m 755 $(BUILD)/lumen $(DESTDIR)$(PREFIX)/bin/lumen
	install -m 644 $(BUILD)/lumen.so $(DESTDIR)$(LUA_CMOD_DIR)/lumen.so

# docs/API.md is generated from the docstrings registered by lua/l_*.c
docs/API.md: $(BUILD)/lumen docs/gen_api.lua
	$(BUILD)/lumen docs/gen_api.lua > $@

-include $(REPL_OBJ:.o=.d)
BENCH_SCRIPTS += bench/batch.sh
