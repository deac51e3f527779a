#!/bin/sh
# tests/models/grid.sh - issue 37 in `lumen generate` on the tiny random SD
# 1.x folder of tests/ref/diffusion (CPU, f32): X/Y/Z grids (--xyz): the
# grid PNG's size, each tile equal to its single image's pixels, label
# pixels drawn (dark pixels in the label bands, none where no label is), one
# grid per Z value with its title, a cell equal to the plain run of its
# settings byte for byte, prompt S/R, no overwrite of the singles or the
# grid, the refusals (unknown axis, a LoRA axis naming no LoRA, a font that is
# not one); the hires fix (--hires: the target size, A1111's infotext keys,
# Size the first pass's, the latent and model upscalers); variation seeds
# (strength 1 gives the variation seed's image, A1111's infotext keys); `lumen
# batch` with samples/batch_generate.lua's hires and variation columns (a
# batch of 2 gives the bytes of single jobs, the images of lumen generate).  One
# line per check.
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
export LUMEN_DEVICE=cpu
D=tests/ref/diffusion
if [ ! -f "$D/sd1/model_index.json" ]; then
  echo "tests/ref/diffusion fixtures absent: skipped"
  exit 77
fi
T=$BUILD/test-grid
rm -rf "$T" && mkdir -p "$T"
L="$BUILD/lumen"
p=0 f=0
check() {  # check NAME COMMAND...: passes when the command succeeds
  name=$1; shift
  if "$@" >"$T/log" 2>&1; then p=$((p + 1)); echo "ok   $name"
  else f=$((f + 1)); echo "FAIL $name"; sed 's/^/     /' "$T/log"; fi
}
fails() {  # fails NAME RC PATTERN COMMAND...: exits RC saying PATTERN
  name=$1; want=$2; pat=$3; shift 3
  "$@" >"$T/log" 2>&1; rc=$?
  if [ $rc != "$want" ]; then f=$((f + 1)); echo "FAIL $name (exit $rc, not $want)"; sed 's/^/     /' "$T/log"
  elif grep -q -- "$pat" "$T/log"; then p=$((p + 1)); echo "ok   $name"
  else f=$((f + 1)); echo "FAIL $name (no \"$pat\")"; sed 's/^/     /' "$T/log"; fi
}
G="$L generate 'a photo of an astronaut riding a horse' --negative 'blurry, low quality' --steps 3 --size 64x64 -q --model $D/sd1"

# Lua: grid G of NX x NY tiles of 64 px, singles PREFIX_%04d.png in row-major order
cat > "$T/check.lua" <<'LUA'
local grid, prefix, nx, ny, first = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4]), tonumber(arg[5] or 0)
local g = lm.image.read_png(grid)
local H, W = g.shape[2], g.shape[3]
local left, top = W - nx * 64, H - ny * 64
assert(left > 0 and top > 0, ("grid %dx%d: no label bands for %dx%d tiles"):format(W, H, nx, ny))
for iy = 0, ny - 1 do
  for ix = 0, nx - 1 do
    local k = first + iy * nx + ix
    local s = lm.image.read_png(("%s_%04d.png"):format(prefix, k))
    local t = g:slice(2, top + iy * 64 + 1, top + iy * 64 + 64):slice(3, left + ix * 64 + 1, left + ix * 64 + 64)
    assert(lm.allclose(t:astype("f32"), s:astype("f32"), 0, 0), ("tile %d,%d is not image %d"):format(ix, iy, k))
  end
end
-- label pixels: dark ones above every column and beside every row; the corner is blank
local function dark(t) return (t:astype("f32"):lt(128)):astype("f32"):sum():item() end
for ix = 0, nx - 1 do
  assert(dark(g:slice(2, 1, top):slice(3, left + ix * 64 + 1, left + ix * 64 + 64)) > 10, "column label " .. ix)
end
for iy = 0, ny - 1 do
  assert(dark(g:slice(2, top + iy * 64 + 1, top + iy * 64 + 64):slice(3, 1, left)) > 10, "row label " .. iy)
end
if arg[6] == "title" then   -- a title line above the column labels: the band is two lines
  assert(top >= 2 * 15, "no title line: top band " .. top)
  assert(dark(g:slice(2, 1, top // 2)) > 10, "no title drawn")
else
  assert(dark(g:slice(2, 1, top):slice(3, 1, left)) == 0, "the corner holds no label")
end
print(("grid %dx%d, left %d, top %d"):format(W, H, left, top))
LUA

check "--xyz seed x cfg: 6 singles and a grid" sh -c "$G --xyz 'seed=1,2,3' --xyz 'cfg=5,7' -o $T/g.png && test -s $T/g_0005.png && test -s $T/g_grid.png && ! test -e $T/g_0006.png"
check "the grid: left and top label bands, each tile the single image's pixels, labels drawn" $L $T/check.lua $T/g_grid.png $T/g 3 2
check "cell (seed 2, cfg 7) is the plain run's PNG byte for byte" sh -c "$G --seed 2 --cfg 7 -o $T/plain.png && cmp $T/plain.png $T/g_0004.png"
check "the singles' parameters name their cell" sh -c "$L -e \"local _, t = lm.image.read_png('$T/g_0003.png'); assert(t.parameters:find('CFG scale: 7, Seed: 1,', 1, true), t.parameters)\""
check "the grid carries the first cell's parameters" sh -c "$L -e \"local _, t = lm.image.read_png('$T/g_grid.png'); assert(t.parameters:find('CFG scale: 5, Seed: 1,', 1, true), t.parameters)\""
cp $T/g_grid.png $T/keep.png
fails "an existing single or grid is refused (nothing runs)" 1 "exists (--overwrite replaces it)" sh -c "$G --xyz 'seed=1,2,3' --xyz 'cfg=5,7' -o $T/g.png"
check "... and left as it was" cmp $T/g_grid.png $T/keep.png
check "--xyz X only: one row, no row labels" sh -c "$G --seed 4 --xyz 'steps=2,3' -o $T/x.png && $L -e \"local g = lm.image.read_png('$T/x_grid.png'); assert(g.shape[3] == 128 and g.shape[2] > 64, tostring(g))\""
check "X/Y/Z: one grid per Z value, a title line above" sh -c "$G --xyz 'seed=1,2' --xyz 'cfg=5,7' --xyz 'sampler=euler,ddim' -o $T/z.png && test -s $T/z_grid_0.png && test -s $T/z_grid_1.png && test -s $T/z_0007.png && $L $T/check.lua $T/z_grid_1.png $T/z 2 2 4 title && $L $T/check.lua $T/z_grid_0.png $T/z 2 2 0 title"
check "prompt S/R replaces the first value in the prompt" sh -c "$G --seed 1 --xyz 'prompt_sr=horse,cat' -o $T/sr.png && $L -e \"local _, t = lm.image.read_png('$T/sr_0001.png'); assert(t.parameters:find('riding a cat', 1, true), t.parameters)\" && ! cmp -s $T/sr_0000.png $T/sr_0001.png"
check "-o with %d: the grid takes 'grid' there" sh -c "$G --seed 1 --xyz 'cfg=5,6' -o $T/pct_%d.png && test -s $T/pct_grid.png && test -s $T/pct_1.png"
fails "an unknown axis" 2 "unknown axis" sh -c "$G --xyz 'colour=1,2' -o $T/u.png"
fails "a LoRA axis naming no LoRA of the run (no --lora fox.safetensors, no <lora:fox> tag)" 2 "xyz lora:fox: no LoRA fox" sh -c "$G --xyz 'lora:fox=0.2,0.8' -o $T/u.png"
fails "a bad value is a usage error before anything runs" 2 "xyz cfg abc" sh -c "$G --xyz 'cfg=5,abc' -o $T/u.png"
fails "prompt S/R's first value must be in the prompt" 2 "not in the prompt" sh -c "$G --xyz 'prompt_sr=zebra,cat' -o $T/u.png"
fails "a font that is not one" 2 "font tests/models/grid.sh" sh -c "$G --xyz 'cfg=5,6' --font tests/models/grid.sh -o $T/u.png"
check "... and nothing was written" sh -c "! ls $T/u* 2>/dev/null | grep -q ."

# hires fix
check "--hires 1.5: 96x96, A1111's keys, Size the first pass's" sh -c "$G --seed 1 --hires 1.5 --hires-steps 4 --hires-denoise 0.5 -o $T/h.png && $L -e \"local im, t = lm.image.read_png('$T/h.png'); assert(im.shape[2] == 96 and im.shape[3] == 96); assert(t.parameters:find('Size: 64x64, Model: sd1, Denoising strength: 0.5, Hires upscale: 1.5, Hires steps: 4, Hires upscaler: Latent', 1, true), t.parameters)\""
check "--hires-upscaler latent-nearest: Latent (nearest), another image" sh -c "$G --seed 1 --hires 1.5 --hires-steps 4 --hires-denoise 0.5 --hires-upscaler latent-nearest -o $T/hn.png && $L -e \"local _, t = lm.image.read_png('$T/hn.png'); assert(t.parameters:find('Hires upscaler: Latent (nearest)', 1, true))\" && ! cmp -s $T/h.png $T/hn.png"
check "--hires-size 96x0 keeps the aspect; A1111's Hires resize" sh -c "$G --seed 1 --hires-size 96x0 -o $T/hs.png && $L -e \"local im, t = lm.image.read_png('$T/hs.png'); assert(im.shape[2] == 96 and im.shape[3] == 96); assert(t.parameters:find('Denoising strength: 0.7, Hires resize: 96x0, Hires upscaler: Latent', 1, true), t.parameters)\""
check "a model upscaler (a TF.js model.json)" sh -c "$G --seed 1 --hires 2 --hires-denoise 0.5 --hires-upscaler tests/ref/fixtures/tfjs/model.json -o $T/hm.png && $L -e \"local im, t = lm.image.read_png('$T/hm.png'); assert(im.shape[2] == 128); assert(t.parameters:find('Hires upscaler: tests/ref/fixtures/tfjs/model.json', 1, true), t.parameters)\""
fails "--hires-steps without --hires" 2 "give --hires" sh -c "$G --hires-steps 4 -o $T/v.png"
fails "--hires with --init" 2 "not with --init" sh -c "$G --hires 2 --init $T/h.png -o $T/v.png"
fails "a missing upscaler, before the model runs" 1 "no-such-upscaler" sh -c "$G --hires 2 --hires-upscaler no-such-upscaler -o $T/v.png"
fails "a hires denoise that leaves no step" 1 "strength 0.2 of 3 steps" sh -c "$G --hires 2 --hires-denoise 0.2 -o $T/v.png"
check "--xyz hires_denoise" sh -c "$G --seed 1 --hires 1.5 --xyz 'hires_denoise=0.5,0.9' -o $T/hx.png && $L -e \"local g = lm.image.read_png('$T/hx_grid.png'); assert(g.shape[3] == 192)\""
check "--xyz hires_scale: cells of their own sizes, the grid's tiles the largest, a smaller cell on white at its tile's top left" sh -c "$G --seed 1 --hires 1.5 --xyz 'hires_scale=1.5,2' -o $T/hs.png && $L -e \"local a, b = lm.image.read_png('$T/hs_0000.png'):astype('f32'), lm.image.read_png('$T/hs_0001.png'):astype('f32'); assert(a.shape[3] == 96 and b.shape[3] == 128); local g = lm.image.read_png('$T/hs_grid.png'):astype('f32'); assert(g.shape[3] == 256); local top = g.shape[2] - 128; assert((g:slice(2, top + 1, top + 96):slice(3, 1, 96) - a):abs():max():item() == 0); assert(g:slice(2, top + 97, top + 128):slice(3, 1, 96):min():item() == 255); assert((g:slice(2, top + 1, top + 128):slice(3, 129, 256) - b):abs():max():item() == 0)\""
fails "--xyz hires_scale without --hires" 2 "give --hires" sh -c "$G --xyz 'hires_scale=1.5,2' -o $T/hs2.png"

# variation seeds
check "--variation-strength 1 gives the variation seed's image (DPM++ 2M)" sh -c "$G --seed 1 --variation-seed 9 --variation-strength 1 -o $T/v1.png && $G --seed 9 -o $T/s9.png && $L -e \"local a, t = lm.image.read_png('$T/v1.png'); local b = lm.image.read_png('$T/s9.png'); assert(lm.allclose(a:astype('f32'), b:astype('f32'), 0, 0)); assert(t.parameters:find('Seed: 1, Size: 64x64, Model: sd1, Variation seed: 9, Variation seed strength: 1', 1, true), t.parameters)\""
check "--variation-strength 0.3 differs from both" sh -c "$G --seed 1 --variation-seed 9 --variation-strength 0.3 -o $T/v3.png && $G --seed 1 -o $T/s1.png && $L -e \"local a = lm.image.read_png('$T/v3.png'):astype('f32'); for _, o in ipairs{'$T/s1.png', '$T/s9.png'} do assert(not lm.allclose(a, lm.image.read_png(o):astype('f32'), 0, 0)) end\""
check "a batch's variation seeds: 9, 10 in the parameters" sh -c "$G --seed 1 --batch-size 2 --variation-seed 9 --variation-strength 0.3 -o $T/vb.png && $L -e \"local _, t = lm.image.read_png('$T/vb_0001.png'); assert(t.parameters:find('Seed: 2, Size: 64x64, Model: sd1, Variation seed: 10,', 1, true), t.parameters)\""
check "--seed-resize-from: A1111's Seed resize from, another image; the own size the plain one" sh -c "$G --seed 1 --seed-resize-from 32x48 -o $T/sr1.png && $L -e \"local a, t = lm.image.read_png('$T/sr1.png'); assert(t.parameters:find('Model: sd1, Seed resize from: 32x48', 1, true), t.parameters); assert(not lm.allclose(a:astype('f32'), lm.image.read_png('$T/s1.png'):astype('f32'), 0, 0))\" && $G --seed 1 --seed-resize-from 64x64 -o $T/sr2.png && $L -e \"assert(lm.allclose(lm.image.read_png('$T/sr2.png'):astype('f32'), lm.image.read_png('$T/s1.png'):astype('f32'), 0, 0))\""
fails "--variation-seed without a strength" 2 "needs --variation-strength" sh -c "$G --variation-seed 3 -o $T/v.png"
fails "--variation-strength above 1" 2 "variation-strength 2" sh -c "$G --variation-strength 2 -o $T/v.png"

# lumen batch with the sample: hires and variation columns; batches of 2 give the bytes of 1
printf '%s\n' '{"seed": 1, "prompt": "a red fox", "steps": 3, "size": "64x64", "hires": 1.5, "hires_denoise": 0.5, "variation_seed": 9, "variation_strength": 0.3}' \
  '{"seed": 2, "prompt": "a red fox", "steps": 3, "size": "64x64", "hires": 1.5, "hires_denoise": 0.5, "variation_seed": 20, "variation_strength": 0.3}' \
  '{"seed": 3, "prompt": "a red fox", "steps": 3, "size": "64x64", "variation_seed": 9, "variation_strength": 1}' > "$T/params.jsonl"
check "lumen batch: hires and variation columns, one job at a time" "$L" batch samples/batch_generate.lua --params "$T/params.jsonl" \
  -o "$T/one/%d.png" --progress off --manifest none -- $D/sd1
check "... --batch-size 2: the same bytes" sh -c "$L batch samples/batch_generate.lua --params $T/params.jsonl -o '$T/two/%d.png' --batch-size 2 --progress off --manifest none -- $D/sd1 && for i in 1 2 3; do cmp $T/one/\$i.png $T/two/\$i.png || exit 1; done"
check "... job 1 is lumen generate's --hires --variation-seed image, job 3 seed 9's" sh -c "$L generate 'a red fox' --model $D/sd1 --steps 3 --size 64x64 -q --seed 1 --hires 1.5 --hires-denoise 0.5 --variation-seed 9 --variation-strength 0.3 -o $T/bj1.png && $L generate 'a red fox' --model $D/sd1 --steps 3 --size 64x64 -q --seed 9 -o $T/bj3.png && $L -e \"local function px(f) return lm.image.read_png(f):astype('f32') end; assert(lm.allclose(px('$T/one/1.png'), px('$T/bj1.png'), 0, 0)); assert(px('$T/one/1.png').shape[2] == 96); assert(lm.allclose(px('$T/one/3.png'), px('$T/bj3.png'), 0, 0))\""

echo "$p passed, $f failed"
[ $f = 0 ]
