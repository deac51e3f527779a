#!/bin/bash
# bench/gpu/tools/run.sh - issue 36's "tools at the model's speed" and issue
# 39's per-rank timeline on one GPU: `lumen batch samples/batch_generate.lua`
# of 16 full-size SD 1.5 images (random weights, bench/gpu/sd_full.py's) at
# --batch-size 1, 4 and 4 stacked (one UNet call; its bytes compared with
# batch size 1), each with --timeline; one-at-a-time pipe:generate
# (gen_one.lua) and diffusers (peer.py, which also builds the weights);
# `lumen upscale` of 32 CPPN 512² images with esrgan-thick x2 f16 (the
# weights random with each tensor's mean and std: stats.py here writes
# them from the package, fill.py makes them there) beside the model alone
# (bench/gpu/upscale_model.lua); mpirun -np 2 on the one GPU.
# Staged as the device notes say: this folder's files and xz'd lumen,
# lumen-spirv.bin (lumen.xz, spirv.xz), the old binary (old_lumen.xz), the
# stats (thick2_stats.json.xz), then from the staged folder after
# `. .gl/setup.sh` (it writes $W/stk/batch_generate.lua: the sample with
# stacked = true, under the sample's name so the PNGs' text is the same):
#   W=$W bash run.sh      (everything to $OUT/log.txt and $OUT/tl.jsonl)
W=${W:-/tmp/w}; B=$(pwd); R=$(cd ../.. && pwd); LOG=$OUT/log.txt; TL=$OUT/tl.jsonl
exec > >(tee -a $LOG) 2>&1
t() { date +%s.%N; }
T0=$(t); el() { awk -v a=$T0 -v b=$(t) 'BEGIN{printf "[%.1f s]", b-a}'; }
echo "== $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
xz -dc old_lumen.xz > $W/lumen_old; chmod +x $W/lumen_old
export LUMEN_MODELS=$W/models
P=$W/params.jsonl; : > $P
for i in $(seq 1 16); do echo "{\"seed\": $i, \"prompt\": \"a lighthouse on a cliff at dusk, oil painting\", \"negative\": \"blurry\", \"steps\": 20, \"cfg\": 7, \"sampler\": \"euler\", \"size\": \"512x512\"}" >> $P; done
cd $R
mkdir -p $W/stk && sed 's/batch = #ps,/batch = #ps, stacked = true,/' samples/batch_generate.lua > $W/stk/batch_generate.lua
grep -q "stacked = true" $W/stk/batch_generate.lua || echo "run.sh: the sample changed: no stacked variant (stk4 then runs in lanes)"
echo "== peer $(el)"; timeout 90 python3 $B/peer.py $W 8
echo "== warm $(el)"
cat > $W/warm.lua <<'L'
local pipe = lm.models.load(arg[1])
pipe:generate{prompt = "x", negative = "blurry", steps = 1, cfg = 7, sampler = "euler", seed = 1, size = 512}:to("cpu"):eval()
pipe:generate{prompt = {"x", "y", "z", "w"}, negative = {"b", "b", "b", "b"}, seed = {1, 2, 3, 4}, batch = 4, steps = 1, cfg = 7, sampler = "euler", size = 512, stacked = true}:to("cpu"):eval()
L
timeout 60 $W/lumen $W/warm.lua $W/sd15
run() { # name lumen script bs [extra]
  n=$1 l=$2 s=$3 bs=$4; rm -rf $W/o_$n; a=$(t)
  tla="--timeline $W/tl_$n.jsonl"; [ $l = $W/lumen_old ] && tla=
  timeout 40 $l batch $s --params $P -o "$W/o_$n/{index}_{seed}.png" --batch-size $bs --progress lines $tla -- $W/sd15 > $W/log_$n 2>&1
  rc=$?; b=$(t); k=$(ls $W/o_$n | grep -c png)
  awk -v n=$n -v rc=$rc -v k=$k -v a=$a -v b=$b 'BEGIN{printf "RESULT batch %s: rc %d, %d images, process wall %.2f s = %.3f images/s\n", n, rc, k, b-a, k/(b-a)}'
  grep -E "timeline|elapsed|processes" $W/log_$n; sed "s/^/$n /" $W/tl_$n.jsonl >> $TL 2>/dev/null
  if [ -d $W/o_bs1 ] && [ $n != bs1 ]; then d=0; for f in $W/o_bs1/*.png; do cmp -s $f $W/o_$n/$(basename $f) || d=$((d+1)); done; echo "BYTES $n: $d of 16 differ from bs1"; fi
}
echo "== batch $(el)"
run bs1 $W/lumen samples/batch_generate.lua 1
run stk4 $W/lumen $W/stk/batch_generate.lua 4
run bs4 $W/lumen samples/batch_generate.lua 4
echo "== gen_one $(el)"; timeout 30 $W/lumen $B/gen_one.lua $W/sd15 8
echo "== upscale $(el)"
mkdir -p $W/models; xz -dc $B/thick2_stats.json.xz > $W/st.json && python3 $B/fill.py $W/st.json $W/thick2.safetensors
timeout 20 $W/lumen batch samples/batch_cppn.lua --seeds 1-32 -o $W/in/%02d.png --progress off -- 512; du -sh $W/in
timeout 20 $W/lumen bench/gpu/upscale_model.lua $W/thick2.safetensors 2 f16 512 512 5
up() { # name lumen k [flags]
  n=$1 l=$2 k=$3; shift 3; rm -rf $W/u; a=$(t)
  timeout 20 $l upscale $(ls $W/in/*.png | head -n $k) -o $W/u/ --model $W/thick2.safetensors --scale 2 --dtype f16 -q "$@"; rc=$?; b=$(t)
  awk -v n=$n -v rc=$rc -v k=$k -v a=$a -v b=$b 'BEGIN{printf "RESULT upscale %s: rc %d, %d images, wall %.3f s = %.1f ms/image\n", n, rc, k, b-a, (b-a)*1000/k}'
}
up warm $W/lumen 1
up new1 $W/lumen 1; up new32 $W/lumen 32; up new1 $W/lumen 1; up new32 $W/lumen 32
echo "== mpi $(el)"
MPI=$W/root/usr/bin/orterun; export OPAL_PREFIX=$W/root/usr PATH=$W/root/usr/bin:$PATH
export NCCL_NVLS_ENABLE=0
rm -rf $W/o_np2; a=$(t)
timeout 40 $MPI --allow-run-as-root --oversubscribe -np 2 -x LD_LIBRARY_PATH -x VK_DRIVER_FILES -x XDG_CACHE_HOME -x LUMEN_SPIRV -x NCCL_NVLS_ENABLE -x LUMEN_MODELS \
  $W/lumen batch samples/batch_generate.lua --params $P -o "$W/o_np2/{index}_{seed}.png" --progress lines --timeline $W/tl_np2.jsonl -- $W/sd15 > $W/log_np2 2>&1
rc=$?; b=$(t); k=$(ls $W/o_np2 2>/dev/null | grep -c png)
awk -v rc=$rc -v k=$k -v a=$a -v b=$b 'BEGIN{printf "RESULT batch np2 (one GPU): rc %d, %d images, process wall %.2f s = %.3f images/s\n", rc, k, b-a, k/(b-a)}'
tail -5 $W/log_np2; sed "s/^/np2 /" $W/tl_np2.jsonl >> $TL 2>/dev/null
d=0; for f in $W/o_bs1/*.png; do cmp -s $f $W/o_np2/$(basename $f) || d=$((d+1)); done; echo "BYTES np2: $d of 16 differ from bs1"
echo "== old $(el)"
run old_bs1 $W/lumen_old samples/batch_generate.lua 1
echo "== end $(el)"
