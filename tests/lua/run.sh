#!/bin/sh
# tests/lua/run.sh - the Lua API tests, run twice: under build/lumen and
# under Debian's stock lua5.4 loading build/lumen.so through package.cpath.
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh   # BUILD, relay, summary
LUA=${LUA:-lua5.4}
files=$(ls tests/lua/test_*.lua)
run() { relay "$@" tests/lua/runner.lua $files && echo "  $*: $line"; }
run "$BUILD/lumen"
# a sanitizer build of lumen.so needs the ASan runtime loaded before lua5.4
preload=
if ldd "$BUILD/lumen.so" 2>/dev/null | grep -q libasan; then
  preload=$(${CC:-cc} -print-file-name=libasan.so)
fi
if command -v "$LUA" >/dev/null 2>&1; then
  run env ${preload:+LD_PRELOAD=$preload} "$LUA" -e "package.cpath='$BUILD/?.so;'..package.cpath"
  # lua5.4 unloads lumen.so at exit while pool threads may still be in it
  # (lumen.so is linked -z nodelete); this crashed most runs before
  exit_ok=0
  for i in 1 2 3; do
    env ${preload:+LD_PRELOAD=$preload} "$LUA" -e "package.cpath='$BUILD/?.so;'..package.cpath" \
      -e 'local lm = require "lumen"; local x = lm.randn{1, 16, 64, 64}
          lm.conv2d(x, lm.randn{16, 16, 3, 3}, nil, {padding = 1}):sum():item()' || exit_ok=1
  done
  if [ $exit_ok = 0 ]; then p=$((p + 1)); else echo "FAIL lua5.4 exits cleanly after pool work"; f=$((f + 1)); fi
  # the models beside the module: build/models for build/lumen.so given by a
  # relative package.cpath, as the README shows (issue 34: none was found)
  want="$(cd "$BUILD" && pwd -P)/models"
  if env -u LUMEN_MODELS HOME=/nonexistent ${preload:+LD_PRELOAD=$preload} "$LUA" \
       -e "package.cpath='$BUILD/?.so;'..package.cpath" \
       -e "local lm = require 'lumen'
           for _, d in ipairs(lm.models.dirs()) do if d == '$want' then os.exit(0) end end
           print('lm.models.dirs() lacks $want: ' .. table.concat(lm.models.dirs(), ', ')); os.exit(1)"; then
    p=$((p + 1)); else echo "FAIL lua5.4 looks for models beside lumen.so"; f=$((f + 1)); fi
else
  echo "$LUA not installed: module test skipped"; f=$((f + 1))
fi
summary
