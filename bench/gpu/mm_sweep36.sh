#!/bin/sh
# mm_sweep36.sh [VKBENCH [OUT]] - issue 36's GEMM tiles and split-K at the
# models' shapes, for setting the constants of the wave-aware choice
# (backends/vulkan/matmul_coop.c, lm_vk_coop_choose).  Shapes as the models
# have them: A [2, M, K] (the CFG batch) times a weight read as [K, N] for
# every entry (vkbench's bBx prefix), the weight stored [N, K] and read
# transposed as a linear layer does (suffix t; MM36_T= stores it [K, N]):
#   SDXL   [2,1024,1280]x1280  [2,1024,5120]x1280  [2,77,2048]x1280 (the
#          text's k/v)  [2,1024,1280]x10240  [2,4096,640]x640
#   SD 1.5 [2,4096,320]x320  x2560  [2,4096,1280]x320  [2,1024,640]x640
#          [2,256,1280]x1280  [2,77,768]x320, x640, x1280
#   Z-Image [4224,3840]x3840, x10240  [4224,10240]x3840  [32,2560]x3840
#          (batch 1; f16 and bf16)
# Settings: the default (the rule; its tile and parts from
# LUMEN_VK_MM_SAY=1), LUMEN_VK_COOP=128x256s1 and k64s1 with
# LUMEN_VK_MM_SPLITK=1, each with LUMEN_VK_MM_SPLITK=2, 3, 4, 8 (parts are
# cut to what K's steps allow: no empty part), then w4, w4k64s1 and
# 256x128s1 with LUMEN_VK_MM_SPLITK=1.
# One vkbench process a setting and dtype (bf16: the two tiles it has);
# VKBENCH_REPS (9) timed runs after a warm-up of VKBENCH_WARM_MS (150); no
# process starts past MM36_BUDGET seconds (225: the whole within 4
# minutes on the H200; the settings run most wanted first).  Prints one
# line a run:
#   shape dtype setting median [min-max] TFLOP/s
# and, for the default, "# rule shape: tile, parts" lines; then a summary
# a shape: the default's figure, the fastest setting and default / fastest.  OUT (a
# folder, default /tmp/mm_sweep36) keeps vkbench's output a run.
# MM36_SHAPES / MM36_SHAPES_BF16 replace the lists (lavapipe: small
# shapes, VKBENCH_REPS=1 VKBENCH_WARM_MS=1).  Run from the repository root.
VK=${1:-build/bench/vkbench}
OUT=${2:-/tmp/mm_sweep36}
T=${MM36_T-t}
BUDGET=${MM36_BUDGET:-225}
mkdir -p "$OUT" || exit 1
F16=${MM36_SHAPES:-"b2x1024:1280:1280$T,b2x1024:5120:1280$T,b2x77:2048:1280$T,b2x1024:1280:10240$T,b2x4096:640:640$T,b2x4096:320:320$T,b2x4096:320:2560$T,b2x4096:1280:320$T,b2x1024:640:640$T,b2x256:1280:1280$T,b2x77:768:320$T,b2x77:768:640$T,b2x77:768:1280$T,4224:3840:3840$T,4224:3840:10240$T,4224:10240:3840$T,32:2560:3840$T"}
BF16=${MM36_SHAPES_BF16:-"4224:3840:3840$T,4224:3840:10240$T,4224:10240:3840$T,32:2560:3840$T"}
export VKBENCH_ONLY=mm VKBENCH_SIZES= VKBENCH_REPS=${VKBENCH_REPS:-9} VKBENCH_WARM_MS=${VKBENCH_WARM_MS:-150}
unset LUMEN_VK_COOP LUMEN_VK_MM_SPLITK LUMEN_VK_GEMV
start=$(date +%s)
n=0
: > "$OUT/lines.txt"
# run SETTING COOP SPLITK: both dtypes' lists under those knobs
run() {
    for dt in f16 bf16; do
        if [ $dt = f16 ]; then sh=$F16; else sh=$BF16; fi
        [ -n "$sh" ] || continue
        # bf16 has the tiles 128x256s1 and k64s1 only (else the default again)
        case "$dt:$2" in bf16:w4|bf16:w4k64s1|bf16:256x128s1) continue ;; esac
        if [ $(( $(date +%s) - start )) -ge "$BUDGET" ]; then
            echo "# $1 $dt: skipped (past MM36_BUDGET=$BUDGET s)"
            continue
        fi
        n=$((n + 1))
        f="$OUT/$n.$dt.txt"
        env ${2:+LUMEN_VK_COOP=$2} ${3:+LUMEN_VK_MM_SPLITK=$3} LUMEN_VK_MM_SAY=1 VKBENCH_DTYPE=$dt \
            VKBENCH_MM_SHAPES="$sh" "$VK" > "$f" 2>&1
        rc=$?
        [ $rc -eq 0 ] || echo "# $1 $dt: vkbench rc $rc (see $f)"
        awk -v s="$1" -v d="$dt" '/^matmul_/ { k = $1; sub(/^matmul_[a-z0-9]+_/, "", k)
                                               printf "%s %s %s %s %s TFLOP/s\n", k, d, s, $2, $3 }
                                  s == "default" && /^lumen: matmul / { sub(/^lumen: matmul /, "# rule "); print }' "$f" |
            tee -a "$OUT/lines.txt"
    done
}
run default "" ""
for c in 128x256s1 k64s1; do
    run "COOP=$c,SPLITK=1" $c 1
done
for c in k64s1 128x256s1; do
    for p in 2 3 4 8; do
        run "COOP=$c,SPLITK=$p" $c $p
    done
done
for c in w4 w4k64s1 256x128s1; do
    run "COOP=$c,SPLITK=1" $c 1
done
# a shape and dtype a line: the default's figure, the fastest setting's,
# and default / fastest
echo "== shape dtype default best-setting best default/best"
awk '!/^#/ { k = $1 " " $2; if (!(k in seen)) { seen[k] = 1; order[++n] = k }
             if ($3 == "default") dflt[k] = $4
             if (!(k in best) || $4 + 0 > best[k] + 0) { best[k] = $4; bs[k] = $3 } }
     END { for (i = 1; i <= n; i++) { k = order[i]; d = "-"; r = "-"
             if (k in dflt) { d = dflt[k]; if (best[k] + 0 > 0) r = sprintf("%.2f", dflt[k] / best[k]) }
             printf "%s %s %s %s %s\n", k, d, bs[k], best[k], r } }' "$OUT/lines.txt"
echo "# mm_sweep36: $n vkbench runs in $(( $(date +%s) - start )) s; outputs in $OUT"
