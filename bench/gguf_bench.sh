#!/bin/sh
# bench/gguf_bench.sh GGML_SRC GGML_BUILD [THREADS] [REPS] [TYPE [M]] - Lumen's quantized
# linear beside ggml's mul_mat on the CPU (bench/gguf_bench.c).  GGML_SRC is
# a ggml-org/ggml checkout, GGML_BUILD its CPU build:
#   cmake -S $GGML_SRC -B $GGML_BUILD -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF \
#     -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF -DGGML_NATIVE=OFF && \
#   cmake --build $GGML_BUILD -j2 --target ggml ggml-base ggml-cpu
# (GGML_NATIVE=OFF still builds ggml's CPU variants and picks the CPU's at run time.)
set -e
cd "$(dirname "$0")/.."
G=${1:?ggml source dir}; B=${2:?ggml build dir}
make -s build/liblumen.a
cc -std=c11 -O2 -D_GNU_SOURCE -I. -Icore -I"$G/include" -o build/gguf_bench bench/gguf_bench.c \
  build/liblumen.a -L"$B/src" -lggml -lggml-base -lggml-cpu -Wl,-rpath,"$B/src" \
  -lm -lpthread -ldl -lsleef -lvulkan -lpng16 -lz -lcjson -licuuc -licudata
echo "gguf_bench $(date -u +%Y-%m-%dT%H:%MZ) lumen $(git rev-parse --short HEAD) ggml $(git -C "$G" rev-parse --short HEAD 2>/dev/null || echo "$G") cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
./build/gguf_bench "${3:-2}" "${4:-11}" ${5:+"$5"} ${6:+"$6"}
