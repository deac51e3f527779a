#!/bin/sh
# tests/models/upscale.sh - `lumen upscale`, `lumen convert` and lm.models
# end to end on esrgan-medium x2 (CPU, and Vulkan where it runs): a 16-bit RGBA image of 100x90
# through tiles of 40 (overlap 16) equals the untiled result within 1/255,
# stays 16-bit RGBA with its alpha resized, carries the model and scale in
# tEXt chunks; several files go to a folder; the converted safetensors
# gives the same pixels; errors exit non-zero with a message that helps.
# Checks run in tests/models/upscale_check.lua; one line per check.
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh   # BUILD, check, vulkan_device, summary
LUMEN_MODELS=${LUMEN_MODELS:-$BUILD/models}
export LUMEN_MODELS LUMEN_DEVICE=cpu
if [ ! -f "$LUMEN_MODELS/esrgan-medium/package.json" ]; then
  sh tests/models/fetch.sh "$LUMEN_MODELS"
  rc=$?
  if [ $rc = 77 ]; then echo "models absent and npm unavailable: skipped"; exit 77; fi
fi
T=$BUILD/test-upscale
rm -rf "$T" && mkdir -p "$T"
L="$BUILD/lumen"
fails() {  # fails NAME PATTERN COMMAND...: the command fails (any status) saying PATTERN
  name=$1; pat=$2; shift 2
  if "$@" >"$T/log" 2>&1; then f=$((f + 1)); echo "FAIL $name (succeeded)"
  elif grep -q "$pat" "$T/log"; then p=$((p + 1)); echo "ok   $name"
  else f=$((f + 1)); echo "FAIL $name (no '$pat')"; sed 's/^/     /' "$T/log"; fi
}

# a 16-bit RGBA input: the fixture's corner with an alpha ramp
check "make a 16-bit RGBA input" "$L" -e "
  local img = lm.image.read_png('$LUMEN_MODELS/esrgan-medium/assets/fixture.png', {dtype='f32'})
  local rgb = img:slice(1, 1, 3):slice(2, 1, 90):slice(3, 1, 100)
  local a = lm.linspace(0.2, 1, 100):reshape{1, 1, 100} * lm.ones{1, 90, 100}
  lm.image.write_png('$T/in16.png', lm.concat({rgb, a}, 1), {bits=16})"
check "upscale tiled (--tile 40)" "$L" upscale "$T/in16.png" -o "$T/tiled.png" --model esrgan-medium --scale 2 --tile 40 --quiet
check "upscale untiled (--tile 0)" "$L" upscale "$T/in16.png" -o "$T/whole.png" --model esrgan-medium --scale 2 --tile 0 --quiet
check "many files into a folder" "$L" upscale "$T/in16.png" "$LUMEN_MODELS/esrgan-medium/assets/fixture.png" -o "$T/outdir" --model esrgan-medium --scale 2 --quiet
check "convert to safetensors" "$L" convert esrgan-medium "$T/medium2.safetensors" --scale 2
check "upscale with the converted model" "$L" upscale "$T/in16.png" -o "$T/conv.png" --model "$T/medium2.safetensors" --scale 2 --tile 0 --quiet
check "results (upscale_check.lua)" "$L" tests/models/upscale_check.lua "$T" "$LUMEN_MODELS"
# --device vulkan (lavapipe here) gives the CPU's pixels within 1/255
if vulkan_device; then
  check "upscale --device vulkan" env LUMEN_DEVICE=vulkan "$L" upscale "$T/in16.png" -o "$T/vk.png" --model esrgan-medium --scale 2 --tile 40 --device vulkan --quiet
  # the tile it chooses: 512 on a GPU, 256 on lavapipe (a CPU device: host memory)
  want=$(LUMEN_DEVICE=vulkan "$L" -e 'for _, d in ipairs(lm.devices()) do if d.spec == "vulkan:0" then print((d.kind:match("gpu$") and d.kind ~= "cpu-gpu") and 512 or 256) end end')
  check "vulkan's default tile is $want ($(LUMEN_DEVICE=vulkan "$L" -e 'print(lm.devices()[2].kind)'))" sh -c "'$L' upscale '$T/in16.png' -o '$T/tile.png' --model esrgan-medium --scale 2 --device vulkan -v --overwrite 2>&1 | grep -q 'tile $want overlap 16'"
  check "vulkan pixels == cpu pixels" "$L" -e "
    local a = lm.image.read_png('$T/vk.png', {dtype='f32'})
    local b = lm.image.read_png('$T/tiled.png', {dtype='f32'})
    local d = (a - b):abs():max():item()
    print(('vulkan vs cpu max %.3g'):format(d))
    assert(d <= 1 / 255, 'vulkan differs from the cpu by ' .. d)"
else
  echo "no Vulkan device: the --device vulkan check is skipped"
fi
fails "a misspelled model lists the installed ones" "installed: .*esrgan-medium" "$L" upscale "$T/in16.png" -o "$T/x.png" --model esrgan-mediun
fails "a scale the package lacks" "has no x5" "$L" upscale "$T/in16.png" -o "$T/x.png" --scale 5
fails "an unreadable input" "nothere.png" "$L" upscale "$T/nothere.png" -o "$T/x.png" --scale 2
fails "no output given" "needs input files and -o" "$L" upscale "$T/in16.png"
# the second sweep of issue 23: convert replaced an existing file unasked
fails "convert does not replace an existing file" "exists (--overwrite replaces it)" \
  sh -c "'$L' convert esrgan-medium '$T/medium2.safetensors' --scale 2 && false"
check "the refused file is intact" sh -c "'$L' upscale '$T/in16.png' -o '$T/conv2.png' --model '$T/medium2.safetensors' --scale 2 --tile 0 --quiet && cmp '$T/conv.png' '$T/conv2.png'"
check "convert --overwrite replaces it" "$L" convert esrgan-medium "$T/medium2.safetensors" --scale 2 --overwrite
check "convert --help prints the usage" sh -c "'$L' convert --help | grep -q '^usage: lumen convert IN OUT'"
fails "convert of a bad model.json" "not valid JSON" sh -c "echo '{' > $T/bad.json; $L convert $T/bad.json $T/bad.safetensors"

# ---- issue 23 item 2: nothing is replaced unasked ----
# Every refusal must come before the model loads: these runs name a model
# whose model.json is invalid, so a run that got as far as loading it says
# "not valid JSON" instead of the refusal.
BAD=$T/bad.json
TA=$(cd "$T" && pwd); LA=$(cd "$(dirname "$L")" && pwd)/lumen
mkdir -p "$T/s" "$T/d1" "$T/d2"
"$L" -e "lm.image.write_png('$T/s/a.png', lm.rand{3, 24, 20})
         lm.image.write_png('$T/s/b.png', lm.rand{3, 20, 24})"
cp "$T/s/a.png" "$T/d1/a.png"; cp "$T/s/b.png" "$T/d2/a.png"; cp "$T/s/a.png" "$T/a.orig"
fails "-o the input itself is refused" "never replaces an input" "$L" upscale "$T/s/a.png" -o "$T/s/a.png" --model "$BAD"
fails "-o the inputs' own folder is refused" "never replaces an input" "$L" upscale "$T/s/a.png" "$T/s/b.png" -o "$T/s/" --model "$BAD"
fails "another spelling of the input is refused" "never replaces an input" "$L" upscale "$T/s/a.png" -o "$T/s/../s/./a.png" --overwrite --model "$BAD"
ln -f "$T/s/a.png" "$T/s/link.png"
fails "a hard link to the input is refused, --overwrite or not" "never replaces an input" "$L" upscale "$T/s/a.png" -o "$T/s/link.png" --overwrite --model "$BAD"
check "the input is untouched" cmp "$T/s/a.png" "$T/a.orig"
fails "two inputs with one output name are refused" "would both be written to" "$L" upscale "$T/d1/a.png" "$T/d2/a.png" -o "$T/o1/" --model "$BAD"
check "... and nothing was written" sh -c "! ls '$T/o1/a.png' 2>/dev/null"
fails "several inputs and -o naming a file is refused" "need a folder" "$L" upscale "$T/d1/a.png" "$T/s/b.png" -o "$T/single.png" --model "$BAD"
check "... and no folder single.png/ was made" sh -c "! test -e '$T/single.png'"
: > "$T/afile"
fails "an output folder that cannot be made fails before the model" "cannot make folder" "$L" upscale "$T/s/a.png" -o "$T/afile/x.png" --model "$BAD"
mkfifo "$T/fifo.png"
fails "a FIFO input is refused, not read forever" "FIFO" timeout 60 "$L" upscale "$T/fifo.png" -o "$T/f.png" --model "$BAD"
check "missing output folders are made (-o new/dir/x.png)" "$L" upscale "$T/s/a.png" -o "$T/new/dir/x.png" --model esrgan-medium --scale 2 --quiet
fails "an existing output is kept without --overwrite" "exists (--overwrite" "$L" upscale "$T/s/b.png" -o "$T/new/dir/x.png" --model esrgan-medium --scale 2 --quiet
check "--overwrite replaces it" "$L" upscale "$T/s/b.png" -o "$T/new/dir/x.png" --model esrgan-medium --scale 2 --quiet --overwrite
check "... with b's result (48x40)" "$L" -e "assert(lm.image.read_png('$T/new/dir/x.png').shape[3] == 48)"
check "no temporary files are left" sh -c "! find '$T/new' '$T/s' -name '*.tmp*' | grep -q ."

# ---- items 10 and 14: options are named, --help shows defaults ----
fails "--tile -5 names the option and the accepted values" "tile -5: expected a whole number of pixels >= 0" "$L" upscale "$T/s/a.png" -o "$T/t.png" --tile -5
fails "--scale 0 names the option" "scale 0: expected" "$L" upscale "$T/s/a.png" -o "$T/t.png" --scale 0
fails "--range 1,2 is refused" "range 1,2: expected" "$L" upscale "$T/s/a.png" -o "$T/t.png" --range 1,2
fails "an unknown option is named" "unknown option --tiles" "$L" upscale "$T/s/a.png" -o "$T/t.png" --tiles 4
check "--help shows the defaults" sh -c "'$L' upscale --help | grep -q 'default 256, or 512' && '$L' upscale --help | grep -q 'default esrgan-slim'"
# the default tile: 256 on the CPU and on lavapipe (host memory), 512 on a GPU
check "the CPU's default tile is 256" sh -c "'$L' upscale '$T/s/a.png' -o '$T/tile.png' --model esrgan-medium --scale 2 --device cpu -v --overwrite 2>&1 | grep -q 'tile 256 overlap 16'"
# issue 36: -v says at the end where the time went, pipelined and --serial
check "-v: the stages of a pipelined run" sh -c "'$L' upscale '$T/s/a.png' '$T/s/b.png' -o '$T/vstages/' --model esrgan-slim --scale 2 --device cpu -v -q 2>&1 | grep -Eq '^lumen upscale: 2 images in [0-9.]+ s: start [0-9.]+ s \(the devices [0-9.]+ s, the model [0-9.]+ s\), model [0-9.]+ s \(the first image [0-9.]+ s\), waiting for the reader [0-9.]+ s and the writer [0-9.]+ s; beside the model, decode [0-9.]+ s, encode and write [0-9.]+ s\$'"
check "-v --serial: the stages one at a time" sh -c "'$L' upscale '$T/s/a.png' -o '$T/vserial.png' --model esrgan-slim --scale 2 --device cpu -v -q --serial 2>&1 | grep -Eq '^lumen upscale: 1 images in [0-9.]+ s: start [0-9.]+ s \(the device, the model\), then one at a time: decode [0-9.]+ s, model [0-9.]+ s, encode and write [0-9.]+ s\$'"

# ---- item 13: models are found where installed, not in the current folder ----
mkdir -p "$T/cwd" "$T/xdg/lumen/models"
check "lm.models.dirs(): LUMEN_MODELS entries, then XDG_DATA_HOME" env LUMEN_MODELS="$T/m1:$T/m2" XDG_DATA_HOME="$TA/xdg" "$L" -e "
  local d = lm.models.dirs()
  assert(d[1] == '$T/m1' and d[2] == '$T/m2' and d[3] == '$TA/xdg/lumen/models', table.concat(d, ' '))"
# a package of one's own in XDG_DATA_HOME: esrgan-medium x2's weights, an
# UpscalerJS-style definition that says 0..255 (item 15)
F=$T/xdg/lumen/models/fake255
mkdir -p "$F/models/x2" "$F/dist/esm/src/x2"
cp "$LUMEN_MODELS/esrgan-medium/models/x2/"* "$F/models/x2/"
cat > "$F/package.json" <<'JSON'
{"name": "@someone/fake255", "exports": {"./2x": {"require": "./dist/cjs/none.js", "import": "./dist/esm/src/x2/index.js"}}}
JSON
cat > "$F/dist/esm/src/x2/index.js" <<'JS'
import getModelDefinition from '../getModelDefinition';
export default getModelDefinition(2, 'fake');
JS
cat > "$F/dist/esm/src/getModelDefinition.js" <<'JS'
const getModelDefinition = (scale, modelFileName) => ({
    scale,
    modelType: 'layers',
    meta: { architecture: "rdn", modelFileName },
    inputRange: [0, 255,],
    outputRange: [0, 255,],
});
export default getModelDefinition;
JS
# the same weights with no definition that can be read: 0..1 and a warning
B=$T/xdg/lumen/models/fakebad
mkdir -p "$B/models/x2" && cp "$F/models/x2/"* "$B/models/x2/"
echo '{"name": "@someone/fakebad", "exports": {"./2x": {"import": "./dist/missing.js"}}}' > "$B/package.json"
check "a package in XDG_DATA_HOME is listed and loaded from another folder" sh -c "cd '$T/cwd' && env -u LUMEN_MODELS XDG_DATA_HOME='$TA/xdg' '$LA' -e \"
  local l = table.concat(lm.models.list(), ' ')
  assert(l:match('fake255'), 'list: ' .. l)
  local m = lm.models.load('fake255', {scale = 2})
  assert(m.range == 255, 'range ' .. m.range)
  assert(tostring(m):match('range 0..255 %(.*getModelDefinition.js%)'), tostring(m))\""
if [ -d "$BUILD/models/esrgan-medium/models" ]; then
  check "the build's own models are found from another folder" sh -c "cd '$T/cwd' && env -u LUMEN_MODELS XDG_DATA_HOME='$TA/xdg' '$LA' -e \"
    assert(lm.models.load('esrgan-medium', {scale = 2}).range == 255)\""
fi

# ---- item 15: the range is read from the package, --range and range= set it ----
check "upscale reads 0..255 from the package's definition (-v says so)" sh -c "cd '$T/cwd' && env -u LUMEN_MODELS XDG_DATA_HOME='$TA/xdg' '$LA' upscale '$TA/in16.png' -o '$TA/fake.png' --model fake255 --scale 2 --tile 0 -v 2>&1 | grep 'range 0..255 (.*getModelDefinition.js)'"
check "... and gives esrgan-medium's pixels" "$L" -e "
  assert((lm.image.read_png('$T/fake.png', {dtype='f32'}) - lm.image.read_png('$T/whole.png', {dtype='f32'})):abs():max():item() == 0)"
check "an unreadable definition warns and falls back to 0..1" sh -c "o=\$(env XDG_DATA_HOME='$TA/xdg' '$L' -e \"assert(lm.models.load('fakebad', {scale = 2}).range == 1)\" 2>&1) && echo \"\$o\" | grep -q 'cannot read the value range'"
check "--range 0,255 on a bare model.json gives esrgan-medium's pixels" sh -c "
  '$L' upscale '$T/in16.png' -o '$T/bare.png' --model '$B/models/x2/model.json' --scale 2 --tile 0 --range 0,255 --quiet 2>/dev/null &&
  '$L' -e \"assert((lm.image.read_png('$T/bare.png', {dtype='f32'}) - lm.image.read_png('$T/whole.png', {dtype='f32'})):abs():max():item() == 0)\""
check "range={0, 255} in Lua" "$L" -e "
  local m = lm.models.load('$B/models/x2/model.json', {range = {0, 255}})
  assert(m.range == 255 and tostring(m):match('range 0..255 %(range=%)'), tostring(m))"

# ---- issue 25: a folder runs as a pipeline (reader and writer threads
# around the model); its files are --serial's, byte for byte ----
mkdir -p "$T/pf"
"$L" -e "lm.image.write_png('$T/pf/a.png', lm.rand({3, 20, 28}, {seed = 1}))
         lm.image.write_png('$T/pf/b.png', lm.rand({4, 26, 18}, {seed = 2}), {bits = 16})
         lm.image.write_png('$T/pf/c.png', lm.rand({1, 17, 23}, {seed = 3}))
         lm.image.write_png('$T/pf/d.png', lm.rand({2, 21, 19}, {seed = 4}))"
same_dirs() {  # same_dirs A B FILE...: each FILE in A equals the one in B
  a=$1 b=$2; shift 2
  for n in "$@"; do cmp "$a/$n" "$b/$n" || return 1; done
}
check "pipelined folder of 4 (RGB, 16-bit RGBA, gray, gray+alpha)" "$L" upscale "$T"/pf/a.png "$T"/pf/b.png "$T"/pf/c.png "$T"/pf/d.png -o "$T/pp/" --model esrgan-medium --scale 2 --tile 12 --quiet
check "--serial folder of 4" "$L" upscale "$T"/pf/a.png "$T"/pf/b.png "$T"/pf/c.png "$T"/pf/d.png -o "$T/ps/" --model esrgan-medium --scale 2 --tile 12 --quiet --serial
check "... byte-equal files" same_dirs "$T/pp" "$T/ps" a.png b.png c.png d.png
check "LUMEN_UPSCALE_SERIAL=1 is --serial" env LUMEN_UPSCALE_SERIAL=1 "$L" upscale "$T/pf/b.png" -o "$T/pe/" --model esrgan-medium --scale 2 --tile 12 --quiet
check "one image, pipelined, to a file" "$L" upscale "$T/pf/b.png" -o "$T/p1/one.png" --model esrgan-medium --scale 2 --tile 12 --quiet
check "... equals --serial's" sh -c "cmp '$T/p1/one.png' '$T/ps/b.png' && cmp '$T/pe/b.png' '$T/ps/b.png'"
# a broken image in the middle: a clear message naming it, exit 1, the
# others written as --serial writes them, nothing else left behind
mkdir -p "$T/pb"
cp "$T/pf/a.png" "$T/pb/a.png"; cp "$T/pf/c.png" "$T/pb/c.png"
head -c 60 "$T/pf/b.png" > "$T/pb/b.png"
printf 'not a png' > "$T/pb/e.png"
"$L" upscale "$T/pb/a.png" "$T/pb/b.png" "$T/pb/e.png" "$T/pb/c.png" -o "$T/pbo/" --model esrgan-medium --scale 2 --tile 12 > "$T/pb.out" 2> "$T/pb.err"
echo $? > "$T/pb.rc"
"$L" upscale "$T/pb/a.png" "$T/pb/b.png" "$T/pb/e.png" "$T/pb/c.png" -o "$T/pbs/" --model esrgan-medium --scale 2 --tile 12 --serial > "$T/pbs.out" 2> "$T/pbs.err"
check "a broken image in the middle: exit 1" sh -c "test \$(cat '$T/pb.rc') = 1"
check "... the messages name the broken files (truncated, not a PNG)" sh -c "grep -q 'lumen upscale: $T/pb/b.png: bad PNG: .*truncated' '$T/pb.err' && grep -q 'lumen upscale: $T/pb/e.png: not a PNG file' '$T/pb.err'"
check "... stdout and stderr as --serial's, in the inputs' order" sh -c "sed 's/pbo/pbs/' '$T/pb.out' | cmp - '$T/pbs.out' && cmp '$T/pb.err' '$T/pbs.err' && grep -q '2 of 4 written' '$T/pb.out'"
check "... the other outputs byte-equal to --serial's" same_dirs "$T/pbo" "$T/pbs" a.png c.png
check "... no output and no temporary for the broken ones" sh -c "! test -e '$T/pbo/b.png' && ! test -e '$T/pbo/e.png' && test \$(ls -A '$T/pbo' | wc -l) = 2"
if vulkan_device; then
  check "vulkan: pipelined folder (f16)" env LUMEN_DEVICE=vulkan "$L" upscale "$T"/pf/a.png "$T"/pf/b.png "$T"/pf/c.png -o "$T/pvp/" --model esrgan-medium --scale 2 --tile 12 --dtype f16 --quiet
  check "vulkan: --serial folder (f16)" env LUMEN_DEVICE=vulkan "$L" upscale "$T"/pf/a.png "$T"/pf/b.png "$T"/pf/c.png -o "$T/pvs/" --model esrgan-medium --scale 2 --tile 12 --dtype f16 --quiet --serial
  check "vulkan: ... byte-equal files" same_dirs "$T/pvp" "$T/pvs" a.png b.png c.png
fi

# ---- item 9: model weights pace Lua's collector ----
check "200 loads of a 1 MB model stay under 32 MB of live buffers" "$L" -e "
  local peak = 0
  for i = 1, 200 do
    local m = lm.models.load('esrgan-slim', {scale = 2})
    peak = math.max(peak, lm.memory().active)
  end
  print(('peak active %.1f MB'):format(peak / 2^20))
  assert(peak < 32 * 2^20, ('peak active %.1f MB'):format(peak / 2^20))"

summary
