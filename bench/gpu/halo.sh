#!/bin/sh
# halo.sh - the small-channel f16 conv kernels on the device beside cuDNN
# (run from a folder laid out as the repository, with the Vulkan loader,
# layers and driver set up as bench/gpu/device_run.sh does):
#   peer:  cuDNN (TF32 off) per call (ops.py's synchronised wall clock, 5
#          batches of 10) and per kernel (CUDA events over 50 calls, 5 times)
#   base:  bench/gpu/halo.lua with the implicit GEMM (LUMEN_VK_CONV_HALO=0)
#   h8, h4, h16, h8k32, h4k32, h8g, h4g, h8gq, h4gq, h8w8gq, h8q, h16q, h16w4q: the same with
#          that halo tile (LUMEN_VK_CONV_HALO=1, LUMEN_VK_CONV_HALO_TILE)
#   rrdb:  one ESRGAN RRDB block (bench/gpu/rrdb.lua) at 128² and 256² with
#          the GEMM and with the halo tiles RRDB_TILES, beside rrdb.py
#   stats: registers and shared memory of each pipeline (build/bench/vkstats)
#   test:  test_vulkan_nn_conv with the halo kernel under the validation
#          layer (test-nodirect: every fragment stored element by element;
#          test-halo: the halo cases alone)
#   HALO_STEPS="stats peer base h8gq h8q h16w4q h16q h8 test-halo rrdb h8k32 h8g test-nodirect" OUT=... sh bench/gpu/halo.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
CASES=${HALO_CASES:-"64:32:128 96:32:128 192:64:128 64:32:256 192:32:256 64:64:256 16:16:256 48:48:128"}
for s in ${HALO_STEPS:-stats peer base h8gq h8q h16w4q h16q h8 test-halo rrdb h8k32 h8g test-nodirect}; do
    echo "=== $s $(date -u +%H:%M:%S)"
    case $s in
    peer)
        (cd bench/gpu && python3 - $CASES <<'PY'
import sys, torch, ops
import torch.nn.functional as F
torch.backends.cudnn.allow_tf32 = False
for c in sys.argv[1:]:
    f = [int(v) for v in c.split(":")]
    ci, co, hw, n = f[0], f[1], f[2], (f[3] if len(f) > 3 else 1)
    x = torch.randn(n, ci, hw, hw, device="cuda", dtype=torch.float16)
    w = torch.randn(co, ci, 3, 3, device="cuda", dtype=torch.float16) * 0.05
    b = torch.randn(co, device="cuda", dtype=torch.float16)
    fn = lambda: F.conv2d(x, w, b, padding=1)
    m, lo, hi = ops.timed(fn, 10)
    ks = []
    for _ in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(50): fn()
        e1.record(); torch.cuda.synchronize()
        ks.append(e0.elapsed_time(e1) / 50)
    ks.sort()
    print(f"cudnn {c} call {m:.4f} {lo:.4f} {hi:.4f} kernel {ks[2]:.4f} {ks[0]:.4f} {ks[4]:.4f}", flush=True)
PY
        ) ;;
    base) LUMEN_FALLBACK=0 LUMEN_VK_CONV_HALO=0 build/lumen bench/gpu/halo.lua $CASES 2>&1 ;;
    h8|h4|h16|h8k32|h4k32|h8g|h4g|h8gq|h4gq|h8w8gq|h8q|h16q|h16w4q) LUMEN_FALLBACK=0 LUMEN_VK_CONV_HALO=1 LUMEN_VK_CONV_HALO_TILE=$s build/lumen bench/gpu/halo.lua $CASES 2>&1 ;;
    rrdb)
        python3 bench/gpu/rrdb.py 128 256 2>&1
        echo "--- LUMEN_VK_CONV_HALO=0"
        LUMEN_FALLBACK=0 LUMEN_VK_CONV_HALO=0 build/lumen bench/gpu/rrdb.lua 128 256 2>&1
        echo "--- default"
        LUMEN_FALLBACK=0 build/lumen bench/gpu/rrdb.lua 128 256 2>&1
        for t in ${RRDB_TILES:-h8gq h16w4q}; do
            echo "--- LUMEN_VK_CONV_HALO=1 LUMEN_VK_CONV_HALO_TILE=$t"
            LUMEN_FALLBACK=0 LUMEN_VK_CONV_HALO=1 LUMEN_VK_CONV_HALO_TILE=$t build/lumen bench/gpu/rrdb.lua 128 256 2>&1
        done ;;
    stats)
        build/bench/vkstats conv_halo:1,1,3,3,2,1 conv_halo:1,1,3,3,4,1 conv_halo_q:1,1,3,3,2,1 \
            conv_halo_q:1,1,3,3,4,1 conv_halo_gq:1,1,3,3,2,1 conv_halo_gq:1,1,3,3,4,1 conv_halo_h16q:1,1,3,3,2,1 \
            conv_halo_h16w4q:1,1,3,3,2,1 conv_halo_h16w4q:1,1,3,3,4,1 conv_halo_k32:1,1,3,3,2,1 \
            conv_coop_m64w8:1,1,1,1,1,1,1,0,1,3,9,0,0,1 2>&1 | cut -c 1-400 ;;
    test|test-nodirect|test-halo)
        env=""
        [ $s = test-nodirect ] && env="LUMEN_VK_CONV_HALO_DIRECT=0"
        [ $s = test-halo ] && env="PARITY_ONLY=test_conv_halo"
        env $env LUMEN_VK_CONV_HALO=1 LUMEN_VK_VALIDATE=1 build/tests/test_vulkan_nn_conv >"$OUT/t.log" 2>&1
        echo "test_vulkan_nn_conv halo=1 $env validated: rc $? $(grep -h 'parity:' "$OUT/t.log")" \
             "$(grep -c 'PARITY FAIL' "$OUT/t.log") failures, $(grep -c '^\[       OK' "$OUT/t.log") groups passed," \
             "$(grep -ci 'validation' "$OUT/t.log") validation lines"
        grep -h "FAIL\|alidation" "$OUT/t.log" | cut -c 1-300 | head -8
        rm -f "$OUT/t.log" ;;
    esac
done
