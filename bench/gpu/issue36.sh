#!/bin/sh
# issue36.sh LUMEN WORKDIR PART... - issue 36's table ("Done when": every row
# re-measured on one GPU, each Lumen figure beside its PyTorch / diffusers peer
# measured in the same call, medians with [min-max]) in a few device calls, one
# PART (or a few) per call.  Run from anywhere; it works in the repository root
# of the device's copy.  Prints each part's raw output and then one compact line
# per row (name, Lumen median [min-max], peer median [min-max], ratio > 1 = Lumen
# faster; bench/gpu/issue36.py table), and keeps the raw logs and the table
# under $OUT (default WORKDIR/out36).
#
# PART (the time each takes on one H200, from the earlier calls of the same
# scripts in docs/BENCHMARKS.md; a fresh machine, empty pipeline cache):
#   kernels  ~4 min: GEMM f16 / bf16 at 2048, 4096, 8192 and the DiT shapes
#            (M 4096, K and N each of 3840, 10240, 15360) and two batch-1 GEMVs
#            of the Qwen3-4B text encoder (vkbench VKBENCH_ONLY=mm with
#            VKBENCH_MM_SHAPES beside mm_peer.py, medians of 9), f32 at 4096 and
#            8192; attention L4096 D128 f16 / causal / bf16 / bf16 causal / f32,
#            D64 f16 and bf16, Z-Image's joint [1,30,4224,128] bf16, the SD VAE's
#            D512 [1,1,4096,512] f16 and SDXL's [1,1,16384,512] f16 (each also
#            on the two-product and the SIMT path forced: _gemm, _simt) (vkbench
#            VKBENCH_ATTN_SHAPES beside SDPA, attn_khr.py's way, medians of 9); conv 3x3 128ch 512² f16 / f32 at
#            wall time (vkbench VKBENCH_ONLY=nn, as the issue's table) and at GPU
#            time with the f32 small-channel and SDXL-VAE convs (conv.py beside
#            cuDNN); the SD VAE decoder 512² f16 / f32 (vae.py)
#   sd       ~5 min: SD 1.5 512² and SDXL 1024², 20 Euler steps, CFG 7, f16,
#            random weights in the real architectures: sd_full.py (diffusers'
#            pipeline call beside pipe:generate, UNet call, VAE, text encoders,
#            lm.profile of one image; 5 images each side, and the pipeline call
#            as a user runs it: PIL output, torch's default cuDNN TF32), then the
#            first image of a fresh process on empty caches (coldstart.lua)
#   zimage   ~4 min: Z-Image-Turbo 1024², 9 steps, bf16: zimage_pipe.py default
#            (ZImagePipeline beside pipe:generate, each stage), then its cold
#            start (ZIMAGE_REUSE=1 keeps a folder already built in WORKDIR)
#   tools    ~3.5 min: lumen batch of 16 SD 1.5 images at --batch-size 1 and 4
#            (and 4 stacked) beside one-at-a-time pipe:generate and diffusers one
#            at a time; lumen upscale of 32 CPPN 512² images (esrgan-thick x2
#            f16, random weights of the real ones' mean and std: THICK_STATS)
#            beside the model alone
#   cpu      ~3 min: SD 1.5 on the host CPU (bench/cpu/sd15_cpu.py): UNet call
#            first / next, VAE, a whole 512² 20-step image, beside diffusers
#   parity   ~3 min: the tensor-core parity suites on the device (TESTS: a
#            folder with test_vulkan_nn_norm, test_vulkan_parity,
#            test_vulkan_nn_conv), under the validation layer where
#            VK_LAYER_PATH is set
#   sd15 / sdxl / cold-sd: the sd part's pieces alone, for a call that runs short
# The estimates add the folders' builds and a cold pipeline cache (the first
# evaluations compile) to the run times of the same scripts' earlier calls
# (the sections "Tools at the model's speed", "Cold start", "Z-Image's whole
# pipeline" and "Native bf16" of docs/BENCHMARKS.md).  Four calls cover the
# issue's table: kernels, sd, zimage, tools; cpu and parity are extra.  On a
# machine kept warm between calls WORKDIR's folders are reused where a script
# allows (zimage, cold-sd).
# Environment: the device set up as for the other bench/gpu scripts (Vulkan
# loader and driver: VK_DRIVER_FILES, LD_LIBRARY_PATH; LUMEN_SPIRV where the
# binary's SPIR-V file is not beside it; diffusers' src on PYTHONPATH);
# VKBENCH (default: vkbench beside LUMEN, else build/bench/vkbench, built from
# this tree: VKBENCH_MM_SHAPES is new); THICK_STATS (tools: the stats of
# esrgan-thick's converted x2 model, bench/gpu/tools/stats.py's .json or
# .json.xz; without it, made here from $LUMEN_MODELS/esrgan-thick when that
# exists, else the upscale rows are skipped); REPS (tools: runs of each batch
# and upscale command, default 3); THICK_MODEL (tools: a converted model used as
# it is instead); COMMIT (printed in the header when the copy has no .git);
# ISSUE36_QUICK=1 (kernels at tiny sizes) and ISSUE36_NO_TORCH=1 (no peers):
# a smoke run of the Lumen side on lavapipe.
#   OUT=/tmp/o VKBENCH=/tmp/w/vkbench sh bench/gpu/issue36.sh /tmp/w/lumen /tmp/w kernels
[ $# -ge 3 ] || { echo "usage: issue36.sh LUMEN WORKDIR PART... (kernels sd zimage tools cpu parity sd15 sdxl cold-sd)" >&2; exit 2; }
case $1 in /*) L=$1 ;; *) L=$(pwd)/$1 ;; esac
case $2 in /*) W=$2 ;; *) W=$(pwd)/$2 ;; esac
shift 2
R=$(cd "$(dirname "$0")/../.." && pwd)
cd "$R" || exit 1
O=${OUT:-$W/out36}
mkdir -p "$O" "$W" || exit 1
[ -x "$L" ] || { echo "issue36.sh: $L is not an executable" >&2; exit 2; }
VK=${VKBENCH:-$(dirname "$L")/vkbench}
[ -x "$VK" ] || VK=build/bench/vkbench
REPS=${REPS:-3}
for p in "$@"; do
  case $p in
  kernels|sd|sd15|sdxl|cold-sd|zimage|tools|cpu|parity) ;;
  *) echo "issue36.sh: unknown part '$p' (kernels sd zimage tools cpu parity sd15 sdxl cold-sd)" >&2; exit 2 ;;
  esac
done
B=bench/gpu
T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0)) s]"; }
export PYTHONUNBUFFERED=1

echo "== issue36.sh $* $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "commit: $(git log -1 --format='%h %cd' --date=iso 2>/dev/null || echo "${COMMIT:-unknown (no .git here; set COMMIT)}")"
echo "lumen: $L ($("$L" --version 2>&1 | head -1)); vkbench: $VK"
"$L" -e 'for _, d in ipairs(lm.devices()) do print("device:", d.spec, d.name, d.info) end' 2>&1 | head -3
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA")' 2>&1 | tail -1
python3 -c 'import diffusers; print("diffusers", diffusers.__version__)' 2>&1 | tail -1

# cold KIND DIR DTYPE SIZE STEPS CFG: one fresh process on empty caches (Lumen's
# pipeline cache, the driver's shader disk cache), its first and second image
# (bench/gpu/coldstart.lua; coldstart.py's run without the build)
cold() {
  c=$(mktemp -d "$W/cold36.XXXXXX"); mkdir -p "$c/xdg" "$c/home" "$c/nv"
  a=$(date +%s.%N)
  XDG_CACHE_HOME=$c/xdg HOME=$c/home __GL_SHADER_DISK_CACHE_PATH=$c/nv LUMEN_FALLBACK=0 \
    timeout 300 "$L" $B/coldstart.lua "$2" "$3" "$4" "$5" "$6" "$c/img.safetensors" > "$O/cold_$1.log" 2>&1
  rc=$?; b=$(date +%s.%N)
  echo "cold $1 rc $rc process_s $(echo "$a $b" | awk '{printf "%.2f", $2 - $1}')" >> "$O/cold_$1.log"
  cat "$O/cold_$1.log"
  # the same cache again: a second start of a new install
  a=$(date +%s.%N)
  XDG_CACHE_HOME=$c/xdg HOME=$c/home __GL_SHADER_DISK_CACHE_PATH=$c/nv LUMEN_FALLBACK=0 \
    timeout 300 "$L" $B/coldstart.lua "$2" "$3" "$4" "$5" "$6" "$c/img2.safetensors" > "$O/warm_$1.log" 2>&1
  rc=$?; b=$(date +%s.%N)
  echo "warm $1 rc $rc process_s $(echo "$a $b" | awk '{printf "%.2f", $2 - $1}')" >> "$O/warm_$1.log"
  grep -h "first_image_s\|second_image_s\|rc " "$O/warm_$1.log"
  cmp -s "$c/img.safetensors" "$c/img2.safetensors" && echo "cold $1: the two processes' first images are equal" \
    || echo "cold $1: the two processes' first images DIFFER"
  rm -rf "$c"
}

part_kernels() {
  DIT=4096:3840:3840,4096:3840:10240,4096:3840:15360,4096:10240:3840,4096:10240:10240,4096:10240:15360
  DIT=$DIT,4096:15360:3840,4096:15360:10240,4096:15360:15360,1:2560:9728,1:9728:2560
  DIT=$DIT,1:2560:9728t,1:9728:2560t,1:3840:3840t,1:3840:15360t   # t: B stored [N, K], a linear's weight
  SQ=2048,4096,8192 SQ32=4096,8192 Q= VQ=
  CONVC=conv:1:128:128:512:3:f16,conv:1:128:128:512:3:f32,conv:1:128:128:512:3:bf16,conv:1:64:32:128:3:f32
  CONVC=$CONVC,conv:1:192:64:128:3:f32,conv:1:192:32:256:3:f32,conv:1:64:64:256:3:f32,conv:1:128:128:1024:3:f32
  CONVC=$CONVC,conv:1:256:256:512:3:f32,conv:1:512:512:128:3:f16
  if [ -n "${ISSUE36_QUICK:-}" ]; then   # a smoke run of the Lumen side (lavapipe): tiny sizes
    DIT=64:96:160,1:96:64 SQ=64,128 SQ32=64 Q=quick VQ=quick CONVC=conv:1:8:8:16:3:f16,conv:1:8:8:16:3:f32
  fi
  echo "== GEMM $(el)"
  VKBENCH_ONLY=mm VKBENCH_REPS=9 VKBENCH_SIZES=$SQ VKBENCH_DTYPE=f16,bf16 VKBENCH_MM_SHAPES=$DIT \
    timeout 300 "$VK" > "$O/k_mm_lumen.log" 2>&1; echo "vkbench mm rc $?"
  VKBENCH_ONLY=mm VKBENCH_REPS=9 VKBENCH_SIZES=$SQ32 VKBENCH_DTYPE=f32 \
    timeout 120 "$VK" >> "$O/k_mm_lumen.log" 2>&1; echo "vkbench mm f32 rc $?"
  grep -v "^#" "$O/k_mm_lumen.log"
  if [ -z "${ISSUE36_NO_TORCH:-}" ]; then
    MM_PEER_REPS=9 timeout 200 python3 $B/mm_peer.py f16,bf16 $SQ,$DIT > "$O/k_mm_peer.log" 2>&1; echo "mm_peer rc $?"
    MM_PEER_REPS=9 timeout 60 python3 $B/mm_peer.py f32 $SQ32 >> "$O/k_mm_peer.log" 2>&1; echo "mm_peer f32 rc $?"
    cat "$O/k_mm_peer.log"
  fi
  echo "== attention $(el)"
  timeout 240 python3 $B/issue36.py attn "$VK" "$O/k_attn_lumen.log" "$O/k_attn_peer.log"; echo "attention rc $?"
  echo "== conv 3x3 128ch 512² at wall time (vkbench nn, compare.py's peer) $(el)"
  VKBENCH_ONLY=nn timeout 120 "$VK" $Q > "$O/k_nn_lumen.log" 2>&1; echo "vkbench nn rc $?"
  grep -v "^#" "$O/k_nn_lumen.log"
  if [ -z "${ISSUE36_NO_TORCH:-}" ]; then
    timeout 120 python3 $B/issue36.py nn-peer > "$O/k_nn_peer.log" 2>&1; echo "nn peer rc $?"; cat "$O/k_nn_peer.log"
  fi
  echo "== conv at GPU time (conv.py) $(el)"
  CONV_TORCH=${ISSUE36_NO_TORCH:+0} CONV_CASES=$CONVC timeout 330 python3 $B/conv.py "$L" > "$O/k_conv.log" 2>&1
  echo "conv.py rc $?"; cat "$O/k_conv.log"
  if [ -z "${ISSUE36_NO_TORCH:-}" ]; then   # vae.py makes its weights with torch
    echo "== SD VAE decoder (vae.py) $(el)"
    VAE_DIR=$W timeout 300 python3 $B/vae.py "$L" $VQ > "$O/k_vae.log" 2>&1; echo "vae.py rc $?"; cat "$O/k_vae.log"
  fi
}

part_sd() {   # $1: sd15, sdxl or both
  echo "== sd_full.py $1 $(el)"
  kinds=$1; [ "$kinds" = both ] && kinds="sd15 sdxl"
  for k in $kinds; do
    SD_FULL_IMAGE_REPS=5 SD_FULL_USER_CALL=1 timeout 400 python3 $B/sd_full.py "$L" "$W" "$k" > "$O/sd_full_$k.log" 2>&1
    echo "sd_full.py $k rc $?"; cat "$O/sd_full_$k.log"
  done
}

part_cold_sd() {
  echo "== cold start SD 1.5 / SDXL $(el)"
  [ -f "$W/sd15/model_index.json" ] || { echo "cold-sd: $W/sd15 missing (run the sd part first)"; return; }
  cold sd15 "$W/sd15" f16 512 20 7
  [ -f "$W/sdxl/model_index.json" ] && cold sdxl "$W/sdxl" f16 1024 20 7
}

part_zimage() {
  echo "== zimage_pipe.py default $(el)"
  ZIMAGE_REUSE=${ZIMAGE_REUSE:-1} timeout 420 python3 $B/zimage_pipe.py "$L" "$W" default > "$O/zimage.log" 2>&1
  echo "zimage_pipe.py rc $?"; cat "$O/zimage.log"
  echo "== cold start Z-Image $(el)"
  [ -d "$W/zimage_full/vae" ] && cold zimage "$W/zimage_full" bf16 1024 9 0
}

part_tools() {
  T=$B/tools
  P=$W/params36.jsonl; : > "$P"
  for i in $(seq 1 16); do
    echo "{\"seed\": $i, \"prompt\": \"a lighthouse on a cliff at dusk, oil painting\", \"negative\": \"blurry\", \"steps\": 20, \"cfg\": 7, \"sampler\": \"euler\", \"size\": \"512x512\"}" >> "$P"
  done
  echo "== diffusers one at a time (tools/peer.py: builds and saves the SD 1.5 folder) $(el)"
  timeout 150 python3 $T/peer.py "$W" 16 > "$O/t_peer.log" 2>&1; echo "peer.py rc $?"; cat "$O/t_peer.log"
  [ -f "$W/sd15/model_index.json" ] || { echo "tools: no SD 1.5 folder"; return; }
  mkdir -p "$W/stk"
  sed 's/batch = #ps,/batch = #ps, stacked = true,/' samples/batch_generate.lua > "$W/stk/batch_generate.lua"
  grep -q "stacked = true" "$W/stk/batch_generate.lua" || echo "tools: the sample changed: no stacked variant (stk4 runs in lanes)"
  cat > "$W/warm36.lua" <<'LUA'
local pipe = lm.models.load(arg[1])
pipe:generate{prompt = "x", negative = "blurry", steps = 1, cfg = 7, sampler = "euler", seed = 1, size = 512}:to("cpu"):eval()
pipe:generate{prompt = {"x", "y", "z", "w"}, negative = {"b", "b", "b", "b"}, seed = {1, 2, 3, 4}, batch = 4, steps = 1,
              cfg = 7, sampler = "euler", size = 512, stacked = true}:to("cpu"):eval()
LUA
  echo "== the pipeline cache warmed $(el)"
  timeout 120 "$L" "$W/warm36.lua" "$W/sd15" 2>&1 | tail -2
  echo "== one-at-a-time pipe:generate (tools/gen_one.lua, 16 after a warm-up) $(el)"
  timeout 60 "$L" $T/gen_one.lua "$W/sd15" 16 > "$O/t_gen_one.log" 2>&1; echo "gen_one rc $?"; cat "$O/t_gen_one.log"
  echo "== lumen batch, 16 images, $REPS runs each $(el)"
  : > "$O/t_batch.log"
  r=1
  while [ $r -le "$REPS" ]; do
    for v in bs1:samples/batch_generate.lua:1 bs4:samples/batch_generate.lua:4 stk4:$W/stk/batch_generate.lua:4; do
      n=${v%%:*}; rest=${v#*:}; s=${rest%:*}; bs=${rest##*:}
      rm -rf "$W/o_$n"; a=$(date +%s.%N)
      timeout 60 "$L" batch "$s" --params "$P" -o "$W/o_$n/{index}_{seed}.png" --batch-size "$bs" --progress lines \
        --timeline "$W/tl_$n.jsonl" -- "$W/sd15" > "$W/log_$n" 2>&1
      rc=$?; b=$(date +%s.%N); k=$(ls "$W/o_$n" 2>/dev/null | grep -c png)
      echo "$n $r $rc $k $a $b" | awk '{printf "batch_%s run %d: rc %d, %d images, process wall %.2f s = %.3f images/s\n", $1, $2, $3, $4, $6 - $5, $4 / ($6 - $5)}' \
        | tee -a "$O/t_batch.log"
      [ $r = 1 ] && { grep -h "timeline\|elapsed" "$W/log_$n" | head -3; cp "$W/tl_$n.jsonl" "$O/t_timeline_$n.jsonl" 2>/dev/null; }
      if [ "$n" != bs1 ] && [ "$r" = 1 ]; then
        d=0; for f in "$W"/o_bs1/*.png; do cmp -s "$f" "$W/o_$n/$(basename "$f")" || d=$((d + 1)); done
        echo "bytes $n: $d of 16 differ from bs1" | tee -a "$O/t_batch.log"
      fi
    done
    r=$((r + 1))
  done
  echo "== lumen upscale of 32 CPPN 512² images beside the model alone $(el)"
  ST=${THICK_STATS:-}
  if [ -n "${THICK_MODEL:-}" ]; then   # a converted model as it is (no random weights)
    cp "$THICK_MODEL" "$W/thick2.safetensors" || return
  elif [ -z "$ST" ] && [ -d "${LUMEN_MODELS:-build/models}/esrgan-thick" ]; then
    LUMEN_MODELS=${LUMEN_MODELS:-build/models} timeout 60 "$L" convert esrgan-thick "$W/thick2_real.safetensors" --scale 2 \
      && python3 $T/stats.py "$W/thick2_real.safetensors" "$W/thick2_stats.json" && ST=$W/thick2_stats.json
  fi
  if [ -z "${THICK_MODEL:-}" ]; then
    if [ -z "$ST" ] || [ ! -f "$ST" ]; then
      echo "tools: no THICK_STATS, THICK_MODEL or esrgan-thick package: the upscale rows are skipped"; return
    fi
    case $ST in
    *.xz) xz -dc "$ST" > "$W/thick2_stats.json" ;;
    *) [ "$ST" = "$W/thick2_stats.json" ] || cp "$ST" "$W/thick2_stats.json" ;;
    esac
    python3 $T/fill.py "$W/thick2_stats.json" "$W/thick2.safetensors" || return
  fi
  rm -rf "$W/in36"
  timeout 60 "$L" batch samples/batch_cppn.lua --seeds 1-32 -o "$W/in36/%02d.png" --progress off -- 512 > /dev/null 2>&1
  echo "inputs: $(ls "$W/in36" | grep -c png) PNGs, $(du -sh "$W/in36" | cut -f1)"
  timeout 60 "$L" $B/upscale_model.lua "$W/thick2.safetensors" 2 f16 512 512 5 > "$O/t_upscale_model.log" 2>&1
  echo "upscale_model rc $?"; cat "$O/t_upscale_model.log"
  up() {   # K [flags]: lumen upscale of the first K inputs, process wall
    k=$1; shift; rm -rf "$W/u36"; a=$(date +%s.%N)
    timeout 60 "$L" upscale $(ls "$W"/in36/*.png | head -n "$k") -o "$W/u36/" --model "$W/thick2.safetensors" --scale 2 \
      --dtype f16 "$@"; rc=$?; b=$(date +%s.%N)
    echo "$k $rc $a $b" | awk '{printf "upscale_%d: rc %d, wall %.3f s = %.1f ms/image\n", $1, $2, $4 - $3, ($4 - $3) * 1000 / $1}'
  }
  up 1 -q > /dev/null   # warm-up: the pipeline cache
  : > "$O/t_upscale.log"
  r=1
  while [ $r -le "$REPS" ]; do up 1 -q | tee -a "$O/t_upscale.log"; up 32 -q | tee -a "$O/t_upscale.log"; r=$((r + 1)); done
  up 32 -v 2>&1 | grep "lumen upscale:\|upscale_" | tail -2
}

part_cpu() {
  echo "== SD 1.5 on the CPU (bench/cpu/sd15_cpu.py) $(el)"
  timeout 420 python3 bench/cpu/sd15_cpu.py "$W/cpu36" "$L:now:3" calls=3 image=512x20 > "$O/cpu.log" 2>&1
  echo "sd15_cpu.py rc $?"; cat "$O/cpu.log"
}

part_parity() {
  TD=${TESTS:-$(dirname "$L")/tests}
  [ -x "$TD/test_vulkan_nn_norm" ] || TD=build/tests
  V=; [ -n "${VK_LAYER_PATH:-}" ] && V=1
  echo "== parity on the device ($TD; validation layer: ${V:-no}) $(el)"
  pt() {   # NAME TIMEOUT ENV... BINARY
    name=$1 to=$2; shift 2
    timeout "$to" env LUMEN_VK_VALIDATE=${V:-0} "$@" > "$O/p_$name.log" 2>&1; rc=$?
    echo "$name: rc $rc, $(grep -c 'PARITY FAIL' "$O/p_$name.log") PARITY FAIL lines, $(grep -ci 'validation' "$O/p_$name.log") validation lines"
    grep -h "cases\|tensor cores\|PASSED\|FAILED" "$O/p_$name.log" | cut -c1-200 | head -8
  }
  pt attention 150 LUMEN_TEST_ATTN_COOP=1 LUMEN_TEST_ATTN_BF16=1 PARITY_ONLY='test_attention*' "$TD/test_vulkan_nn_norm"
  pt matmul 90 LUMEN_TEST_MM_BF16=1 PARITY_ONLY='test_matmul*' "$TD/test_vulkan_parity"
  pt conv_bf16 90 LUMEN_TEST_CONV_BF16=1 PARITY_ONLY=test_conv_coop_bf16 "$TD/test_vulkan_nn_conv"
  pt conv_winograd 90 PARITY_ONLY=test_conv_winograd "$TD/test_vulkan_nn_conv"
  [ -x "$TD/test_vk_share" ] && pt share 60 "$TD/test_vk_share"
}

for p in "$@"; do
  case $p in
  kernels) part_kernels ;;
  sd) part_sd both; part_cold_sd ;;
  sd15|sdxl) part_sd "$p" ;;
  cold-sd) part_cold_sd ;;
  zimage) part_zimage ;;
  tools) part_tools ;;
  cpu) part_cpu ;;
  parity) part_parity ;;
  *) echo "issue36.sh: unknown part '$p'" >&2; exit 2 ;;
  esac
done
echo "== table $(el) $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
python3 $B/issue36.py table "$O" | tee "$O/table.txt"
