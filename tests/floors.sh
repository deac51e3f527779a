#!/bin/sh
# tests/floors.sh - the floors of DESIGN.md run one way.  Reads every
# #include of the sources and says which crosses a floor the wrong way:
#
#   core/ (the engine)  core/ only: never core/io/, models/, a backend, Lua,
#                       readline or Vulkan; and it names no backend (no
#                       lm_cpu_*, lm_vulkan_*, LM_HAVE_VULKAN: the build
#                       generates the registry)
#   core/io/            core/ and core/io/
#   models/             core/, core/io/, models/ (never a backend, Lua or
#                       readline)
#   backends/B/         core/ (the engine) and backends/B/, never another
#                       backend, core/io/ or models/
#   lua/                anything but a backend (the core's device API only)
#   repl/               anything but a backend
#
# An include resolves as the compiler resolves it (-I. -Icore): the
# including file's folder, then the root, then core/.  Then the checker is
# run on a small tree with one wrong arrow of each kind, which it must
# refuse (a check that cannot fail checks nothing).
# Prints "N passed, N failed".
cd "$(dirname "$0")/.." || exit 1

# floors ROOT: prints one line per wrong arrow, "file: includes target
# (rule)"; nothing when the tree keeps its floors
floors() {
  root=$1
  find "$root/core" "$root/models" "$root/backends" "$root/lua" "$root/repl" \
       -type f \( -name '*.c' -o -name '*.h' \) 2>/dev/null | sort |
  while IFS= read -r f; do
    rel=${f#"$root"/}
    dir=$(dirname "$rel")
    case $rel in
      core/io/*)       floor=io ;;
      core/*)          floor=engine ;;
      models/*)        floor=models ;;
      backends/*/*)    floor=backend; own=$(echo "$rel" | cut -d/ -f1-2) ;;
      lua/*)           floor=lua ;;
      repl/*)          floor=repl ;;
      *)               continue ;;
    esac
    # system headers a floor must not see
    case $floor in
      engine|io|models|backend)
        sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*<\([^>]*\)>.*/\1/p' "$f" |
        while IFS= read -r h; do
          case $h in
            lua.h|lauxlib.h|lualib.h|readline/*) echo "$rel: includes <$h> (no Lua or readline below lua/)" ;;
            vulkan/*) [ "$floor" = backend ] || echo "$rel: includes <$h> (Vulkan only in its backend)" ;;
          esac
        done ;;
    esac
    if [ "$floor" = engine ] && grep -nE '\blm_(cpu|vulkan)_[a-z_]+|\bLM_HAVE_VULKAN\b' "$f" >/dev/null; then
      echo "$rel: names a backend ($(grep -noE '\blm_(cpu|vulkan)_[a-z_]+|\bLM_HAVE_VULKAN\b' "$f" | head -1))"
    fi
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
    while IFS= read -r inc; do
      if [ -f "$root/$dir/$inc" ]; then t=$dir/$inc
      elif [ -f "$root/$inc" ]; then t=$inc
      elif [ -f "$root/core/$inc" ]; then t=core/$inc
      else continue   # generated or outside the tree
      fi
      t=$(echo "$t" | sed -e 's#/\./#/#g' -e ':a' -e 's#[^/]*/\.\./##' -e 'ta')
      case $t in
        core/io/*) tf=io ;;
        core/*)    tf=engine ;;
        models/*)  tf=models ;;
        backends/*/*) tf=backend; town=$(echo "$t" | cut -d/ -f1-2) ;;
        lua/*)     tf=lua ;;
        repl/*)    tf=repl ;;
        *)         tf=other ;;
      esac
      ok=1
      case $floor:$tf in
        engine:engine|engine:other) ;;
        io:engine|io:io|io:other) ;;
        models:engine|models:io|models:models|models:other) ;;
        backend:engine|backend:other) ;;
        backend:backend) [ "$town" = "$own" ] || ok=0 ;;
        lua:backend|repl:backend) ok=0 ;;
        lua:*|repl:*) ;;
        *) ok=0 ;;
      esac
      [ $ok = 1 ] || echo "$rel: includes $t ($floor may not include $tf)"
    done
  done
}

pass=0 fail=0
out=$(floors .)
if [ -z "$out" ]; then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: the tree crosses its floors:"; echo "$out" | sed 's/^/  /'; fi

# the checker itself: each wrong arrow below must be reported
T=$(mktemp -d /tmp/lumen-floors.XXXXXX)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/core/io" "$T/models" "$T/backends/cpu" "$T/backends/vulkan" "$T/lua" "$T/repl"
echo '#include "array.h"' > "$T/core/ok.c"
: > "$T/core/array.h"; : > "$T/core/io/io.h"; : > "$T/models/unet.h"
: > "$T/backends/cpu/cpu.h"; : > "$T/backends/vulkan/vk.h"
echo '#include "array.h"' > "$T/backends/cpu/ok.c"
echo '#include "io/io.h"' > "$T/core/a.c"
echo '#include "models/unet.h"' > "$T/core/io/b.c"
echo '#include "backends/cpu/cpu.h"' > "$T/core/c.c"
echo 'static int x(void) { return lm_cpu_register(); }' > "$T/core/d.c"
echo '#include "../vulkan/vk.h"' > "$T/backends/cpu/e.c"
echo '#include "backends/vulkan/vk.h"' > "$T/lua/f.c"
echo '#include <lua.h>' > "$T/models/g.c"
echo '#include "lua/l_internal.h"' > "$T/models/h.c"; : > "$T/lua/l_internal.h"
got=$(floors "$T")
for want in "core/a.c: includes core/io/io.h" "core/io/b.c: includes models/unet.h" \
            "core/c.c: includes backends/cpu/cpu.h" "core/d.c: names a backend" \
            "backends/cpu/e.c: includes backends/vulkan/vk.h" "lua/f.c: includes backends/vulkan/vk.h" \
            "models/g.c: includes <lua.h>" "models/h.c: includes lua/l_internal.h"; do
  if echo "$got" | grep -qF "$want"; then pass=$((pass + 1))
  else fail=$((fail + 1)); echo "FAIL: the checker missed '$want'"; fi
done
n=$(echo "$got" | grep -c .)
if [ "$n" = 8 ]; then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: the checker reported $n arrows in its own tree, want 8:"; echo "$got" | sed 's/^/  /'; fi

echo "$pass passed, $fail failed"
[ $fail = 0 ]
