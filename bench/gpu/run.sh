#!/bin/sh
# run.sh - Lumen on Vulkan beside PyTorch CUDA on the same GPU, with ratios.
# Runs on the device machine from the repository root:
#   sh bench/gpu/run.sh            (full sizes: matmul to 8192, 256M elements)
#   sh bench/gpu/run.sh quick      (small sizes, a smoke run)
#   sh bench/gpu/run.sh fused      (only the fused chains and the copy)
#   sh bench/gpu/run.sh nn         (conv2d 3x3 and attention; nn-quick: small)
#   sh bench/gpu/run.sh attn       (attention over L, D, causal, dtype,
#                                   medians, tensor-core kernel on and off:
#                                   bench/gpu/attn.py; attn-quick: small)
#   sh bench/gpu/run.sh vae        (an SD VAE decoder, whole and per stage:
#                                   bench/gpu/vae.py; vae-quick: 8x8 latent)
#   sh bench/gpu/run.sh ops        (convs and GroupNorm at VAE/ESRGAN shapes:
#                                   bench/gpu/ops.py)
#   sh bench/gpu/run.sh norm       (GroupNorm, LayerNorm, RMSNorm, softmax
#                                   as GB/s beside the copy: ops.py norm)
# Needs build/bench/vkbench built here (make; it links liblumen.a and
# libvulkan only) and, on the device, a Vulkan loader (libvulkan.so.1: set
# LD_LIBRARY_PATH to a carried copy) plus python3 with torch+CUDA.
BUILD=${BUILD:-build}
BIN="$BUILD/bench/vkbench"
[ -x "$BIN" ] || { echo "run.sh: $BIN missing: run make first" >&2; exit 1; }
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
date -u +"date: %Y-%m-%d %H:%M UTC"
case "$1" in
vae) exec python3 bench/gpu/vae.py "$BUILD/lumen" ;;
vae-quick) exec python3 bench/gpu/vae.py "$BUILD/lumen" quick ;;
ops) exec python3 bench/gpu/ops.py "$BUILD/lumen" ;;
norm) exec python3 bench/gpu/ops.py "$BUILD/lumen" norm ;;
norm-quick) exec python3 bench/gpu/ops.py "$BUILD/lumen" norm-quick ;;
attn) exec python3 bench/gpu/attn.py "$BIN" ;;
attn-quick) exec python3 bench/gpu/attn.py "$BIN" quick ;;
esac
exec python3 bench/gpu/compare.py "$BIN" "$@"
