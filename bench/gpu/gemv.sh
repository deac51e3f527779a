#!/bin/sh
# gemv.sh [VKBENCH] - issue 36's batch-1 products: the GEMV kernel
# (backends/vulkan/matmul_gemv.c) and the GEMM kernels it replaced
# (LUMEN_VK_GEMV=0, rows "_gemm") in one vkbench call, beside torch.matmul
# (mm_peer.py), medians of 9 with [min-max], f16 and bf16.  Shapes M:K:N
# (B stored [K, N]) and M:K:Nt (B stored [N, K] and read transposed, as a
# linear layer's weight); GEMV_SHAPES= replaces the default list, and
# GEMV_NO_TORCH=1 skips the peer (lavapipe).  Ends with one line a shape:
#   name lumen gemm peer lumen/peer gemm/peer   (TFLOP/s, > 1 = Lumen faster)
# Run from the repository root.
VK=${1:-build/bench/vkbench}
SH=${GEMV_SHAPES:-1:2560:9728,1:9728:2560,1:3840:3840,1:3840:15360,1:2560:9728t,1:9728:2560t,1:3840:3840t,1:3840:15360t,2:3840:15360t,8:3840:3840t}
T=${TMPDIR:-/tmp}/gemv.$$
VKBENCH_ONLY=mm VKBENCH_REPS=9 VKBENCH_SIZES= VKBENCH_DTYPE=f16,bf16 VKBENCH_MM_SHAPES=$SH VKBENCH_MM_GEMM=1 \
  "$VK" > "$T.lumen" 2>&1; echo "vkbench rc $?"
cat "$T.lumen"
: > "$T.peer"
if [ -z "${GEMV_NO_TORCH:-}" ]; then
  MM_PEER_REPS=9 python3 bench/gpu/mm_peer.py f16,bf16 "$SH" > "$T.peer" 2>&1; echo "mm_peer rc $?"
  cat "$T.peer"
fi
echo "== name lumen gemm peer lumen/peer gemm/peer"
awk 'FNR == 1 { f++ }
     /^matmul_/ { if (f == 1) { if ($1 ~ /_gemm$/) { k = $1; sub(/_gemm$/, "", k); g[k] = $2 }
                                else { l[$1] = $2; order[++n] = $1 } }
                  else p[$1] = $2 }
     END { for (i = 1; i <= n; i++) { k = order[i]
             printf "%s %s %s %s %s %s\n", k, l[k], g[k], (k in p) ? p[k] : "-",
                    (k in p && p[k] > 0) ? sprintf("%.2f", l[k] / p[k]) : "-",
                    (k in p && p[k] > 0 && (k in g)) ? sprintf("%.2f", g[k] / p[k]) : "-" } }' "$T.lumen" "$T.peer"
rm -f "$T.lumen" "$T.peer"
