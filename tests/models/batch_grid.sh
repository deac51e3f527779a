#!/bin/sh
# tests/models/batch_grid.sh - issue 37 in `lumen batch` with
# samples/batch_generate.lua on the tiny random SD 1.x folder of
# tests/ref/diffusion (CPU, f32), each against `lumen generate` with the same
# settings (the decoded pixels: each command writes its own PNG text):
# X/Y/Z grids (--xyz: the grid and every cell equal generate's, two and three
# axes, one titled grid per Z value; the grid carries its first cell's text;
# a hires_scale axis's cells of different sizes in one grid;
# under mpirun -np 2 the same bytes as one process; a resumed run makes the
# missing cells and writes the grid, and writes it when it finds every cell
# made; a failed cell leaves no grid, said so; the refusals), variation
# seeds (variation_seed/_strength, A1111's subseed names, seed_resize_from),
# LoRAs (--lora FILE:W on the command line, a job's lora column, <lora:> tags
# from --lora-dir; a job without after one with gets the plain image back;
# a LoRA weight axis, lora:NAME, in both commands), and lumen.so drawing a
# grid under stock lua5.4.  One line per check.
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
export LUMEN_DEVICE=cpu
D=tests/ref/diffusion
if [ ! -f "$D/sd1/model_index.json" ]; then
  echo "tests/ref/diffusion fixtures absent: skipped"
  exit 77
fi
T=$BUILD/test-batch-grid
rm -rf "$T" && mkdir -p "$T"
L="$BUILD/lumen"
SAME="$L tests/models/same_pixels.lua"
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
G="$L generate 'a red fox' --negative 'blurry' --steps 3 --size 64x64 -q --model $D/sd1"
B="$L batch samples/batch_generate.lua --progress off"
echo '{"prompt": "a red fox", "negative": "blurry", "steps": 3, "size": "64x64", "seed": 1}' > "$T/base.jsonl"

# ---- X/Y/Z grids ----
check "generate --xyz seed=1,2 --xyz cfg=5,7 (the reference)" sh -c "$G --seed 1 --xyz seed=1,2 --xyz cfg=5,7 -o $T/g.png"
check "batch --xyz seed=1,2 --xyz cfg=5,7: four jobs and out/grid.png" sh -c "$B --params $T/base.jsonl --xyz seed=1,2 --xyz cfg=5,7 -o '$T/one/%d.png' -- $D/sd1 && test -f $T/one/4.png && ! test -e $T/one/5.png && test -f $T/one/grid.png"
check "... the grid is generate's, pixel for pixel" $SAME "$T/g_grid.png" "$T/one/grid.png"
check "... each cell is generate's image of that cell (X, then Y)" $SAME "$T/g_0000.png" "$T/one/1.png" "$T/g_0001.png" "$T/one/2.png" "$T/g_0002.png" "$T/one/3.png" "$T/g_0003.png" "$T/one/4.png"
check "... the grid carries its first cell's text (parameters and the lumen record)" "$L" -e "
  local _, g = lm.image.read_png('$T/one/grid.png'); local _, c = lm.image.read_png('$T/one/1.png')
  assert(g.parameters == c.parameters and g.lumen == c.lumen, tostring(g.parameters))
  assert(c.parameters:find('cfg: 5', 1, true), c.parameters)"
check "three axes: one titled grid per Z value, each generate's" sh -c "$G --seed 1 --xyz seed=1,2 --xyz sampler=euler_a,ddim --xyz prompt_sr=fox,cat -o $T/g3.png &&
  $B --params $T/base.jsonl --xyz seed=1,2 --xyz sampler=euler_a,ddim --xyz prompt_sr=fox,cat -o '$T/three/%d.png' -- $D/sd1 &&
  $SAME $T/g3_grid_0.png $T/three/grid_0.png $T/g3_grid_1.png $T/three/grid_1.png $T/g3_0007.png $T/three/8.png"
check "clip_skip=1,2 (A1111's count, as generate's --clip-skip): generate's grid and cells" sh -c "$G --seed 1 --xyz clip_skip=1,2 -o $T/gc.png &&
  $B --params $T/base.jsonl --xyz clip_skip=1,2 -o '$T/clip/%d.png' -- $D/sd1 && ! cmp -s $T/clip/1.png $T/clip/2.png &&
  $SAME $T/gc_grid.png $T/clip/grid.png $T/gc_0001.png $T/clip/2.png"
check "--grid FILE names the grid" sh -c "$B --params $T/base.jsonl --xyz 'cfg=5,7' --grid $T/named/plot.png -o '$T/named/{cfg}.png' -- $D/sd1 && test -f $T/named/plot.png && test -f $T/named/5.png"
echo '{"prompt": "a red fox", "negative": "blurry", "steps": 3, "size": "64x64", "seed": 1, "hires": 1.5}' > "$T/hires.jsonl"
check "hires_scale=1,1.5: cells of 64 and 96 px in one grid (each cell the largest's), generate's pixel for pixel" sh -c "
  $G --seed 1 --hires 1.5 --xyz 'hires_scale=1,1.5' -o $T/gh.png &&
  $B --params $T/hires.jsonl --xyz 'hires_scale=1,1.5' -o '$T/hs/%d.png' -- $D/sd1 &&
  $SAME $T/gh_grid.png $T/hs/grid.png $T/gh_0000.png $T/hs/1.png $T/gh_0001.png $T/hs/2.png &&
  $L -e \"assert(lm.image.read_png('$T/hs/1.png').shape[3] == 64 and lm.image.read_png('$T/hs/2.png').shape[3] == 96)\""

# several processes: the cells spread over the ranks, rank 0 writes the grid
if grep -q '^MPI_ENABLED := yes' "$BUILD/config.mk" 2>/dev/null && command -v mpirun >/dev/null 2>&1; then
  MPIRUN="mpirun --oversubscribe"
  [ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
  # OpenMPI's components leak at exit (tests/batch/mpi.sh says more): no
  # leak check under mpirun in a sanitizer build
  if grep -q fsanitize "$BUILD/flags.stamp" 2>/dev/null; then
    MPIRUN="env ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 $MPIRUN -x ASAN_OPTIONS"
  fi
  check "mpirun -np 2: the cells and the grid byte for byte those of one process, one manifest" sh -c "
    LUMEN_THREADS=1 $MPIRUN -np 2 $B --params $T/base.jsonl --xyz seed=1,2 --xyz cfg=5,7 -o '$T/two/%d.png' --progress lines -- $D/sd1 2>$T/mpi.err &&
    for x in 1 2 3 4 grid; do cmp $T/one/\$x.png $T/two/\$x.png || exit 1; done &&
    grep -q '^batch: 2 processes made' $T/mpi.err &&
    sed 's|/two/|/one/|g' $T/two/manifest.jsonl | cmp - $T/one/manifest.jsonl && ! ls -a $T/two | grep -q tmp"
else
  echo "skip mpirun -np 2 (lumen without MPI or no mpirun)"
fi

# resume: each cell is its own output
mkdir -p "$T/res" && cp "$T/one/"*.png "$T/one/manifest.jsonl" "$T/res/" && rm "$T/res/grid.png" "$T/res/3.png"
RES="local r = lm.batch{script = 'samples/batch_generate.lua', args = {'$D/sd1'}, params = '$T/base.jsonl',
  xyz = {'seed=1,2', 'cfg=5,7'}, out = '$T/res/%d.png', progress = 'off'}
  assert(r.made == tonumber(arg[1]) and r.existed == 4 - r.made and #r.grids == 1 and r.grids[1] == '$T/res/grid.png',
    string.format('made %d, existed %d, grids %d', r.made, r.existed, #(r.grids or {})))"
echo "$RES" > "$T/res.lua"
check "a resumed plot (lm.batch) makes the missing cell only and writes the grid: the same bytes" sh -c "
  $L $T/res.lua 1 && for x in 1 2 3 4 grid; do cmp $T/one/\$x.png $T/res/\$x.png || exit 1; done"
rm "$T/res/grid.png"
check "a resumed plot that finds every cell made writes the grid (once, the same bytes)" sh -c "
  $L $T/res.lua 0 && cmp $T/one/grid.png $T/res/grid.png && $B --params $T/base.jsonl --xyz seed=1,2 --xyz cfg=5,7 -o '$T/res/%d.png' -- $D/sd1 && cmp $T/one/grid.png $T/res/grid.png"
fails "a failed cell: no grid, said so, exit 1" 1 "grid $T/bad/grid.png: 1 of its 2 cells have no image; not written" \
  $B --params "$T/base.jsonl" --xyz 'steps=3,99999' -o "$T/bad/%d.png" -- $D/sd1
check "... and the other cell is made, the grid absent" sh -c "test -f $T/bad/1.png && ! test -e $T/bad/grid.png"

# refusals, before anything runs
printf '%s\n' '{"prompt": "a", "seed": 1}' '{"prompt": "b", "seed": 2}' > "$T/two_jobs.jsonl"
fails "--xyz over two jobs is refused" 2 "the axes expand one job" $B --params "$T/two_jobs.jsonl" --xyz 'cfg=5,7' -o "$T/x/%d.png" -- $D/sd1
fails "--grid without --xyz is refused" 2 "give xyz" $B --params "$T/base.jsonl" --grid "$T/x/g.png" -o "$T/x/%d.png" -- $D/sd1
fails "prompt_sr whose first value is not in the prompt" 2 "the first value, owl, is not in the job's prompt" $B --params "$T/base.jsonl" --xyz 'prompt_sr=owl,cat' -o "$T/x/%d.png" -- $D/sd1
fails "a seed that is not whole" 2 "xyz seed: '1.5' is not a whole number" $B --params "$T/base.jsonl" --xyz 'seed=1,1.5' -o "$T/x/%d.png" -- $D/sd1
fails "a file that is not a font" 2 "not a font file" $B --params "$T/base.jsonl" --xyz 'cfg=5,7' --font "$T/base.jsonl" -o "$T/x/%d.png" -- $D/sd1
fails "out named by a parameter and no --grid" 2 "give the grid's file with grid=" $B --params "$T/base.jsonl" --xyz 'cfg=5,7' -o "$T/x/{cfg}.png" -- $D/sd1
fails "a LoRA weight axis naming no LoRA of the job" 2 "xyz lora:fox: the job has no LoRA fox" $B --params "$T/base.jsonl" --xyz 'lora:fox=0.5,1' -o "$T/x/%d.png" -- $D/sd1
fails "a hires_scale axis on a job without hires" 2 "give the job a hires column" $B --params "$T/base.jsonl" --xyz 'hires_scale=1,1.5' -o "$T/x/%d.png" -- $D/sd1
check "... and nothing was written" sh -c "! test -e $T/x/1.png"

# ---- variation seeds ----
check "generate --variation-seed / --variation-strength / --seed-resize-from (the reference)" sh -c "
  $G --seed 5 --variation-seed 7 --variation-strength 0.3 -o $T/v1.png && $G --seed 5 --variation-seed 7 --variation-strength 0.3 --seed-resize-from 48x40 -o $T/v2.png &&
  $G --seed 6 --seed-resize-from 80x80 -o $T/v3.png"
printf '%s\n' '{"prompt": "a red fox", "negative": "blurry", "steps": 3, "size": "64x64", "seed": 5, "variation_seed": 7, "variation_strength": 0.3}' \
  '{"prompt": "a red fox", "negative": "blurry", "steps": 3, "size": "64x64", "seed": 5, "subseed": 7, "subseed_strength": 0.3, "seed_resize_from": "48x40"}' \
  '{"prompt": "a red fox", "negative": "blurry", "steps": 3, "size": "64x64", "seed": 6, "seed_resize_from": "80x80"}' > "$T/var.jsonl"
check "batch: variation_seed/_strength, A1111's subseed names and seed_resize_from are generate's images" sh -c "
  $B --params $T/var.jsonl -o '$T/var/%d.png' -- $D/sd1 && $SAME $T/v1.png $T/var/1.png $T/v2.png $T/var/2.png $T/v3.png $T/var/3.png"

# ---- LoRA ----
Q=lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q
mkdir -p "$T/loras"
"$L" -e "lm.save('$T/loras/fox.safetensors', {['$Q.lora_down.weight'] = lm.randn({4, 32}, {seed = 1}),
  ['$Q.lora_up.weight'] = lm.randn({32, 4}, {seed = 2}), ['$Q.alpha'] = lm.tensor(4.0)})"
check "generate --lora fox:0.8 and without (the references)" sh -c "$G --seed 3 --lora $T/loras/fox.safetensors:0.8 -o $T/l1.png && $G --seed 3 -o $T/l0.png && ! cmp -s $T/l1.png $T/l0.png"
echo '{"prompt": "a red fox", "negative": "blurry", "steps": 3, "size": "64x64", "seed": 3}' > "$T/plain.jsonl"
check "batch --lora FILE:0.8: generate's image; the job's params record it" sh -c "
  $B --params $T/plain.jsonl --lora $T/loras/fox.safetensors:0.8 -o '$T/lcli/%d.png' -- $D/sd1 && $SAME $T/l1.png $T/lcli/1.png &&
  grep -q '\"lora\":\"$T/loras/fox.safetensors:0.8\"' $T/lcli/manifest.jsonl"
printf '%s\n' "{\"prompt\": \"a red fox\", \"negative\": \"blurry\", \"steps\": 3, \"size\": \"64x64\", \"seed\": 3, \"lora\": \"$T/loras/fox.safetensors:0.8\"}" \
  '{"prompt": "a red fox", "negative": "blurry", "steps": 3, "size": "64x64", "seed": 3}' \
  '{"prompt": "a red fox <lora:fox:0.8>", "negative": "blurry", "steps": 3, "size": "64x64", "seed": 3}' \
  "{\"prompt\": \"a red fox\", \"negative\": \"blurry\", \"steps\": 3, \"size\": \"64x64\", \"seed\": 3, \"lora\": [\"$T/loras/fox.safetensors:0.8\"]}" > "$T/lora.jsonl"
check "batch: a job's lora column, then a job without (the weights restored), a <lora:> tag from --lora-dir, a lora list" sh -c "
  $B --params $T/lora.jsonl --lora-dir $T/loras -o '$T/lj/%d.png' -- $D/sd1 && $SAME $T/l1.png $T/lj/1.png $T/l0.png $T/lj/2.png $T/l1.png $T/lj/3.png $T/l1.png $T/lj/4.png"
check "... the same with --batch-size 2" sh -c "
  $B --params $T/lora.jsonl --lora-dir $T/loras --batch-size 2 -o '$T/lj2/%d.png' -- $D/sd1 && for i in 1 2 3 4; do cmp $T/lj/\$i.png $T/lj2/\$i.png || exit 1; done"
fails "a <lora:> tag without --lora-dir fails its job, named" 1 "needs a LoRA folder (lora_dir, --lora-dir DIR)" \
  $B --params "$T/lora.jsonl" -o "$T/ljx/%d.png" -- $D/sd1
check "a LoRA weight axis (lora:fox=0.3,0.8): batch's grid is generate's; its 0.8 cell generate's --lora fox:0.8" sh -c "
  $G --seed 3 --lora $T/loras/fox.safetensors --xyz 'lora:fox=0.3,0.8' -o $T/lg.png &&
  $B --params $T/plain.jsonl --lora $T/loras/fox.safetensors --xyz 'lora:fox=0.3,0.8' -o '$T/lg/%d.png' -- $D/sd1 &&
  $SAME $T/lg_grid.png $T/lg/grid.png $T/l1.png $T/lg/2.png $T/l1.png $T/lg_0001.png"
echo '{"prompt": "a red fox <lora:fox:1>", "negative": "blurry", "steps": 3, "size": "64x64", "seed": 3}' > "$T/tag.jsonl"
check "... on a <lora:fox> tag in both commands" sh -c "
  $L generate 'a red fox <lora:fox:1>' --negative blurry --steps 3 --size 64x64 -q --model $D/sd1 --seed 3 --lora-dir $T/loras --xyz 'lora:fox=0.3,0.8' -o $T/lt.png &&
  $B --params $T/tag.jsonl --lora-dir $T/loras --xyz 'lora:fox=0.3,0.8' -o '$T/lt/%d.png' -- $D/sd1 &&
  $SAME $T/lt_grid.png $T/lt/grid.png $T/lg_grid.png $T/lt/grid.png"

# ---- lumen.so: FreeType linked into the module too ----
# a sanitizer build of lumen.so needs the ASan runtime loaded before lua5.4 (as tests/lua/run.sh)
preload=
if ldd "$BUILD/lumen.so" 2>/dev/null | grep -q libasan; then
  preload=$(${CC:-cc} -print-file-name=libasan.so)
fi
if command -v lua5.4 >/dev/null 2>&1; then
  check "stock lua5.4 with require 'lumen' draws a labelled grid (lumen.so links FreeType)" env ${preload:+LD_PRELOAD=$preload} lua5.4 -e "
    package.cpath = '$BUILD/?.so;' .. package.cpath; local lm = require 'lumen'
    local g = lm.image.xyz_grid({lm.zeros{3, 16, 16}, lm.ones{3, 16, 16}}, {cols = 2, xlabels = {'Seed: 1', 'Seed: 2'}})
    assert(g.shape[1] == 3 and g.shape[3] == 32 and g.shape[2] > 16)"
fi

echo "$p passed, $f failed"
[ $f = 0 ]
