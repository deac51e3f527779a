#!/bin/sh
# tests/models/generate.sh - `lumen generate` and samples/batch_generate.lua
# end to end on the tiny random SD 1.x checkpoint of tests/ref/diffusion/
# (CPU, f32): a PNG from the diffusers folder and from the single file, its
# A1111 `parameters` chunk read back; --batch-size 2 gives the bytes of two
# single runs; an existing output is refused without --overwrite; errors
# (missing model, size not divisible by 8, unknown sampler) exit non-zero
# with a message that says what is wrong; `lumen batch` with the sample makes
# the same bytes with --batch-size 2 as with 1; `lumen convert` writes the
# single file and the folder as GGUF (plain, q8_0, q4_k) and generate /
# lm.models.load read it back; issue 34: outputs and strength checked before
# the model loads, NaN in any stage an error naming it (no PNG), None and ""
# negatives told apart in the image and its parameters, seeds that can be
# given back, -- before a prompt starting with -; the third sweep's --strength
# without --init and --tokenizer with a folder refused, a negative epsilon in
# a config named with its file and key; issue 37: --lora and <lora:NAME:W>
# tags change the image alike, the infotext's Lora hashes against hashlib,
# a tag without --lora-dir and an unmatched key refused.  One line per check.
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh   # BUILD, check, fails, summary
export LUMEN_DEVICE=cpu
D=tests/ref/diffusion
S=$BUILD/ref/diffusion/sd1.safetensors   # make diffusion-fixtures builds it (tests/ref/make_single.py)
if [ ! -f "$D/sd1/model_index.json" ] || [ ! -f "$S" ]; then
  echo "tests/ref/diffusion fixtures or $S absent (make diffusion-fixtures): skipped"
  exit 77
fi
T=$BUILD/test-generate
rm -rf "$T" && mkdir -p "$T"
L="$BUILD/lumen"
G="$L generate 'a photo of an astronaut riding a horse' --negative 'blurry, low quality' --steps 4 --size 64x64 -q"
WANT='a photo of an astronaut riding a horse
Negative prompt: blurry, low quality
Steps: 4, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 7, Seed: 42, Size: 64x64, Model: sd1'

check "folder layout makes a PNG" sh -c "$G --model $D/sd1 --seed 42 -o $T/folder.png && test -s $T/folder.png"
export WANT
check "parameters chunk as A1111 writes it" sh -c "params() { $L -e \"local _, t = lm.image.read_png('\$1'); io.write(t.parameters)\"; }; test \"\$(params $T/folder.png)\" = \"\$WANT\""
check "single-file layout makes the same PNG" sh -c "$G --model $S --tokenizer $D/sd1 --seed 42 -o $T/single.png && cmp $T/folder.png $T/single.png"
check "img2img with --init and --strength" sh -c "$G --model $D/sd1 --seed 3 --init $T/folder.png --strength 0.5 --sampler euler_a -o $T/i2i.png && $L -e \"local _, t = lm.image.read_png('$T/i2i.png'); assert(t.parameters:find('Sampler: Euler a, Schedule type: Normal', 1, true)); assert(t.parameters:find(', Denoising strength: 0.5', 1, true))\""
check "the sampler table's LMS Karras: A1111's Sampler and Schedule type, the same bytes as lms_karras" sh -c "$G --model $D/sd1 --seed 6 --steps 3 --sampler 'LMS Karras' -o $T/lmsk.png && $G --model $D/sd1 --seed 6 --steps 3 --sampler lms_karras -o $T/lmsk2.png && cmp $T/lmsk.png $T/lmsk2.png && $L -e \"local _, t = lm.image.read_png('$T/lmsk.png'); assert(t.parameters:find('Sampler: LMS, Schedule type: Karras', 1, true))\""
check "--help lists the table's rows" sh -c "$G --help | grep -q 'lms_karras' && $G --help | grep -q 'euler_karras'"
check "--sampler list: every row with A1111's name and the diffusers scheduler" sh -c "$L generate --sampler list > $T/list.txt && grep -q '^dpm++2m_sde_karras  *DPM++ 2M SDE Karras  *DPMSolverMultistepScheduler' $T/list.txt && grep -q '^unipc  *UniPC  *UniPCMultistepScheduler' $T/list.txt && test \$(wc -l < $T/list.txt) -ge 20"
check "issue 37's DPM++ 2M SDE Karras: A1111's Sampler and Schedule type, the same bytes as dpm++2m_sde_karras" sh -c "$G --model $D/sd1 --seed 6 --steps 3 --sampler 'DPM++ 2M SDE Karras' -o $T/sdek.png && $G --model $D/sd1 --seed 6 --steps 3 --sampler dpm++2m_sde_karras -o $T/sdek2.png && cmp $T/sdek.png $T/sdek2.png && $L -e \"local _, t = lm.image.read_png('$T/sdek.png'); assert(t.parameters:find('Sampler: DPM++ 2M SDE, Schedule type: Karras', 1, true))\""
check "issue 37's Heun, UniPC, LCM and Euler Exponential run from the CLI" sh -c "for s in Heun UniPC LCM 'Euler Exponential' 'DPM++ 2S a'; do $G --model $D/sd1 --seed 6 --steps 2 --sampler \"\$s\" -o $T/s37.png --overwrite || exit 1; done"
check "--clip-skip 2 is written as A1111 writes it" sh -c "$G --model $D/sd1 --seed 42 --clip-skip 2 -o $T/skip.png && $L -e \"local _, t = lm.image.read_png('$T/skip.png'); assert(t.parameters:find('Model: sd1, Clip skip: 2', 1, true))\" && ! cmp -s $T/skip.png $T/folder.png"
check "--batch-size 2 is two single runs, byte for byte" sh -c "$G --model $D/sd1 --seed 42 --sampler euler_a --batch-size 2 -o $T/b.png && $G --model $D/sd1 --seed 43 --sampler euler_a -o $T/s43.png && $G --model $D/sd1 --seed 42 --sampler euler_a -o $T/s42.png && cmp $T/b_0000.png $T/s42.png && cmp $T/b_0001.png $T/s43.png && ! cmp -s $T/s42.png $T/s43.png"
cp $T/folder.png $T/keep.png
fails "an existing output is refused" 1 "exists (--overwrite replaces it)" sh -c "$G --model $D/sd1 --seed 5 -o $T/folder.png"
check "... and left as it was" cmp $T/folder.png $T/keep.png
check "--overwrite replaces it" sh -c "$G --model $D/sd1 --seed 5 -o $T/folder.png --overwrite && ! cmp -s $T/folder.png $T/keep.png"
fails "a missing model" 1 "no such file or folder" sh -c "$G --model $D/nothing_here --seed 1 -o $T/x.png"
fails "a size not divisible by 8" 2 "divisible by 8" sh -c "$G --model $D/sd1 --size 60x64 -o $T/x.png"
fails "an unknown sampler" 2 "sampler dpm++3m: expected euler, euler_karras" sh -c "$G --model $D/sd1 --sampler dpm++3m -o $T/x.png"
fails "no prompt" 2 "no prompt given" "$L" generate --model $D/sd1 -o $T/x.png
# a UNet config without sample_size: the default size is the family row's
# (SDXL 128 latents, SD 64), times the VAE's scale (2 in the tiny models)
cp -r $D/sdxl $T/nosize && sed -i '/"sample_size"/d' $T/nosize/unet/config.json
check "no sample_size: the family's default size" "$L" -e "assert(lm.models.load('$T/nosize').default_size == 256); assert(lm.models.load('$D/sdxl').default_size == 16)"
# the ranges of models/family.h (the ones Lua and the core check with), named
fails "--steps past its range" 2 "--steps 4294967298: expected a whole number from 1 to 10000" sh -c "$G --model $D/sd1 --steps 4294967298 -o $T/x.png"
fails "--size past the maximum states it" 2 "--size 100000: expected WxH or N, each a whole number from 8 to 65536" sh -c "$G --model $D/sd1 --size 100000 -o $T/x.png"
fails "--size with trailing junk" 2 "--size 64x64junk: expected WxH" sh -c "$G --model $D/sd1 --size 64x64junk -o $T/x.png"
fails "--clip-skip 65" 2 "--clip-skip 65: expected a whole number from 1 to 64" sh -c "$G --model $D/sd1 --clip-skip 65 -o $T/x.png"
fails "--batch-size 0" 2 "--batch-size 0: expected a whole number from 1 to 4096" sh -c "$G --model $D/sd1 --batch-size 0 -o $T/x.png"
check "nothing written by the failures" test ! -e $T/x.png

# lumen batch with the sample: the pipeline stays loaded; batches of 2 give the bytes of 1
printf '%s\n' '{"seed": 1, "prompt": "a red fox", "negative": "blurry", "steps": 3, "size": "64x64"}' \
  '{"seed": 2, "prompt": "a lighthouse", "steps": 3, "size": "64x64"}' \
  '{"seed": 3, "prompt": "a lighthouse", "steps": 3, "size": "64x64", "sampler": "euler_a"}' \
  '{"seed": 4, "prompt": "a red fox", "negative": "blurry", "steps": 3, "size": "64x64", "sampler": "euler_a"}' > "$T/params.jsonl"
check "lumen batch, one job at a time" "$L" batch samples/batch_generate.lua --params "$T/params.jsonl" \
  -o "$T/one/%d.png" --progress off --manifest none -- $D/sd1
# jobs 1-2 and 3-4 share their settings: two batches of two images (render_batch)
check "lumen batch --batch-size 2" "$L" batch samples/batch_generate.lua --params "$T/params.jsonl" \
  -o "$T/two/%d.png" --batch-size 2 --progress off --manifest none -- $D/sd1
check "... the same bytes" sh -c "for i in 1 2 3 4; do cmp $T/one/\$i.png $T/two/\$i.png || exit 1; done"
# issue 34, item 4: a job out of range fails naming the option (it ran 2 steps
# and wrote "Steps: 4294967298" into the PNG); the good job still runs
printf '%s\n' '{"seed": 1, "prompt": "a red fox", "steps": 4294967298, "size": "64x64"}' \
  '{"seed": 2, "prompt": "a fox", "steps": 2, "size": "64x64junk"}' \
  '{"seed": 3, "prompt": "a fox", "steps": 2, "size": "64x64"}' > "$T/bad.jsonl"
fails "lumen batch: out-of-range jobs fail, named" 1 "steps 4294967298: expected a whole number from 1 to 10000" "$L" batch samples/batch_generate.lua --params "$T/bad.jsonl" \
  -o "$T/bad/%d.png" --progress off --manifest none -- $D/sd1
cp "$T/log" "$T/bad.log"
check "... the size too" grep -q 'size "64x64junk": expected WxH or N' "$T/bad.log"
check "... no PNG for them, one for the good job" sh -c "test ! -e $T/bad/1.png && test ! -e $T/bad/2.png && test -s $T/bad/3.png"
# GGUF checkpoints in stable-diffusion.cpp's layout (lumen convert writes them):
# unquantized, the same PNG as the .safetensors; q8_0 within 35 dB PSNR of it
# (measured 52.4 dB, max 2/255 on sd1; 51.3 dB, max 3/255 on sdxl); q4_k runs
check "convert SD single file -> GGUF" "$L" convert $S $T/sd1.gguf
check "GGUF (f32) makes the single file's PNG" sh -c "$G --model $T/sd1.gguf --tokenizer $D/sd1 --seed 42 -o $T/gguf.png && cmp $T/single.png $T/gguf.png"
check "convert --quantize q8_0" "$L" convert --quantize q8_0 $S $T/sd1-q8_0.gguf
check "convert --quantize q4_k" "$L" convert --quantize q4_k $S $T/sd1-q4_k.gguf
check "q8_0 GGUF within 35 dB PSNR of f32" sh -c "$G --model $T/sd1-q8_0.gguf --tokenizer $D/sd1 --seed 42 -o $T/q8.png && $L -e \"local a = lm.image.read_png('$T/single.png', {dtype='f32'}); local b = lm.image.read_png('$T/q8.png', {dtype='f32'}); local mse = ((a - b) * (a - b)):mean():item(); local psnr = 10 * math.log(1 / mse, 10); print(('q8_0 PSNR %.1f dB'):format(psnr)); assert(psnr > 35)\""
check "q4_k GGUF runs" sh -c "$G --model $T/sd1-q4_k.gguf --tokenizer $D/sd1 --seed 42 -o $T/q4k.png && test -s $T/q4k.png"
check "lm.models.load of a GGUF checkpoint" "$L" -e "local p = lm.models.load('$T/sd1-q8_0.gguf', {tokenizer = '$D/sd1'}); assert(p:generate{prompt = 'a fox', steps = 2, size = {64, 64}, seed = 1}.shape[1] == 3)"
SX=$BUILD/ref/diffusion/sdxl.safetensors
check "sdxl GGUF makes the single file's PNG" sh -c "$L convert $SX $T/sdxl.gguf && $G --model $SX --tokenizer $D/sdxl --seed 7 -o $T/sdxl-st.png && $G --model $T/sdxl.gguf --tokenizer $D/sdxl --seed 7 -o $T/sdxl-gg.png && cmp $T/sdxl-st.png $T/sdxl-gg.png"
check "a diffusers folder -> GGUF makes the folder's PNG" sh -c "mkdir -p $T/dir && $L convert $D/sd1 $T/dir/sd1.gguf && $G --model $T/dir/sd1.gguf --tokenizer $D/sd1 --seed 42 -o $T/dir.png && cmp $T/single.png $T/dir.png"
cp $T/sd1.gguf $T/keep.gguf
fails "convert refuses an existing output" 1 "exists (--overwrite replaces it)" "$L" convert --quantize q8_0 $S $T/sd1.gguf
check "... and leaves it as it was" cmp $T/sd1.gguf $T/keep.gguf
fails "convert never writes over its input" 1 "is the input" "$L" convert --overwrite $T/sd1.gguf $T/sd1.gguf
head -c 100000 $T/sd1.gguf > $T/cut.gguf
fails "a truncated GGUF names the file" 1 "cut.gguf: tensor" sh -c "$G --model $T/cut.gguf --tokenizer $D/sd1 -o $T/x.png"
# issue 34 item 10: the output's extension chooses the format, or a clear refusal
fails "convert --quantize to .safetensors is refused" 2 "writes GGUF" "$L" convert --quantize q8_0 $S $T/q.safetensors
check "... and writes nothing" sh -c "! test -e $T/q.safetensors"
fails "convert to another extension is refused" 2 "extension chooses the format" "$L" convert $S $T/x.bin
fails "convert --quantize q8_k is refused" 2 "q8_k is ggml's format" "$L" convert --quantize q8_k $S $T/k.gguf
check "convert --help prints convert's usage" sh -c "'$L' convert --help | head -1 | grep -q '^usage: lumen convert'"
check "GGUF -> safetensors, q8_0 dequantized" sh -c "'$L' convert $T/sd1-q8_0.gguf $T/back.safetensors | grep -q 'dequantized to f32'"
check "... which generate reads" sh -c "$G --model $T/back.safetensors --tokenizer $D/sd1 --seed 42 -o $T/back.png"
check "q8_0 -> q4_0 requantizes" sh -c "'$L' convert --quantize q4_0 $T/sd1-q8_0.gguf $T/sd1-q4_0.gguf | grep -q 'requantized'"
check "... no q8_0 tensor is left" "$L" -e "local n = 0; for k, t in pairs(lm.load('$T/sd1-q4_0.gguf')) do assert(t.dtype ~= 'q8_0', k); if t.dtype == 'q4_0' then n = n + 1 end end; assert(n > 0, 'no q4_0')"
check "a diffusers folder -> safetensors makes the single file's PNG" sh -c "mkdir -p $T/dir && $L convert $D/sd1 $T/dir/sd1.safetensors && $G --model $T/dir/sd1.safetensors --tokenizer $D/sd1 --seed 42 -o $T/dir2.png && cmp $T/single.png $T/dir2.png"

# ---- issue 34 item 3: the output checked (its folder made) before the model loads ----
check "-o into folders that do not exist makes them" sh -c "$G --model $D/sd1 --seed 42 -o $T/new/sub/x.png && cmp $T/new/sub/x.png $T/keep.png"
touch $T/afile
fails "an output folder that cannot be made fails before the model, naming the output" 1 "output $T/afile/x.png: cannot make folder $T/afile" sh -c "$G --model $D/nothing_here -o $T/afile/x.png"
fails "-o DIR/ names a folder: refused before the model" 2 "-o $T/newdir/ names a folder" sh -c "$G --model $D/nothing_here -o $T/newdir/"
check "... and makes nothing" test ! -e $T/newdir
check "-o 'd%d/img.png' --batch-size 2 makes d0/ and d1/" sh -c "$G --model $D/sd1 --seed 42 --sampler euler_a --batch-size 2 -o '$T/d%d/img.png' && cmp $T/d0/img.png $T/s42.png && cmp $T/d1/img.png $T/s43.png"
if [ -d /proc/sys ] && [ ! -w /proc/sys ]; then
  fails "a folder that cannot be written fails before the model" 1 "output /proc/sys/x.png: cannot write into folder /proc/sys" sh -c "$G --model $D/nothing_here -o /proc/sys/x.png"
fi
mkfifo $T/fifo.png
fails "a FIFO at the output is refused before the model, even with --overwrite" 1 "$T/fifo.png exists and is a FIFO (named pipe)" sh -c "$G --model $D/nothing_here --overwrite -o $T/fifo.png"
long=$(printf '%0240d' 0)
fails "a file name the folder cannot hold (with the writer's temporary) fails before the model" 1 "cannot create a file there: File name too long" sh -c "$G --model $D/nothing_here -o $T/$long.png"
check "... and leaves no file behind" sh -c "! ls $T | grep -q '^0000000000'"
fails "a strength that leaves no step fails before the model (--steps given)" 2 "--strength 0.1 of 2 steps leaves no step to run" sh -c "$G --model $D/nothing_here --init $T/folder.png --steps 2 --strength 0.1 -o $T/x.png"
fails "... and with the family's steps, before the init image is encoded" 2 "--strength 0.01 of 20 steps leaves no step to run" sh -c "$L generate fox --model $D/sd1 --size 64 --init $T/folder.png --strength 0.01 -o $T/x.png"
check "... pipe:generate says so before any network runs" "$L" -e "
  local p = lm.models.load('$D/sd1'); local calls = 0
  local ok, e = pcall(p.generate, p, {prompt = 'a', steps = 3, strength = 0.2, init = lm.zeros{3, 64, 64},
    noise = function() calls = calls + 1 end})
  assert(not ok and e:find('generate: strength 0.2 of 3 steps leaves no step to run', 1, true), e)
  assert(e:find('give 5 steps or more', 1, true), e); assert(calls == 0, 'noise drawn')"

# ---- item 5: a NaN in any stage is an error naming it, and no PNG ----
nan_weight() {  # nan_weight DIR FILE KEY: a copy of sd1 with tensor KEY of FILE all NaN
  rm -rf "$T/$1" && cp -r $D/sd1 "$T/$1" && "$L" -e "local f = '$T/$1/$2'; local t = lm.load(f)
    local w = assert(t['$3'], '$3'); t['$3'] = lm.full(w.shape, 0/0, w.dtype); os.remove(f); lm.save(f, t)"
}
nan_weight nan_unet unet/diffusion_pytorch_model.safetensors conv_in.bias
nan_weight nan_te text_encoder/model.safetensors final_layer_norm.bias
nan_weight nan_dec vae/diffusion_pytorch_model.safetensors decoder.conv_out.bias
nan_weight nan_enc vae/diffusion_pytorch_model.safetensors encoder.conv_in.bias
fails "NaN UNet weights: the UNet at step 1 named, exit 1" 1 "the UNet at step 1 of 4 produced NaN" sh -c "$G --model $T/nan_unet --seed 1 -o $T/nan1.png"
fails "NaN text encoder weights: the text encoder named" 1 "the text encoder produced NaN" sh -c "$G --model $T/nan_te --seed 1 -o $T/nan2.png"
fails "NaN VAE decoder weights: the VAE decoder named, with the images of a batch" 1 "the VAE decoder (its input: the latents / scaling_factor 0.18215) produced NaN in images 1 (seed 1), 2 (seed 2)" sh -c "$G --model $T/nan_dec --seed 1 --batch-size 2 -o $T/nan3.png"
fails "NaN VAE encoder weights with --init: the VAE encoder named" 1 "the VAE encoder (the init image's latents) produced NaN" sh -c "$G --model $T/nan_enc --seed 1 --init $T/folder.png --strength 0.5 -o $T/nan4.png"
check "... no PNG written by any of them" sh -c "! ls $T/nan*.png 2>/dev/null | grep -q ."
rm -rf $T/sf0 && cp -r $D/sd1 $T/sf0 && sed -i 's/"scaling_factor": *[0-9.e-]*/"scaling_factor": 0/' $T/sf0/vae/config.json
fails "VAE scaling_factor 0 is refused at load, naming the key" 1 "config.json: scaling_factor 0: the latents are divided by it" sh -c "$G --model $T/sf0 --seed 1 -o $T/sf0.png"
rm -rf $T/sftiny && cp -r $D/sd1 $T/sftiny && sed -i 's/"scaling_factor": *[0-9.e-]*/"scaling_factor": 1e-45/' $T/sftiny/vae/config.json
fails "scaling_factor 1e-45 (latents overflow): the VAE decoder named" 1 "the VAE decoder (its input: the latents / scaling_factor 1e-45) produced NaN" sh -c "$G --model $T/sftiny --seed 1 -o $T/sftiny.png"
check "... no PNG" test ! -e $T/sftiny.png
check "pipe:generate on NaN weights raises, naming the stage" "$L" -e "
  local p = lm.models.load('$T/nan_unet'); local ok, e = pcall(p.generate, p, {prompt = 'a', steps = 2, size = 64})
  assert(not ok and e:find('generate: the UNet at step 1 of 2 produced NaN', 1, true), e)"
printf '%s\n' '{"seed": 1, "prompt": "a red fox", "steps": 2, "size": "64x64"}' > "$T/nan.jsonl"
fails "lumen batch with NaN weights: the job fails, named, no PNG" 1 "the UNet at step 1 of 2 produced NaN" "$L" batch samples/batch_generate.lua --params "$T/nan.jsonl" \
  -o "$T/nanb/%d.png" --progress off -- $T/nan_unet
check "... the manifest records the failure" sh -c "grep -q '\"status\":\"failed\"' $T/nanb/manifest.jsonl && test ! -e $T/nanb/1.png"

# ---- item 11: a None negative and an empty one told apart (SDXL encodes zeros for None) ----
GX="$L generate 'a red fox' --steps 3 -q --model $D/sdxl --seed 9"
check "SDXL: --negative '' and no --negative make different images" sh -c "$GX -o $T/xl_none.png && $GX --negative '' -o $T/xl_empty.png && ! cmp -s $T/xl_none.png $T/xl_empty.png"
check "... and their parameters say which: an empty 'Negative prompt: ' line, or none" sh -c "
  [ \"\$($L -e \"local _, t = lm.image.read_png('$T/xl_empty.png'); io.write(t.parameters)\" | sed -n 2p)\" = 'Negative prompt: ' ] &&
  ! $L -e \"local _, t = lm.image.read_png('$T/xl_none.png'); io.write(t.parameters)\" | grep -q 'Negative prompt'"
printf '%s\n' '{"seed": 9, "prompt": "a red fox", "steps": 3}' '{"seed": 9, "prompt": "a red fox", "steps": 3, "negative": ""}' > "$T/neg.jsonl"
check "batch_generate.lua: a missing negative is lumen generate's none, \"\" its --negative ''" sh -c "
  '$L' batch samples/batch_generate.lua --params $T/neg.jsonl -o '$T/neg/%d.png' --batch-size 2 --progress off --manifest none -- $D/sdxl &&
  $L -e \"local function d(a, b) return (lm.image.read_png(a):astype('f32') - lm.image.read_png(b):astype('f32')):abs():max():item() end
    assert(d('$T/neg/1.png', '$T/xl_none.png') == 0, 'missing negative is not none')
    assert(d('$T/neg/2.png', '$T/xl_empty.png') == 0, 'empty negative is not the empty prompt')
    assert(d('$T/neg/1.png', '$T/xl_empty.png') > 0, 'the two are the same')\""
check "... and lumen batch's parameters tell them apart (the job's negative column, empty or absent)" "$L" -e "
  local function p(f) local _, t = lm.image.read_png(f); return t.parameters end
  assert(not p('$T/neg/1.png'):lower():find('negative'), p('$T/neg/1.png')); assert(p('$T/neg/2.png'):lower():find('negative'), p('$T/neg/2.png'))"

# ---- item 12: messages ----
fails "--seed whose batch runs past 2^63-1 is refused, naming the last seed" 2 "the last image's seed would be 9223372036854775808, past the largest seed 9223372036854775807; give --seed 9223372036854775806 or less" \
  sh -c "$G --model $D/nothing_here --seed 9223372036854775807 --batch-size 2 -o $T/x.png"
check "-- ends the options: a prompt may start with -" sh -c "$L generate --model $D/sd1 --steps 2 --size 64 --seed 1 -q -o $T/dash.png -- '-a red fox' && $L -e \"local _, t = lm.image.read_png('$T/dash.png'); assert(t.parameters:find('^%-a red fox\\nSteps: 2'), t.parameters)\""
fails "a single file without --tokenizer: the hint names --tokenizer" 1 "give --tokenizer DIR, a diffusers folder of the SD 1.x model" sh -c "$G --model $S -o $T/x.png"
check "... and no Lua option" sh -c "! grep -q 'config_dir\|tokenizer=' $T/log"
check "pipe:generate: a seed that is not whole is named by its value; a batch past 2^63-1 refused" "$L" -e "
  local p = lm.models.load('$D/sd1')
  local ok, e = pcall(p.generate, p, {prompt = 'a', steps = 1, size = 64, seed = 2.5}); assert(e:find('seed 2.5: expected a whole number', 1, true), e)
  ok, e = pcall(p.generate, p, {prompt = 'a', steps = 1, size = 64, seed = {1, 'x'}, batch = 2}); assert(e:find('seeds[2] = \"x\" (a string)', 1, true), e)
  ok, e = pcall(p.generate, p, {prompt = 'a', steps = 1, size = 64, seed = math.maxinteger, batch = 2}); assert(e:find('seed 9223372036854775807 with batch 2: the last image', 1, true), e)
  ok, e = pcall(lm.models.load, '$S'); assert(e:find('give tokenizer = DIR', 1, true), e)"
fails "--clip-skip past the text encoder's layers names both counts" 1 "clip_skip 63: text_encoder has 2 layers, so clip_skip 2 at most (diffusers' count; A1111's Clip skip, lumen generate's --clip-skip, is one more: 3)" sh -c "$G --model $D/sd1 --clip-skip 64 -o $T/x.png"
# ---- the third sweep: options that would do nothing, a config's epsilon ----
fails "--strength without --init is refused, not ignored" 2 "--strength is img2img's: give --init IN.png" sh -c "$G --model $D/sd1 --strength 0.5 -o $T/x.png"
fails "--tokenizer with a diffusers folder is refused, not ignored (even a missing one)" 2 "--tokenizer /no/such: --model $D/sd1 is a diffusers folder, which has its own tokenizer; --tokenizer is for single-file checkpoints" sh -c "$G --model $D/sd1 --tokenizer /no/such -o $T/x.png"
rm -rf $T/eps && cp -r $D/sd1 $T/eps
/usr/bin/python3 -c "import json, sys; p = sys.argv[1]; d = json.load(open(p)); d['layer_norm_eps'] = -1; json.dump(d, open(p, 'w'))" $T/eps/text_encoder/config.json
fails "a negative layer_norm_eps names the file and the key" 1 "$T/eps/text_encoder/config.json: layer_norm_eps: -1: expected a number >= 0" sh -c "$G --model $T/eps -o $T/x.png"
rm -rf $T/eps && cp -r $D/sd1 $T/eps
/usr/bin/python3 -c "import json, sys; p = sys.argv[1]; d = json.load(open(p)); d['norm_eps'] = -0.5; json.dump(d, open(p, 'w'))" $T/eps/unet/config.json
fails "... and the UNet's norm_eps" 1 "$T/eps/unet/config.json: norm_eps: -0.5: expected a number >= 0" sh -c "$G --model $T/eps -o $T/x.png"
for v in 0 1e9; do
  rm -rf $T/eps && cp -r $D/sd1 $T/eps
  /usr/bin/python3 -c "import json, sys; p = sys.argv[1]; d = json.load(open(p)); d['beta_start'] = float(sys.argv[2]); json.dump(d, open(p, 'w'))" $T/eps/scheduler/scheduler_config.json $v
  fails "scheduler beta_start $v names the file and the key (not the UNet's NaN)" 1 "$T/eps/scheduler/scheduler_config.json: beta_start" sh -c "$G --model $T/eps -o $T/x.png"
done
check "... no x.png written by these failures" test ! -e $T/x.png

# ---- the DiT families (issue 35): lumen generate, the metadata, a NaN named ----
Z=tests/ref/dit/zimage
check "Z-Image: lumen generate writes the image, Model and Sampler recorded" sh -c "$L generate 'dance monkey' --model $Z --size 32 --steps 2 --seed 3 -q -o $T/z.png && $L -e \"local _, t = lm.image.read_png('$T/z.png'); assert(t.parameters:find('Steps: 2, Sampler: Euler', 1, true) and t.parameters:find('Model: zimage', 1, true), t.parameters)\""
rm -rf $T/nan_dit && cp -r $Z $T/nan_dit && "$L" -e "local f = '$T/nan_dit/transformer/diffusion_pytorch_model.safetensors'; local t = lm.load(f)
  local k = 'all_final_layer.2-1.linear.bias'; t[k] = lm.full(t[k].shape, 0/0, t[k].dtype); os.remove(f); lm.save(f, t)"
fails "Z-Image: NaN transformer weights: the transformer at step 1 named, no PNG" 1 "Z-Image: the transformer at step 1 of 2 produced NaN" sh -c "$L generate 'a' --model $T/nan_dit --size 32 --steps 2 --seed 1 -q -o $T/nan_dit.png"
check "... no nan_dit.png" test ! -e $T/nan_dit.png
check "Z-Image img2img: 9 steps at strength 0.1 run one step (its pipeline's rule, not SD's int(steps * strength))" sh -c "$L generate 'x' --model $Z --init $T/folder.png --strength 0.1 --steps 9 -q -o $T/zi2i.png && $L -e \"local _, t = lm.image.read_png('$T/zi2i.png'); assert(t.parameters:find('Denoising strength: 0.1', 1, true), t.parameters)\""
check "Z-Image --offload: the same PNG (the text encoder freed and read again)" sh -c "$L generate 'dance monkey' --model $Z --size 32 --steps 2 --seed 3 -q --offload -o $T/z_off.png && cmp $T/z.png $T/z_off.png"
rm -rf $T/zte && cp -r $Z $T/zte && rm $T/zte/text_encoder/config.json
fails "--offload: the encoder is read at the first prompt, but its folder is checked at load" 1 "text_encoder: no config.json" sh -c "$L generate 'a' --model $T/zte --offload --size 32 --steps 1 -q -o $T/x.png"
fails "--offload on SD: refused, naming the family" 2 "only the DiT families" sh -c "$G --model $D/sd1 --offload -o $T/x.png"
fails "FLUX.2-klein's fixture without --text-layers: layer 9 missing, named" 1 "hidden state 9 does not exist" sh -c "$L generate 'a dog' --model tests/ref/dit/klein --size 32 --steps 2 -q -o $T/k.png"
check "... with --text-layers 1,2 it makes a PNG" sh -c "$L generate 'a dog' --model tests/ref/dit/klein --text-layers 1,2 --size 32 --steps 2 -q -o $T/k.png && test -s $T/k.png"
fails "--text-layers 1,x refused" 2 "expected 1 to 4 layer numbers" sh -c "$L generate 'a dog' --model $Z --text-layers 1,x -q -o $T/x.png"
fails "--text-layers on SD refused" 2 "only the DiT families" sh -c "$G --model $D/sd1 --text-layers 1 -o $T/x.png"

# ---- LoRA (issue 37): --lora, <lora:NAME:W> from --lora-dir, the infotext's Lora hashes ----
Q=lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q
mkdir -p $T/loras
"$L" -e "lm.save('$T/loras/fox.safetensors', {['$Q.lora_down.weight'] = lm.randn({4, 32}, {seed = 1}),
  ['$Q.lora_up.weight'] = lm.randn({32, 4}, {seed = 2}), ['$Q.alpha'] = lm.tensor(4.0)})
  lm.save('$T/loras/bad.safetensors', {['$Q.lora_down.weight'] = lm.randn({4, 32}, {seed = 1}),
  ['$Q.lora_up.weight'] = lm.randn({32, 4}, {seed = 2}), ['lora_unet_no_such_block.lora_up.weight'] = lm.randn({32, 4})})"
H=$(/usr/bin/python3 -c "import hashlib, struct, sys; d = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', d[:8])[0]; print(hashlib.sha256(d[8 + n:]).hexdigest()[:12])" $T/loras/fox.safetensors)
check "--lora FILE:0.8 changes the image; Lora hashes: A1111's addnet hash (Python's hashlib here)" sh -c "$G --model $D/sd1 --seed 42 --lora $T/loras/fox.safetensors:0.8 -o $T/lora.png && ! cmp -s $T/lora.png $T/s42.png && $L -e \"local _, t = lm.image.read_png('$T/lora.png'); assert(t.parameters:find('Model: sd1, Lora hashes: \\\"fox: $H\\\"', 1, true), t.parameters)\""
check "<lora:fox:0.8> from --lora-dir: the same pixels, the prompt kept with its tag" sh -c "$L generate 'a photo of an astronaut riding a horse <lora:fox:0.8>' --negative 'blurry, low quality' --steps 4 --size 64x64 -q --model $D/sd1 --seed 42 --lora-dir $T/loras -o $T/lora_tag.png && $L -e \"local a, t = lm.image.read_png('$T/lora_tag.png'); local b = lm.image.read_png('$T/lora.png'); assert((a - b):abs():max():item() == 0); assert(t.parameters:find('riding a horse <lora:fox:0.8>', 1, true), t.parameters)\""
fails "<lora:...> without --lora-dir is refused" 1 "needs a LoRA folder (--lora-dir DIR)" sh -c "$L generate 'a <lora:fox>' --steps 4 --size 64x64 -q --model $D/sd1 --seed 1 -o $T/x.png"
fails "a LoRA key that adapts nothing is named" 1 "lora_unet_no_such_block.lora_up.weight adapts no weight" sh -c "$G --model $D/sd1 --seed 1 --lora $T/loras/bad.safetensors -o $T/x.png"
fails "an SD LoRA on Z-Image: its first key named" 1 "adapts no weight of this model" sh -c "$L generate 'a' --model tests/ref/dit/zimage --size 32 --steps 1 -q --lora $T/loras/fox.safetensors -o $T/x.png"
# the DiT families (models/lora.c's DiT mapping): a diffusers-named Z-Image LoRA
ZQ=transformer.layers.0.attention.to_q
"$L" -e "lm.save('$T/loras/zi.safetensors', {['$ZQ.lora_A.weight'] = lm.randn({4, 32}, {seed = 1}),
  ['$ZQ.lora_B.weight'] = lm.randn({32, 4}, {seed = 2})})"
ZG="$L generate 'dance monkey' --model tests/ref/dit/zimage --size 32 --steps 2 --seed 3 -q"
check "Z-Image --lora FILE:0.8 changes the image, Lora hashes recorded" sh -c "$ZG -o $T/zl0.png && $ZG --lora $T/loras/zi.safetensors:0.8 -o $T/zl1.png && ! cmp -s $T/zl0.png $T/zl1.png && $L -e \"local _, t = lm.image.read_png('$T/zl1.png'); assert(t.parameters:find('Lora hashes: \\\"zi: ', 1, true), t.parameters)\""
check "Z-Image <lora:zi:0.8> from --lora-dir: the same PNG pixels" sh -c "$L generate 'dance monkey<lora:zi:0.8>' --model tests/ref/dit/zimage --size 32 --steps 2 --seed 3 -q --lora-dir $T/loras -o $T/zl2.png && $L -e \"local a = lm.image.read_png('$T/zl1.png'); local b = lm.image.read_png('$T/zl2.png'); assert((a - b):abs():max():item() == 0)\""
check "Z-Image --offload --lora: the same PNG (the LoRA merged into the transformer read again)" sh -c "$ZG --offload --lora $T/loras/zi.safetensors:0.8 -o $T/zl3.png && cmp $T/zl1.png $T/zl3.png"
check "... no x.png written by these failures" test ! -e $T/x.png


# ---- A1111's prompt syntax (issue 37): on by default, --no-prompt-syntax turns it off ----
P="--model $D/sd1 --steps 2 --size 32 --seed 4 -q"
check "a plain prompt: the same PNG with and without --no-prompt-syntax" sh -c "$L generate 'a red fox' $P -o $T/ps1.png && $L generate 'a red fox' $P --no-prompt-syntax -o $T/ps2.png && cmp -s $T/ps1.png $T/ps2.png"
check "a weighted prompt differs from its literal reading" sh -c "$L generate '(a red:1.5) fox' $P -o $T/ps3.png && $L generate '(a red:1.5) fox' $P --no-prompt-syntax -o $T/ps4.png && ! cmp -s $T/ps3.png $T/ps4.png"
check "... and a <lora:> tag is removed from the text encoded (a LoRA at weight 0: the same pixels)" sh -c "$L generate '(a red:1.5) fox<lora:fox:0>' $P --lora-dir $T/loras -o $T/ps5.png && $L -e \"local a = lm.image.read_png('$T/ps3.png'); local b = lm.image.read_png('$T/ps5.png'); assert((a - b):abs():max():item() == 0)\""
fails "a weight that is no number is named" 1 "weight '1.2.3'" sh -c "$L generate '(a:1.2.3)' $P -o $T/x.png"
fails "--embeddings names a folder it cannot read" 1 "embeddings folder $T/no_such" sh -c "$L generate 'a' $P --embeddings $T/no_such -o $T/x.png"
# inpainting (models/sd_inpaint.h; tests/test_sd_inpaint.c checks it against diffusers)
$L -e "local m = lm.zeros({1, 64, 64}); m[{{}, {16, 48}, {8, 40}}] = 1; lm.save('$T/mask.png', m); lm.save('$T/mask_wide.png', lm.zeros({1, 64, 96}))"
check "--mask: inpainting writes Mask blur and Denoising strength in the infotext" sh -c "$G --model $D/sd1 --seed 3 --init $T/folder.png --mask $T/mask.png --mask-blur 2 --strength 0.75 -o $T/inp.png && $L -e \"local _, t = lm.image.read_png('$T/inp.png'); assert(t.parameters:find(', Denoising strength: 0.75, Mask blur: 2', 1, true), t.parameters)\""
check "--mask-overlay: outside the blurred mask the init image's pixels" sh -c "$G --model $D/sd1 --seed 3 --init $T/folder.png --mask $T/mask.png --mask-overlay --strength 0.75 -o $T/inpo.png && $L -e \"local a = lm.image.read_png('$T/inpo.png'); local b = lm.image.read_png('$T/folder.png'); assert((a - b)[{{}, {1, 15}, {}}]:abs():max():item() == 0); assert((a - b)[{{}, {16, 48}, {8, 40}}]:abs():max():item() > 0)\""
check "--inpaint-full-res: outside the mask's padded box the init's pixels; the infotext says Only masked" sh -c "$G --model $D/sd1 --seed 3 --init $T/folder.png --mask $T/mask.png --inpaint-full-res --inpaint-padding 4 --strength 0.75 -o $T/inpf.png && $L -e \"local a = lm.image.read_png('$T/inpf.png'); local b = lm.image.read_png('$T/folder.png'); assert((a - b)[{{}, {1, 10}, {}}]:abs():max():item() == 0); assert((a - b)[{{}, {16, 48}, {8, 40}}]:abs():max():item() > 0); local _, t = lm.image.read_png('$T/inpf.png'); assert(t.parameters:find('Inpaint area: Only masked, Masked area padding: 4', 1, true), t.parameters)\""
fails "--inpaint-padding without --inpaint-full-res is refused" 2 "--inpaint-padding is --inpaint-full-res's" sh -c "$G --model $D/sd1 --init $T/folder.png --mask $T/mask.png --inpaint-padding 4 -o $T/x.png"
fails "--mask without --init is refused" 2 "give --init IN.png --mask M.png" sh -c "$G --model $D/sd1 --mask $T/mask.png -o $T/x.png"
fails "--mask-blur without --mask is refused" 2 "--mask-blur: give --init" sh -c "$G --model $D/sd1 --init $T/folder.png --mask-blur 4 -o $T/x.png"
check "a mask of another size (96x64) is resized to the init image's (64x64)" sh -c "$G --model $D/sd1 --init $T/folder.png --mask $T/mask_wide.png -o $T/mw.png && $L -e \"local a = lm.image.read_png('$T/mw.png'); assert(a.shape[2] == 64 and a.shape[3] == 64, tostring(a.shape))\""
check "--size with --init resizes the init image (A1111's Just resize): a 32x48 image" sh -c "$G --model $D/sd1 --init $T/folder.png --size 32x48 --strength 0.5 -o $T/i2i_small.png && $L -e \"local a, t = lm.image.read_png('$T/i2i_small.png'); assert(a.shape[2] == 48 and a.shape[3] == 32, tostring(a.shape)); assert(t.parameters:find('Size: 32x48', 1, true), t.parameters)\""
fails "a mask that is no PNG names the file" 1 "--mask: $T/folder.pn" sh -c "$G --model $D/sd1 --init $T/folder.png --mask $T/folder.pn -o $T/x.png"
fails "--mask-blur out of range" 2 "--mask-blur" sh -c "$G --model $D/sd1 --init $T/folder.png --mask $T/mask.png --mask-blur 300 -o $T/x.png"
# img2img and inpainting from lumen batch (samples/batch_generate.lua's init/mask columns):
# the pixels of lumen generate's runs above (the PNG text is batch's own)
printf '%s\n' '{"seed": 3, "prompt": "a photo of an astronaut riding a horse", "negative": "blurry, low quality", "steps": 4, "size": "64x64", "init": "'$T/folder.png'", "mask": "'$T/mask.png'", "mask_blur": 2, "strength": 0.75}' \
  '{"seed": 3, "prompt": "a photo of an astronaut riding a horse", "negative": "blurry, low quality", "steps": 4, "size": "64x64", "init": "'$T/folder.png'", "mask": "'$T/mask.png'", "mask_overlay": true, "strength": 0.75}' \
  '{"seed": 3, "prompt": "a photo of an astronaut riding a horse", "negative": "blurry, low quality", "steps": 4, "size": "64x64", "init": "'$T/folder.png'", "mask": "'$T/mask.png'", "inpaint_full_res": true, "inpaint_padding": 4, "strength": 0.75}' \
  '{"seed": 3, "prompt": "a photo of an astronaut riding a horse", "negative": "blurry, low quality", "steps": 4, "size": "64x64", "init": "'$T/folder.png'", "strength": 0.5, "sampler": "euler_a"}' > "$T/inpaint.jsonl"
check "lumen batch: init and mask columns give lumen generate's pixels (inpainting, overlay, only masked, img2img)" sh -c "$L batch samples/batch_generate.lua --params $T/inpaint.jsonl -o '$T/binp/%d.png' --batch-size 2 --progress off --manifest none -- $D/sd1 && $G --model $D/sd1 --seed 3 --init $T/folder.png --strength 0.5 --sampler euler_a -o $T/i2i_b.png && $L tests/models/same_pixels.lua $T/binp/1.png $T/inp.png $T/binp/2.png $T/inpo.png $T/binp/3.png $T/inpf.png $T/binp/4.png $T/i2i_b.png"
printf '%s\n' '{"seed": 3, "prompt": "a fox", "steps": 2, "size": "64x64", "init": "'$T/folder.png'", "mask": "'$T/nothing.png'"}' > "$T/inpaint_bad.jsonl"
fails "lumen batch: a mask that cannot be read fails the job, named" 1 "mask: .*nothing.png" sh -c "$L batch samples/batch_generate.lua --params $T/inpaint_bad.jsonl -o '$T/binpb/%d.png' --progress off --manifest none -- $D/sd1"
summary
