#!/bin/sh
# tests/models/upscale.sh - `lumen upscale`, `lumen convert` and lm.models
# end to end on esrgan-medium x2 (CPU, and Vulkan where it runs): a 16-bit RGBA image of 100x90
# through tiles of 40 (overlap 16) equals the untiled result within 1/255,
# stays 16-bit RGBA with its alpha resized, carries the model and scale in
# tEXt chunks; several files go to a folder; the converted safetensors
# gives the same pixels; errors exit non-zero with a message that helps.
# Checks run in tests/models/upscale_check.lua; one line per check.
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
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
p=0 f=0
check() {  # check NAME COMMAND...: passes when the command succeeds
  name=$1; shift
  if "$@" >"$T/log" 2>&1; then p=$((p + 1)); echo "ok   $name"
  else f=$((f + 1)); echo "FAIL $name"; sed 's/^/     /' "$T/log"; fi
}
fails() {  # fails NAME PATTERN COMMAND...: the command fails saying PATTERN
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
if LUMEN_DEVICE=vulkan "$L" -e 'assert(tostring(lm.device()):match("vulkan"))' >/dev/null 2>&1; then
  check "upscale --device vulkan" env LUMEN_DEVICE=vulkan "$L" upscale "$T/in16.png" -o "$T/vk.png" --model esrgan-medium --scale 2 --tile 40 --device vulkan --quiet
  check "vulkan pixels == cpu pixels" "$L" -e "
    local a = lm.image.read_png('$T/vk.png', {dtype='f32'})
    local b = lm.image.read_png('$T/tiled.png', {dtype='f32'})
    local d = (a - b):abs():max():item()
    print(('vulkan vs cpu max %.3g'):format(d))
    assert(d <= 1 / 255, 'vulkan differs from the cpu by ' .. d)"
else
  echo "no Vulkan device: the --device vulkan check is skipped"
fi
fails "a missing package says make models" "make models" env LUMEN_MODELS="$T/none" "$L" upscale "$T/in16.png" -o "$T/x.png"
fails "a scale the package lacks" "has no x5" "$L" upscale "$T/in16.png" -o "$T/x.png" --scale 5
fails "an unreadable input" "nothere.png" "$L" upscale "$T/nothere.png" -o "$T/x.png" --scale 2
fails "no output given" "needs input files and -o" "$L" upscale "$T/in16.png"
fails "convert of a bad model.json" "not valid JSON" sh -c "echo '{' > $T/bad.json; $L convert $T/bad.json $T/bad.safetensors"
echo "$p passed, $f failed"
[ "$f" = 0 ]
