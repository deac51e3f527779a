#!/bin/sh
# tests/models/dit_files.sh - `lumen generate` and `lumen convert` with
# Z-Image and FLUX.2 transformer single files (models/dit_files.c; the
# fixtures tests/ref/make_dit_single.py writes into $BUILD/ref/dit/, `make
# dit-fixtures`), on the CPU in f32: the Z-Image file (under
# model.diffusion_model.) with --tokenizer its diffusers folder makes the
# folder's PNG byte for byte; its ComfyUI-GGUF Q8_0 file and the file
# `lumen convert --quantize q4_0` writes make a PNG; the Klein file loads as
# Klein's row; without --tokenizer, or with the other family's folder, the
# run stops saying what to give.  One line per check.
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh   # BUILD, check, fails, summary
export LUMEN_DEVICE=cpu
D=tests/ref/dit
Z=$BUILD/ref/dit/zimage.safetensors
if [ ! -f "$D/zimage/model_index.json" ] || [ ! -f "$Z" ]; then
  echo "tests/ref/dit fixtures or $Z absent (make dit-fixtures): skipped"
  exit 77
fi
T=$BUILD/test-dit-files
rm -rf "$T" && mkdir -p "$T"
L="$BUILD/lumen"
G="$L generate 'a dog is dancing' --steps 2 --size 32x32 --seed 3 -q"

check "Z-Image folder makes a PNG" sh -c "$G --model $D/zimage -o $T/folder.png && test -s $T/folder.png"
check "Z-Image single file makes the same PNG" sh -c "$G --model $Z --tokenizer $D/zimage -o $T/single.png && cmp $T/folder.png $T/single.png"
check "... and with --offload (the file read again after the encoder)" sh -c "$G --model $Z --tokenizer $D/zimage --offload -o $T/single_off.png && cmp $T/folder.png $T/single_off.png"
check "Z-Image Q8_0 GGUF makes a PNG" sh -c "$G --model $BUILD/ref/dit/zimage_q8_0.gguf --tokenizer $D/zimage -o $T/q8.png && test -s $T/q8.png"
check "convert --quantize q4_0 of the Z-Image file" sh -c "'$L' convert --quantize q4_0 $Z $T/z-q4_0.gguf | grep -q 'as q4_0'"
check "... which generate reads" sh -c "$G --model $T/z-q4_0.gguf --tokenizer $D/zimage -o $T/q4.png && test -s $T/q4.png"
check "the Klein file loads as Klein's row" "$L" -e "local p = lm.diffusion.pipeline('$BUILD/ref/dit/klein.safetensors', {tokenizer = '$D/klein', dtype = 'f32'}); assert(p.family == 'klein-base', p.family)"
fails "no --tokenizer folder" 1 "holds the transformer only" sh -c "$G --model $Z -o $T/x.png"
fails "the other family's folder" 1 "Flux2KleinPipeline" sh -c "$G --model $Z --tokenizer $D/klein -o $T/x.png"
summary
