#!/bin/sh
# mm_sweep.sh - the tensor-core matmul and conv variants side by side on the
# device (run through bench/gpu/device_run.sh's `sweep` step, which sets up
# the Vulkan loader and layers): driver statistics of each variant
# (build/bench/vkstats: registers, spills), PyTorch's matmul figures, each
# matmul variant (LUMEN_VK_COOP) with and without the L2 tile grouping
# (LUMEN_VK_COOP_SWZ) and direct stores, each conv tile
# (LUMEN_VK_CONV_TILE) at ESRGAN and VAE shapes beside cuDNN, and the
# matmul / conv parity tests under every variant.
#   SWEEP="stats peer mm conv test" OUT=... sh bench/gpu/mm_sweep.sh
# SWEEP=check: the defaults only (short parity runs, then figures)
OUT=${OUT:-/tmp/out}
SWEEP=${SWEEP:-stats peer mm conv test}
MMV=${MMV:-"128x128 w4 128x128w32 128x256 256x128 128x256s1 256x128s1 k64s1 w4k64s1 n8 128x256n8"}
CONVT=${CONVT:-"128 m64 m64w8 m32 m32n256"}
SIZES=${SIZES:-1024,2048,4096,8192}
F16=1
for s in $SWEEP; do
    echo "=== sweep $s"
    case $s in
    stats)
        sp="$F16,$F16,$F16,1,1,1,1,0,0,0,0,1,0,1"
        cp="$F16,$F16,$F16,1,1,1,1,0,$F16,3,9,0,0,1"
        build/bench/vkstats matmul_coop:$sp matmul_coop_w4:$sp matmul_coop_128x128w32:$sp \
            matmul_coop_128x256:$sp matmul_coop_256x128:$sp matmul_coop_128x256s1:$sp matmul_coop_n8:$sp \
            matmul_coop_128x256n8:$sp matmul_coop_256x128s1:$sp matmul_coop_k64s1:$sp matmul_coop_w4k64s1:$sp \
            conv_coop:$cp conv_coop_m64:$cp conv_coop_m64w8:$cp conv_coop_m32:$cp \
            conv_coop_m32n256:$cp 2>&1 | cut -c 1-700
        ;;
    peer)
        python3 - "$SIZES" <<'PY'
import sys, time, torch
torch.backends.cuda.matmul.allow_tf32 = False
for name, dt in (("f16", torch.float16), ("bf16", torch.bfloat16), ("f32", torch.float32)):
    for n in (int(v) for v in sys.argv[1].split(",")):
        a = torch.randn(n, n, device="cuda", dtype=dt); b = torch.randn(n, n, device="cuda", dtype=dt)
        a @ b; torch.cuda.synchronize()
        ts = []
        for _ in range(7):
            torch.cuda.synchronize(); t0 = time.perf_counter(); a @ b; torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        ts.sort(); f = 2 * n ** 3 * 1e-12
        print(f"torch matmul_{name}_{n} {f / ts[3]:.1f} [{f / ts[6]:.1f}-{f / ts[0]:.1f}] TFLOP/s", flush=True)
PY
        ;;
    mm)
        for v in $MMV; do
            for swz in 0 8; do
                echo "--- LUMEN_VK_COOP=$v SWZ=$swz"
                LUMEN_VK_COOP=$v LUMEN_VK_COOP_SWZ=$swz VKBENCH_ONLY=mm VKBENCH_SIZES=$SIZES build/bench/vkbench 2>&1 | grep -v "^device"
            done
        done
        echo "--- LUMEN_VK_COOP=128x128 SWZ=0 DIRECT=0 (the previous kernel's stores)"
        LUMEN_VK_COOP=128x128 LUMEN_VK_COOP_DIRECT=0 VKBENCH_ONLY=mm VKBENCH_SIZES=$SIZES build/bench/vkbench 2>&1 | grep -v "^device"
        ;;
    conv)
        CASES=${CASES:-"conv:64:32:256:3:f16 conv:192:32:256:3:f16 conv:64:32:128:3:f16 conv:96:32:128:3:f16 conv:192:64:128:3:f16 conv:64:64:256:3:f16 conv:128:128:512:3:f16 conv:512:512:128:3:f16"}
        (cd bench/gpu && python3 -c "
import sys, ops, torch
torch.backends.cudnn.allow_tf32 = False
for c in sys.argv[1:]:
    m, lo, hi = ops.torch_time(c)
    print(f'cudnn {c} {m:.4f} {lo:.4f} {hi:.4f}', flush=True)
" $CASES)
        for t in $CONVT; do
            echo "--- LUMEN_VK_CONV_TILE=$t"
            LUMEN_FALLBACK=0 LUMEN_VK_CONV_TILE=$t build/lumen bench/gpu/ops.lua $CASES 2>&1
        done
        ;;
    test)
        for v in $MMV; do
            LUMEN_VK_COOP=$v PARITY_ONLY=test_matmul build/tests/test_vulkan_parity >"$OUT/t.log" 2>&1
            echo "test_vulkan_parity test_matmul LUMEN_VK_COOP=$v: rc $? $(grep -c 'PARITY FAIL' "$OUT/t.log") failures"
            grep -h "FAIL\|validation" "$OUT/t.log" | head -3 | cut -c 1-300
        done
        LUMEN_VK_VALIDATE=1 PARITY_ONLY=test_matmul build/tests/test_vulkan_parity >"$OUT/t.log" 2>&1
        echo "test_vulkan_parity test_matmul validated: rc $? $(grep -c 'validation' "$OUT/t.log") validation lines"
        grep -h "FAIL\|validation" "$OUT/t.log" | head -3 | cut -c 1-300
        for t in $CONVT; do
            LUMEN_VK_CONV_TILE=$t build/tests/test_vulkan_nn_conv >"$OUT/t.log" 2>&1
            echo "test_vulkan_nn_conv LUMEN_VK_CONV_TILE=$t: rc $?"
            grep -h "FAIL\|validation" "$OUT/t.log" | head -3 | cut -c 1-300
        done
        LUMEN_VK_VALIDATE=1 LUMEN_VK_CONV_TILE=m32 build/tests/test_vulkan_nn_conv >"$OUT/t.log" 2>&1
        echo "test_vulkan_nn_conv m32 validated: rc $?"
        grep -h "FAIL\|validation" "$OUT/t.log" | head -3 | cut -c 1-300
        rm -f "$OUT/t.log"
        ;;
    check)
        # the defaults' short check: parity (bf16 through the scaled path,
        # under the validation layer too), conv tests, then the figures
        tp() {   # tp NAME ENV... : one parity/conv test run, its verdict
            name=$1; shift
            env "$@" >"$OUT/t.log" 2>&1
            echo "$name: rc $? $(grep -c 'PARITY FAIL' "$OUT/t.log") failures, $(grep -ci 'validation' "$OUT/t.log") validation lines"
            grep -h "FAIL\|alidation" "$OUT/t.log" | head -3 | cut -c 1-300
        }
        tp "bf16 range" PARITY_ONLY=test_matmul_bf16_range build/tests/test_vulkan_parity
        tp "bf16 range validated" LUMEN_VK_VALIDATE=1 PARITY_ONLY=test_matmul_bf16_range build/tests/test_vulkan_parity
        tp "nn_conv validated" LUMEN_VK_VALIDATE=1 build/tests/test_vulkan_nn_conv
        tp "test_matmul validated quick" LUMEN_VK_VALIDATE=1 PARITY_QUICK=1 PARITY_ONLY=test_matmul build/tests/test_vulkan_parity
        tp "test_matmul" PARITY_ONLY=test_matmul build/tests/test_vulkan_parity
        rm -f "$OUT/t.log"
        for dt in f16 bf16; do
            VKBENCH_ONLY=mm VKBENCH_DTYPE=$dt VKBENCH_SIZES=$SIZES build/bench/vkbench 2>&1 | grep -v "^device"
        done
        SWEEP=peer SIZES=$SIZES sh "$0" | grep -v "f32\|=== sweep"
        SWEEP=conv CONVT=m64w8 CASES="conv:64:32:256:3:f16 conv:192:32:256:3:f16 conv:64:32:128:3:f16 conv:192:64:128:3:f16 conv:64:64:256:3:f16" sh "$0"
        ;;
    esac
done
