#!/bin/sh
# f32_sweep.sh - the f32-arithmetic matmul tiles (LUMEN_VK_MM_F32) and the
# matching f32 implicit-GEMM conv tiles (LUMEN_VK_CONV_F32) beside PyTorch
# CUDA with TF32 off, on the device, from the repository root:
#   SWEEP="peer mm stats conv" sh bench/gpu/f32_sweep.sh
# (MMV, CONVV, SIZES, CASES override the lists).  Figures: median [min-max]
# of 7 runs (vkbench) / 5 batches (ops.lua); the peer the same way.
SWEEP=${SWEEP:-peer mm stats conv}
MMV=${MMV:-"128x128 w w_np wr k8 k8w 64x128 64x128k8 t128 128x256 128x256r 256x128 128x256k16 256x128k16"}
CONVV=${CONVV:-"128x128 w k8w 128x256 256x128"}
SIZES=${SIZES:-2048,4096,8192}
CASES=${CASES:-"conv:128:128:512:3:f32 conv:256:256:256:3:f32 conv:512:512:128:3:f32 conv:512:512:64:3:f32 conv:512:256:256:1:f32"}
for s in $SWEEP; do
    echo "=== f32 sweep $s $(date -u +%H:%M:%S)"
    case $s in
    peer)
        python3 - "$SIZES" <<'PY'
import sys, time, torch
torch.backends.cuda.matmul.allow_tf32 = False
for n in (int(v) for v in sys.argv[1].split(",")):
    a = torch.randn(n, n, device="cuda"); b = torch.randn(n, n, device="cuda")
    a @ b; torch.cuda.synchronize()
    ts = []
    for _ in range(7):
        torch.cuda.synchronize(); t0 = time.perf_counter(); a @ b; torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    ts.sort(); f = 2 * n ** 3 * 1e-12
    print(f"torch matmul_f32_{n} {f / ts[3]:.1f} [{f / ts[6]:.1f}-{f / ts[0]:.1f}] TFLOP/s", flush=True)
PY
        ;;
    mm)
        for v in $MMV; do
            echo "--- LUMEN_VK_MM_F32=$v"
            LUMEN_VK_MM_F32=$v VKBENCH_ONLY=mm VKBENCH_DTYPE=f32 VKBENCH_SIZES=$SIZES build/bench/vkbench 2>&1 | grep -v "^device"
        done
        ;;
    mmx)   # options of the tiles in MMX: L2 tile groups, bounds checks kept
        for v in ${MMX:-128x128}; do
            for o in "LUMEN_VK_MM_F32_SWZ=8" "LUMEN_VK_MM_F32_FULL=0"; do
                echo "--- LUMEN_VK_MM_F32=$v $o"
                env LUMEN_VK_MM_F32=$v $o VKBENCH_ONLY=mm VKBENCH_DTYPE=f32 VKBENCH_SIZES=$SIZES \
                    build/bench/vkbench 2>&1 | grep -v "^device"
            done
        done
        ;;
    test)  # the matmul parity group under each tile (PARITY_QUICK), then the conv tests
        for v in $MMV; do
            LUMEN_VK_MM_F32=$v PARITY_QUICK=1 PARITY_ONLY=test_matmul build/tests/test_vulkan_parity >/tmp/f32t.log 2>&1
            echo "test_vulkan_parity test_matmul LUMEN_VK_MM_F32=$v: rc $? $(grep -c 'PARITY FAIL' /tmp/f32t.log) failures"
            grep -h "FAIL\|alidation" /tmp/f32t.log | head -3 | cut -c 1-300
        done
        for t in $CONVV; do
            LUMEN_VK_CONV_F32=$t build/tests/test_vulkan_nn_conv >/tmp/f32t.log 2>&1
            echo "test_vulkan_nn_conv LUMEN_VK_CONV_F32=$t: rc $?"
            grep -h "FAIL\|alidation" /tmp/f32t.log | head -3 | cut -c 1-300
        done
        ;;
    stats)
        sp="0,0,0,1,1,1,1,1,0,0,1,0"
        cp="0,0,0,1,1,1,0,1,0"
        build/bench/vkstats matmul_f32:$sp matmul_f32_w:$sp matmul_f32_k8:$sp matmul_f32_k8w:$sp \
            matmul_f32_128x256:$sp matmul_f32_256x128:$sp matmul_f32_128x256k16:$sp matmul_f32_256x128k16:$sp matmul_f32_w_np:$sp matmul_f32_wr:$sp matmul_f32_128x256r:$sp matmul_f32_64x128:$sp matmul_f32_64x128k8:$sp matmul_f32_t128:$sp \
            conv_gemm:$cp conv_gemm_128x256:$cp 2>&1 | cut -c 1-400
        ;;
    conv)
        (cd bench/gpu && python3 -c "
import sys, ops, torch
torch.backends.cudnn.allow_tf32 = False
for c in sys.argv[1:]:
    m, lo, hi = ops.torch_time(c)
    print(f'cudnn {c} {m:.4f} {lo:.4f} {hi:.4f}', flush=True)
" $CASES)
        for t in $CONVV; do
            echo "--- LUMEN_VK_CONV_F32=$t"
            LUMEN_FALLBACK=0 LUMEN_VK_CONV_F32=$t build/lumen bench/gpu/ops.lua $CASES 2>&1
        done
        ;;
    esac
done
