#!/bin/sh
# tests/vk/coldstart.sh - the pipeline cache and the compile threads
# (backends/vulkan/pipeline.c), on the first Vulkan device (lavapipe here):
#  - the same kernels give the same bytes with pipelines made on compile
#    threads (several counts) as made one at a time where first dispatched
#    (LUMEN_VK_COMPILE_THREADS=0), on an empty and on a written cache;
#  - the cache file carries Lumen's header (magic, length, checksum);
#  - a process killed while writing the cache (LUMEN_VK_CACHE_STOP_AT: it
#    stops itself with SIGKILL part-way through the new file) leaves the old
#    file as it was, and no file where there was none; the next start works,
#    gives the same bytes and removes the dead process's temporary file;
#  - a cache file cut short, with a byte changed, of random bytes, or in the
#    header-less form earlier versions wrote is not given to the driver: the
#    start is cold and right, and the file is written again whole;
#  - the device is taken down at exit: work only queued still gets its
#    pipelines into the cache, and the validation layer finds nothing of
#    the device's left undestroyed.
# Ends with "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
L="$BUILD/lumen"
OPS=tests/vk/coldstart_ops.lua
T=$(mktemp -d "${TMPDIR:-/tmp}/lumen-coldstart.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
export XDG_CACHE_HOME="$T/xdg"
export LUMEN_FALLBACK=0
# Mesa's own shader cache apart, kept across the runs (the one under
# XDG_CACHE_HOME is emptied between them): only the first run compiles
export MESA_SHADER_CACHE_DIR="$T/mesa"
if ! "$L" -e 'for _, d in ipairs(lm.devices()) do if d.backend == "vulkan" then os.exit(0) end end os.exit(1)' \
     >/dev/null 2>&1; then
  echo "coldstart.sh: no Vulkan device: skipped"
  exit 77
fi
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
check() { if [ "$1" = 0 ]; then ok "$2"; else bad "$2"; fi }

cachefile() { ls "$XDG_CACHE_HOME"/lumen/vulkan-*.cache 2>/dev/null | head -1; }
magic() { [ -f "$1" ] && [ "$(head -c 8 "$1")" = LMVKPC01 ]; }
run() {   # run NAME [VAR=VALUE...]: the ops into $T/NAME.st; its exit status
  rn=$1; shift
  env "$@" "$L" "$OPS" "$T/$rn.st" > "$T/$rn.log" 2>&1
}

# the reference: pipelines made one at a time, on an empty cache
rm -rf "$XDG_CACHE_HOME"
run ref LUMEN_VK_COMPILE_THREADS=0; check $? "lazy path (no compile threads), empty cache: runs"
f=$(cachefile)
magic "$f"; check $? "the cache file is written with Lumen's header"
for n in 2 16; do
  rm -rf "$XDG_CACHE_HOME"
  run t$n LUMEN_VK_COMPILE_THREADS=$n && cmp -s "$T/ref.st" "$T/t$n.st"
  check $? "$n compile threads, empty cache: the same bytes"
done
run warm && cmp -s "$T/ref.st" "$T/warm.st"; check $? "default threads, written cache: the same bytes"

# killed while writing, with no cache before: no cache file after, a stray
# temporary file; the next start works and removes it
rm -rf "$XDG_CACHE_HOME"
run kill1 LUMEN_VK_CACHE_STOP_AT=12
rc=$?
[ $rc = 137 ] || [ $rc = 265 ]; check $? "LUMEN_VK_CACHE_STOP_AT=12 stops the process in its first save (rc $rc)"
[ -z "$(cachefile)" ]; check $? "... and leaves no cache file"
ls "$XDG_CACHE_HOME"/lumen/*.tmp >/dev/null 2>&1; check $? "... only its temporary file"
run after1 && cmp -s "$T/ref.st" "$T/after1.st"; check $? "the next start: the same bytes"
magic "$(cachefile)"; check $? "... writes the cache"
! ls "$XDG_CACHE_HOME"/lumen/*.tmp >/dev/null 2>&1; check $? "... and removes the dead process's temporary file"

# killed while writing over a cache: the old file is untouched
f=$(cachefile)
cp "$f" "$T/before.cache"
for at in 0 30; do
  run kill2 LUMEN_VK_CACHE_STOP_AT=$at
  rc=$?
  { [ $rc = 137 ] || [ $rc = 265 ]; } && cmp -s "$f" "$T/before.cache"
  check $? "killed $at bytes into writing over the cache: the old file whole (rc $rc)"
done
run after2 && cmp -s "$T/ref.st" "$T/after2.st"; check $? "the next start: the same bytes"

# damaged files: the start is cold and right, the file is written again
damage() {   # damage NAME: the cache file made bad in that way
  f=$(cachefile)
  case $1 in
    short) head -c 30 "$T/before.cache" > "$f" ;;
    header) head -c 20 "$T/before.cache" > "$f" ;;
    flipped) cp "$T/before.cache" "$f"
             printf 'X' | dd of="$f" bs=1 seek=40 conv=notrunc 2>/dev/null ;;
    random) head -c 4096 /dev/urandom > "$f" ;;
    old) tail -c +25 "$T/before.cache" > "$f" ;;   # the driver's data alone, as before the header
    empty) : > "$f" ;;
  esac
}
for how in short flipped random old; do
  damage $how
  run d_$how && cmp -s "$T/ref.st" "$T/d_$how.st" && magic "$(cachefile)"
  check $? "a cache file $how: the same bytes, the file written again with its header"
done

# the device taken down at exit (backends/vulkan/device.c): a process that
# ends with its work only queued (t:eval{wait = false}, no wait after it)
# still writes the pipelines it made; before, the cache was written only
# when a wait ended, and such a process left none
QUEUED="local x = lm.ones({64}, {device = 'vulkan'}); (x * 3 + 1):eval{wait = false}"
for how in "" "; os.exit(0)"; do
  rm -rf "$XDG_CACHE_HOME"
  "$L" -e "$QUEUED$how" > "$T/queued.log" 2>&1 && magic "$(cachefile)"
  check $? "work only queued at exit${how:+ (os.exit)}: the cache written at exit, with its header"
done
# under the validation layer, vkDestroyDevice finds every child object of
# the device destroyed first (pipelines, shader modules, the cache, command
# and memory objects): no message at exit
LUMEN_VK_VALIDATE=1 "$L" "$OPS" "$T/val.st" > "$T/val.log" 2>&1
rc=$?
if grep -q "validation layer is missing" "$T/val.log"; then
  echo "skip the validation layer's check: the layer is not installed"
else
  [ $rc = 0 ] && ! grep -q "vulkan validation" "$T/val.log" && cmp -s "$T/ref.st" "$T/val.st"
  check $? "under the validation layer: the same bytes, no message up to and at exit (rc $rc)"
  grep "vulkan validation" "$T/val.log" | head -3 | cut -c1-300
  LUMEN_VK_VALIDATE=1 "$L" -e "$QUEUED; os.exit(0)" > "$T/val2.log" 2>&1 && ! grep -q "vulkan validation" "$T/val2.log"
  check $? "... and for work only queued at os.exit, the arrays never freed"
  # the same 12 times on the warm cache, 4 at a time: exit's handlers
  # destroyed lavapipe's JIT objects while the queued work still needed them
  # (a crash at exit, about 1 run in 100 here, before lumen waited for its
  # devices in os.exit and at the end of main)
  crashed=0
  for r in 1 2 3; do
    for j in 1 2 3 4; do
      (LUMEN_VK_VALIDATE=1 "$L" -e "$QUEUED; os.exit(0)" > "$T/val3_$j.log" 2>&1 || echo "rc $?" >> "$T/val3_$j.log") &
    done
    wait
    for j in 1 2 3 4; do grep -q "^rc \|vulkan validation" "$T/val3_$j.log" && crashed=$((crashed + 1)); done
  done
  [ $crashed = 0 ]
  check $? "... os.exit with work queued, 12 processes on the warm cache: each ends with 0 and no message ($crashed did not)"
fi

echo "$pass passed, $fail failed"
[ $fail = 0 ]
