#!/bin/sh
# tests/serve/run.sh - `lumen serve` end to end on the tiny random SD 1.x
# model of tests/ref/diffusion/sd1 (and the Z-Image one of tests/ref/dit)
# (CPU, f32), on free loopback ports:
# the openai npm package's images.generate (tests/serve/fetch.sh brings it at
# set-up; skipped, saying so, when it could not); curl in AUTOMATIC1111's
# shape (txt2img, img2img with init_images), each PNG's `parameters` chunk
# equal to info's infotexts and the bytes equal to `lumen generate`'s for the
# same settings; the listings, /progress and /interrupt; a bounded load test
# (50 concurrent clients behind a running job: the queue's bound answered
# 429, every accepted request answered; VmRSS over 500 more requests);
# hostile requests (malformed, deep and huge JSON, a 100 MB body, chunked
# too, '../', absolute and symlinked model names, bad sizes, steps, counts,
# an unknown sampler, clients sending a byte a second, a client leaving
# mid-generation), each answered and the server still serving; the bearer
# key; a non-loopback address refused without one; SIGTERM.  One line per
# check, then "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
export LUMEN_DEVICE=cpu
D=tests/ref/diffusion
L="$BUILD/lumen"
U="python3 tests/serve/util.py"
if [ ! -f "$D/sd1/model_index.json" ]; then
  echo "tests/ref/diffusion/sd1 absent: skipped"
  exit 77
fi
if ! command -v curl >/dev/null 2>&1; then
  echo "curl absent (apt-get install curl): skipped"
  exit 77
fi
T=$BUILD/test-serve
rm -rf "$T" && mkdir -p "$T/models" "$T/outside" "$T/tmp"
cp -r "$D/sd1" "$T/models/sd1"
cp -r "$D/sd1" "$T/outside/sd1"
[ -f tests/ref/dit/zimage/model_index.json ] && cp -r tests/ref/dit/zimage "$T/models/zimage"
ln -s "$(cd "$T/outside" && pwd)/sd1" "$T/models/escape"   # a symlink out of --models
ln -s /etc "$T/models/etc"
# under AddressSanitizer (make check) freed memory waits in its quarantine,
# which VmRSS would count as growth: none for the servers here
ASAN_KEEP="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0"
p=0 f=0 s=0
ok() { p=$((p + 1)); echo "ok   $1"; }
no() { f=$((f + 1)); echo "FAIL $1"; [ -f "$T/log" ] && sed 's/^/     /' "$T/log" | head -20; }
check() {  # check NAME COMMAND...: passes when the command succeeds
  name=$1; shift
  if "$@" >"$T/log" 2>&1; then ok "$name"; else no "$name"; fi
}
PIDS=""
cleanup() { for k in $PIDS; do kill "$k" 2>/dev/null; done; }
trap cleanup EXIT

# start NAME ARGS...: a server on a free port; sets PORT and PID
start() {
  name=$1; shift
  TMPDIR="$T/tmp" ASAN_OPTIONS="$ASAN_KEEP" "$L" serve --models "$T/models" --port 0 "$@" >"$T/$name.out" 2>"$T/$name.err" &
  PID=$!
  PIDS="$PIDS $PID"
  PORT=
  for _ in $(seq 1 300); do
    PORT=$(sed -n 's/^lumen serve: listening on http:.*:\([0-9][0-9]*\) .*/\1/p' "$T/$name.out" 2>/dev/null)
    [ -n "$PORT" ] && break
    kill -0 $PID 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$PORT" ]
}
# req METHOD PATH [curl args]: the status code; the body in $T/body
req() {
  m=$1; pth=$2; shift 2
  curl -s -o "$T/body" -w '%{http_code}' -X "$m" "$@" "http://127.0.0.1:$PORT$pth"
}
# expect NAME CODE PATTERN METHOD PATH [curl args]: the code, a JSON error naming PATTERN
expect() {
  name=$1; code=$2; pat=$3; shift 3
  got=$(req "$@")
  cp "$T/body" "$T/log" 2>/dev/null
  if [ "$got" != "$code" ]; then no "$name (HTTP $got, not $code)"
  elif [ "$code" -ge 400 ] && ! $U get "$T/body" error message >/dev/null 2>&1; then no "$name (not a JSON error)"
  elif ! grep -q -- "$pat" "$T/body"; then no "$name (no \"$pat\")"
  else ok "$name"; fi
}
alive() { check "... the server still serves" sh -c "test \"\$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$PORT/v1/models)\" = 200"; }

G="$L generate --steps 4 --size 64x64 -q --model $D/sd1"
if ! start main --queue 4 --read-timeout 3 --idle-timeout 2 --max-body 8M --max-size 512; then
  no "the server starts"; cat "$T/main.err"; echo "$p passed, $f failed"; exit 1
fi
ok "the server starts on a free loopback port ($PORT)"
MAIN=$PID

# ---- listings ----
expect "GET /v1/models lists the models, not the symlinks out" 200 '"id":"sd1"' GET /v1/models
check "... nor the link to /etc" sh -c "! grep -q escape $T/body && ! grep -q '\"etc\"' $T/body"
expect "GET /sdapi/v1/sd-models" 200 '"model_name":"sd1"' GET /sdapi/v1/sd-models
expect "GET /sdapi/v1/samplers: A1111's names" 200 '"name":"DPM++ 2M Karras"' GET /sdapi/v1/samplers
expect "GET /sdapi/v1/progress when idle" 200 '"progress":0' GET /sdapi/v1/progress
expect "GET /sdapi/v1/schedulers" 200 '"label":"Karras"' GET /sdapi/v1/schedulers
expect "GET /sdapi/v1/options: the default model" 200 '"sd_model_checkpoint":"sd1"' GET /sdapi/v1/options
expect "POST /sdapi/v1/options with an unknown model" 404 'no such model' POST /sdapi/v1/options -d '{"sd_model_checkpoint": "sd9"}'
expect "POST /sdapi/v1/options with ../" 400 'no absolute path' POST /sdapi/v1/options -d '{"sd_model_checkpoint": "../sd1"}'
expect "POST /sdapi/v1/options with sd1 (other options left alone)" 200 '{}' POST /sdapi/v1/options -d '{"sd_model_checkpoint": "sd1", "samples_format": "png"}'

# ---- the openai npm package ----
NM="$BUILD/node/node_modules"
if [ -f "$NM/openai/package.json" ] && command -v node >/dev/null 2>&1; then
  cat > "$T/client.cjs" <<'EOF'
const OpenAI = require('openai');
const fs = require('fs');
(async () => {
  const client = new OpenAI({ baseURL: process.argv[2], apiKey: process.argv[3], maxRetries: 0 });
  const r = await client.images.generate({ model: 'sd1', prompt: 'a red fox', n: 2, size: '64x64',
                                           response_format: 'b64_json', seed: 42, steps: 4 });
  r.data.forEach((d, i) => fs.writeFileSync(process.argv[4] + i + '.png', Buffer.from(d.b64_json, 'base64')));
  console.log(r.data.length + ' images');
})().catch(e => { console.error(String(e)); process.exit(1); });
EOF
  check "openai npm images.generate (n 2, 64x64, b64_json)" env NODE_PATH="$NM" node "$T/client.cjs" "http://127.0.0.1:$PORT/v1" unused "$T/oa"
  check "... the same bytes as lumen generate --batch-size 2" sh -c "$G 'a red fox' --seed 42 --batch-size 2 -o $T/gen_oa.png && cmp $T/oa0.png $T/gen_oa_0000.png && cmp $T/oa1.png $T/gen_oa_0001.png"
else
  echo "skip the openai npm client: $NM/openai absent (make serve-client, where the npm registry is reachable) or no node"
  s=$((s + 4))
fi

# ---- A1111's shape with curl ----
TXT='{"prompt": "a photo of an astronaut riding a horse", "negative_prompt": "blurry, low quality", "steps": 4, "cfg_scale": 7, "sampler_name": "Euler a", "seed": 7, "width": 64, "height": 64, "batch_size": 2, "n_iter": 2}'
expect "POST /sdapi/v1/txt2img (batch_size 2, n_iter 2)" 200 '"images"' POST /sdapi/v1/txt2img -d "$TXT"
cp "$T/body" "$T/txt.json"
check "... four images" sh -c "test \"\$($U pngs $T/txt.json $T/txt)\" = 4"
check "... each PNG's parameters equal info's infotexts" $U infotexts "$T/txt.json"
check "... infotexts[3] as lumen generate writes it (seed 10)" sh -c "test \"\$($U get $T/txt.json info infotexts 3)\" = 'a photo of an astronaut riding a horse
Negative prompt: blurry, low quality
Steps: 4, Sampler: Euler a, Schedule type: Normal, CFG scale: 7, Seed: 10, Size: 64x64, Model: sd1'"
check "... the same bytes as lumen generate (seeds 7..10)" sh -c "$G 'a photo of an astronaut riding a horse' --negative 'blurry, low quality' --sampler euler_a --seed 7 --batch-size 4 -o $T/gen_t.png && for i in 0 1 2 3; do cmp $T/txt\$i.png $T/gen_t_000\$i.png || exit 1; done"
B64=$(base64 -w0 "$T/txt0.png")
printf '{"prompt": "a horse", "init_images": ["%s"], "denoising_strength": 0.5, "sampler_name": "Euler a", "steps": 4, "seed": 3}' "$B64" > "$T/i2i.json"
expect "POST /sdapi/v1/img2img with init_images" 200 '"images"' POST /sdapi/v1/img2img --data-binary @"$T/i2i.json"
cp "$T/body" "$T/i2i_r.json"
check "... its parameters equal info's infotexts (Denoising strength: 0.5)" sh -c "$U infotexts $T/i2i_r.json && $U get $T/i2i_r.json info infotexts 0 | grep -q 'Denoising strength: 0.5'"
check "... the same bytes as lumen generate --init" sh -c "$U pngs $T/i2i_r.json $T/i2i >/dev/null && $G 'a horse' --init $T/txt0.png --strength 0.5 --sampler euler_a --seed 3 -o $T/gen_i.png && cmp $T/i2i0.png $T/gen_i.png"
printf '{"prompt": "a horse", "init_images": ["data:image/png;base64,%s"], "denoising_strength": 0.5, "sampler_name": "Euler a", "steps": 4, "seed": 3, "width": 64, "height": 64}' "$B64" > "$T/i2i_url.json"
expect "... a data: URL, width and height its size" 200 '"images"' POST /sdapi/v1/img2img --data-binary @"$T/i2i_url.json"
check "... the same bytes" sh -c "$U pngs $T/body $T/i2u >/dev/null && cmp $T/i2u0.png $T/gen_i.png"
expect "sampler_name DPM++ 2M with scheduler Karras" 200 'Schedule type: Karras' POST /sdapi/v1/txt2img -d '{"prompt": "a fox", "steps": 2, "seed": 1, "width": 16, "height": 16, "sampler_name": "DPM++ 2M", "scheduler": "Karras"}'
expect "override_settings: sd_model_checkpoint and Clip skip" 200 'Clip skip: 2' POST /sdapi/v1/txt2img -d '{"prompt": "a fox", "steps": 2, "seed": 1, "width": 16, "height": 16, "override_settings": {"sd_model_checkpoint": "sd1", "CLIP_stop_at_last_layers": 2}}'

expect "a generation longer than --idle-timeout 2 (150 steps) is answered" 200 '"images"' POST /sdapi/v1/txt2img -d '{"prompt": "a long job", "steps": 150, "seed": 2, "width": 64, "height": 64}'

# ---- progress and interrupt ----
check "/progress during a job (fraction, ETA, a 64x64 preview); /interrupt stops it" sh -c "$U progress $PORT | tee /dev/stderr | grep -q 'steps 150 current_image a 64x64 PNG; interrupt 200; the job 409: interrupted'"
check "a job polled all along (previews decoded between its steps)" sh -c "$U polled $PORT $T/polled.json | tee /dev/stderr | grep -q '[1-9][0-9]* polls saw a preview; the job 200'"
check "... the same bytes as lumen generate" sh -c "$U pngs $T/polled.json $T/polled >/dev/null && $L generate 'a polled job' --steps 30 --seed 5 --size 64x64 -q --model $D/sd1 -o $T/gen_polled.png && cmp $T/polled0.png $T/gen_polled.png"

# ---- load: 50 concurrent behind a running job, --queue 4 ----
check "50 concurrent clients: 4 queued and answered, 46 answered 429" sh -c "$U burst $PORT 50 | tee /dev/stderr | grep -q 'long 409; 50 answered: 4 x 200, 46 x 429, others \[\]'"
$U many "$PORT" 500 "$MAIN" > "$T/many" 2>&1
cat "$T/many"
check "500 small requests, all answered 200" grep -q 'failed \[\]' "$T/many"
# measured: +0 kB over the 500 after 100 to warm up; with each request's job
# left unfreed (its 16x16 PNG's base64 and infotext, about 2.8 kB) +1420 kB
if ldd "$L" 2>/dev/null | grep -q libasan; then
  # AddressSanitizer keeps a record per thread (one per connection here):
  # +2.2 MB over the 500; its LeakSanitizer checks the exit below instead
  echo "skip the VmRSS bound under AddressSanitizer (LeakSanitizer checks leaks at the exit)"
  s=$((s + 1))
else
  check "... VmRSS flat (grew under 1 MB)" sh -c "d=\$(sed -n 's/.*(\([-+][0-9]*\) kB).*/\1/p' $T/many); test \$d -lt 1024"
fi

# ---- hostile requests ----
expect "malformed JSON" 400 'not JSON' POST /sdapi/v1/txt2img -d '{"prompt": "a fox",'
expect "not an object" 400 'JSON object' POST /v1/images/generations -d '[1, 2]'
expect "an empty body" 400 'empty' POST /sdapi/v1/txt2img
python3 -c "print('[' * 200000 + ']' * 200000)" > "$T/deep.json"
expect "JSON nested 200000 deep" 400 'not JSON' POST /sdapi/v1/txt2img --data-binary @"$T/deep.json"
python3 -c "import json; print(json.dumps({'prompt': 'x' * (9 << 20)}))" > "$T/huge.json"
expect "a 9 MB JSON over --max-body 8M" 413 'max-body' POST /sdapi/v1/txt2img --data-binary @"$T/huge.json"
head -c 104857600 /dev/zero > "$T/100mb"
expect "a 100 MB body" 413 'max-body' POST /sdapi/v1/txt2img --data-binary @"$T/100mb"
expect "a 100 MB chunked body (no Content-Length)" 413 'max-body' POST /sdapi/v1/txt2img -H 'Transfer-Encoding: chunked' --data-binary @"$T/100mb"
rm -f "$T/100mb" "$T/huge.json"
alive
expect "model ../sd1" 400 'no .\.\.' POST /v1/images/generations -d '{"prompt": "x", "model": "../sd1", "size": "16x16"}'
expect "an absolute model path" 400 'no absolute path' POST /sdapi/v1/txt2img -d '{"prompt": "x", "model": "/etc/passwd"}'
expect "a symlink out of --models" 403 'leaves the --models folder' POST /sdapi/v1/txt2img -d '{"prompt": "x", "model": "escape"}'
expect "a symlink to /etc" 403 'leaves the --models folder' POST /sdapi/v1/txt2img -d '{"prompt": "x", "override_settings": {"sd_model_checkpoint": "etc"}}'
expect "an unknown model, the known listed" 404 'no such model.*sd1' POST /v1/images/generations -d '{"prompt": "x", "model": "sd9"}'
expect "a negative width" 400 'width -64: expected a whole number from 8 to 512' POST /sdapi/v1/txt2img -d '{"prompt": "x", "width": -64, "height": 64}'
expect "a huge size" 400 'at most 512 pixels' POST /v1/images/generations -d '{"prompt": "x", "size": "4096x64"}'
expect "a size past any model's" 400 'from 8 to 65536' POST /v1/images/generations -d '{"prompt": "x", "size": "100000x64"}'
expect "a size not divisible by 8" 400 'divisible by 8' POST /v1/images/generations -d '{"prompt": "x", "size": "60x64"}'
expect "size junk" 400 'size ..64x64junk' POST /v1/images/generations -d '{"prompt": "x", "size": "64x64junk"}'
expect "negative steps" 400 'steps -1: expected a whole number from 1 to 150' POST /sdapi/v1/txt2img -d '{"prompt": "x", "steps": -1}'
expect "huge steps" 400 'steps 1e+300' POST /sdapi/v1/txt2img -d '{"prompt": "x", "steps": 1e300}'
expect "fractional steps" 400 'steps 2.5' POST /sdapi/v1/txt2img -d '{"prompt": "x", "steps": 2.5}'
expect "steps as a string" 400 'steps ..4..: expected' POST /sdapi/v1/txt2img -d '{"prompt": "x", "steps": "4"}'
expect "n 0" 400 'n 0: expected a whole number from 1 to 16' POST /v1/images/generations -d '{"prompt": "x", "n": 0}'
expect "n 1000" 400 'n 1000' POST /v1/images/generations -d '{"prompt": "x", "n": 1000}'
expect "batch_size 8 x n_iter 8 past --max-images" 400 'max-images' POST /sdapi/v1/txt2img -d '{"prompt": "x", "batch_size": 8, "n_iter": 8}'
expect "a NaN-like cfg_scale" 400 'cfg_scale' POST /sdapi/v1/txt2img -d '{"prompt": "x", "cfg_scale": -1e400}'
expect "an unknown sampler, the known listed" 400 'unknown sampler ..dpm++3m.*Euler a' POST /sdapi/v1/txt2img -d '{"prompt": "x", "sampler_name": "dpm++3m"}'
expect "an unknown scheduler" 400 'with scheduler ..Beta' POST /sdapi/v1/txt2img -d '{"prompt": "x", "sampler_name": "Euler", "scheduler": "Beta"}'
expect "a seed past 2^32" 400 'seed 4294967296' POST /sdapi/v1/txt2img -d '{"prompt": "x", "seed": 4294967296}'
expect "init_images not base64" 400 'not base64' POST /sdapi/v1/img2img -d '{"prompt": "x", "init_images": ["!!!"]}'
expect "init_images not a PNG" 400 'init_images\[0\]' POST /sdapi/v1/img2img -d '{"prompt": "x", "init_images": ["aGVsbG8gd29ybGQ="]}'
expect "img2img strength 0" 400 'denoising_strength' POST /sdapi/v1/img2img --data-binary "{\"prompt\": \"x\", \"init_images\": [\"$B64\"], \"denoising_strength\": 0}"
expect "img2img at a width other than the init's: resized to it (A1111's Just resize)" 200 'Size: 32x32' POST /sdapi/v1/img2img --data-binary "{\"prompt\": \"x\", \"init_images\": [\"$B64\"], \"width\": 32, \"height\": 32, \"steps\": 4, \"seed\": 5, \"sampler_name\": \"Euler\"}"
check "... the same bytes as lumen generate --init (64x64) --size 32x32" sh -c "$U pngs $T/body $T/i32 >/dev/null && $L generate x --model $D/sd1 --steps 4 -q --init $T/txt0.png --size 32x32 --sampler euler --seed 5 -o $T/gen_i32.png && cmp $T/i320.png $T/gen_i32.png"
expect "output_format jpeg" 400 'only png' POST /v1/images/generations -d '{"prompt": "x", "output_format": "jpeg"}'
expect "sampler_index not a string" 400 'sampler_index must be a string' POST /sdapi/v1/txt2img -d '{"prompt": "x", "sampler_index": 3}'
expect "enable_hr true (not served) refused, not ignored" 400 'enable_hr: not served' POST /sdapi/v1/txt2img -d '{"prompt": "x", "enable_hr": true}'
# inpainting (models/sd_inpaint.h): A1111's mask, mask_blur (default 4), pasted back as A1111 does
printf 'local m = lm.zeros({1, 64, 64})\nm[{{}, {16, 48}, {8, 40}}] = 1\nlm.save("%s/mask.png", m)\nlm.save("%s/mask32.png", lm.zeros({1, 32, 32}))\n' "$T" "$T" > "$T/mask.lua"
"$L" "$T/mask.lua"
MB64=$(base64 -w0 "$T/mask.png")
printf '{"prompt": "a horse", "init_images": ["%s"], "mask": "%s", "denoising_strength": 0.75, "sampler_name": "Euler a", "steps": 4, "seed": 3, "inpaint_full_res": false, "inpainting_fill": 1}' "$B64" "$MB64" > "$T/inp.json"
expect "img2img with a mask (inpainting)" 200 'Mask blur: 4' POST /sdapi/v1/img2img --data-binary @"$T/inp.json"
check "... the same bytes as lumen generate --mask --mask-blur 4 --mask-overlay" sh -c "$U pngs $T/body $T/inp >/dev/null && $G 'a horse' --init $T/txt0.png --mask $T/mask.png --mask-blur 4 --mask-overlay --strength 0.75 --sampler euler_a --seed 3 -o $T/gen_m.png && cmp $T/inp0.png $T/gen_m.png"
expect "a mask in txt2img refused" 400 'mask is img2img' POST /sdapi/v1/txt2img --data-binary "{\"prompt\": \"x\", \"mask\": \"$MB64\"}"
printf '{"prompt": "a horse", "init_images": ["%s"], "mask": "%s", "denoising_strength": 0.75, "sampler_name": "Euler a", "steps": 4, "seed": 3, "inpaint_full_res": true, "inpaint_full_res_padding": 4}' "$B64" "$MB64" > "$T/inpf.json"
expect "inpaint_full_res true (Only masked) with its padding" 200 'Inpaint area: Only masked, Masked area padding: 4' POST /sdapi/v1/img2img --data-binary @"$T/inpf.json"
check "... the same bytes as lumen generate --inpaint-full-res --inpaint-padding 4" sh -c "$U pngs $T/body $T/inpf >/dev/null && $G 'a horse' --init $T/txt0.png --mask $T/mask.png --mask-blur 4 --inpaint-full-res --inpaint-padding 4 --strength 0.75 --sampler euler_a --seed 3 -o $T/gen_f.png && cmp $T/inpf0.png $T/gen_f.png"
# absent, inpaint_full_res is A1111's API default, true, with its padding's
# default 0 (StableDiffusionProcessingImg2Img's; before, an absent one was the whole picture)
printf '{"prompt": "a horse", "init_images": ["%s"], "mask": "%s", "denoising_strength": 0.75, "sampler_name": "Euler a", "steps": 4, "seed": 3}' "$B64" "$MB64" > "$T/inpd.json"
expect "inpaint_full_res absent: A1111's API default, Only masked, padding 0" 200 'Inpaint area: Only masked, Masked area padding: 0' POST /sdapi/v1/img2img --data-binary @"$T/inpd.json"
check "... the same bytes as lumen generate --inpaint-full-res --inpaint-padding 0" sh -c "$U pngs $T/body $T/inpd >/dev/null && $G 'a horse' --init $T/txt0.png --mask $T/mask.png --mask-blur 4 --inpaint-full-res --inpaint-padding 0 --strength 0.75 --sampler euler_a --seed 3 -o $T/gen_d.png && cmp $T/inpd0.png $T/gen_d.png"
sed 's/"seed": 3}/"seed": 3, "inpaint_full_res": 0}/' "$T/inpd.json" > "$T/inpn.json"
expect "inpaint_full_res 0 (a bool to pydantic): the whole picture" 200 'Mask blur: 4' POST /sdapi/v1/img2img --data-binary @"$T/inpn.json"
check "... the bytes of inpaint_full_res false" sh -c "! grep -q 'Only masked' $T/body && $U pngs $T/body $T/inpz >/dev/null && cmp $T/inpz0.png $T/inp0.png"
expect "inpaint_full_res \"yes\" refused, not read as false" 400 'inpaint_full_res must be true or false' POST /sdapi/v1/img2img --data-binary "{\"prompt\": \"x\", \"init_images\": [\"$B64\"], \"mask\": \"$MB64\", \"inpaint_full_res\": \"yes\"}"
expect "inpainting_fill 0 (fill) refused" 400 'inpainting_fill' POST /sdapi/v1/img2img --data-binary "{\"prompt\": \"x\", \"init_images\": [\"$B64\"], \"mask\": \"$MB64\", \"inpainting_fill\": 0}"
expect "a mask of another size: resized to the init image's" 200 'Mask blur: 4' POST /sdapi/v1/img2img --data-binary "{\"prompt\": \"x\", \"init_images\": [\"$B64\"], \"mask\": \"$(base64 -w0 "$T/mask32.png")\", \"inpaint_full_res\": false}"
expect "their off values pass" 200 '"images"' POST /sdapi/v1/txt2img -d '{"prompt": "x", "steps": 1, "width": 16, "height": 16, "enable_hr": false, "restore_faces": false, "tiling": false, "subseed_strength": 0, "alwayson_scripts": {}, "script_name": ""}'
expect "response_format url" 400 'only b64_json' POST /v1/images/generations -d '{"prompt": "x", "response_format": "url"}'
expect "no prompt (OpenAI)" 400 'prompt is required' POST /v1/images/generations -d '{"n": 1}'
expect "an unknown path" 404 'no such endpoint' GET /sdapi/v1/upscalers
expect "a wrong method" 405 'not allowed' GET /sdapi/v1/txt2img
alive
check "a client sending its body a byte a second is closed (--read-timeout 3)" sh -c "$U slow $PORT body 30 | tee /dev/stderr | grep -q 'closed by the server'"
check "... its headers a byte a second too" sh -c "$U slow $PORT headers 30 | tee /dev/stderr | grep -q 'closed by the server'"
check "... and another client is served meanwhile" sh -c "$U slow $PORT body 30 > $T/slow3 & s=\$!; sleep 1; c=\$(curl -s -o /dev/null -w '%{http_code}' -d '{\"prompt\": \"x\", \"steps\": 1, \"width\": 16, \"height\": 16}' http://127.0.0.1:$PORT/sdapi/v1/txt2img); wait \$s; test \$c = 200 && grep -q closed $T/slow3"
check "a client leaving mid-generation stops its job" sh -c "$U leave $PORT | tee /dev/stderr | grep -q 'the job stopped at step'"
check "... named in the log" grep -q 'a client left; its job stops' "$T/main.err"
check "... the next request is served" sh -c "test \"\$(curl -s -o /dev/null -w '%{http_code}' -d '{\"prompt\": \"x\", \"steps\": 1, \"width\": 16, \"height\": 16}' http://127.0.0.1:$PORT/sdapi/v1/txt2img)\" = 200"
if [ -d "$T/models/zimage" ]; then
  # another model: the resident pipeline is replaced; a DiT family (no preview)
  expect "Z-Image (a DiT family) by model name" 200 'Model: zimage' POST /sdapi/v1/txt2img -d '{"model": "zimage", "prompt": "a fox", "seed": 3, "steps": 3, "width": 32, "height": 32}'
  check "... the same bytes as lumen generate" sh -c "$U pngs $T/body $T/zi >/dev/null && $L generate 'a fox' --model tests/ref/dit/zimage --seed 3 --steps 3 --size 32x32 -q -o $T/gen_zi.png && cmp $T/zi0.png $T/gen_zi.png"
  expect "... and sd1 again" 200 'Model: sd1' POST /sdapi/v1/txt2img -d '{"model": "sd1", "prompt": "x", "steps": 1, "width": 16, "height": 16}'
fi
check "the server is still running" kill -0 "$MAIN"

# ---- LoRA tags: <lora:NAME:W> loaded from --lora-dir for the request, then unloaded ----
Q=lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q
mkdir -p "$T/loras" "$T/elsewhere"
"$L" -e "lm.save('$T/loras/fox.safetensors', {['$Q.lora_down.weight'] = lm.randn({4, 32}, {seed = 1}),
  ['$Q.lora_up.weight'] = lm.randn({32, 4}, {seed = 2}), ['$Q.alpha'] = lm.tensor(4.0)})"
cp "$T/loras/fox.safetensors" "$T/elsewhere/out.safetensors"
ln -s "$(cd "$T/elsewhere" && pwd)/out.safetensors" "$T/loras/link.safetensors"
LT='{"prompt": "a photo of an astronaut riding a horse <lora:fox:0.8>", "negative_prompt": "blurry, low quality", "steps": 4, "width": 64, "height": 64, "seed": 42}'
expect "a <lora:> tag on a server without --lora-dir: refused" 400 'no LoRA folder' POST /sdapi/v1/txt2img -d "$LT"
if start lora --lora-dir "$T/loras"; then ok "a server with --lora-dir starts"; else no "a server with --lora-dir starts"; fi
LORAPID=$PID
expect "<lora:fox:0.8> with --lora-dir" 200 'Lora hashes' POST /sdapi/v1/txt2img -d "$LT"
check "... the same bytes as lumen generate --lora-dir" sh -c "$U pngs $T/body $T/lo >/dev/null && $G 'a photo of an astronaut riding a horse <lora:fox:0.8>' --negative 'blurry, low quality' --seed 42 --lora-dir $T/loras -o $T/gen_lo.png && cmp $T/lo0.png $T/gen_lo.png"
expect "... then the prompt without it" 200 '"images"' POST /sdapi/v1/txt2img -d '{"prompt": "a photo of an astronaut riding a horse", "negative_prompt": "blurry, low quality", "steps": 4, "width": 64, "height": 64, "seed": 42}'
check "... the base weights back: lumen generate's bytes without a LoRA" sh -c "$U pngs $T/body $T/nl >/dev/null && $G 'a photo of an astronaut riding a horse' --negative 'blurry, low quality' --seed 42 -o $T/gen_nl.png && cmp $T/nl0.png $T/gen_nl.png"
expect "<lora:../fox> refused" 400 'without a path' POST /sdapi/v1/txt2img -d '{"prompt": "x <lora:../fox:1>", "steps": 1, "width": 16, "height": 16}'
expect "<lora:nope> not found" 404 'no nope.safetensors' POST /sdapi/v1/txt2img -d '{"prompt": "x <lora:nope:1>", "steps": 1, "width": 16, "height": 16}'
expect "<lora:link>: a symbolic link out of the folder refused" 400 'leaves the LoRA folder' POST /sdapi/v1/txt2img -d '{"prompt": "x <lora:link:1>", "steps": 1, "width": 16, "height": 16}'
expect "<lora:fox:abc>: a weight that is no number" 400 'not a number' POST /sdapi/v1/txt2img -d '{"prompt": "x <lora:fox:abc>", "steps": 1, "width": 16, "height": 16}'
alive
kill "$LORAPID" 2>/dev/null; wait "$LORAPID" 2>/dev/null

# ---- SIGTERM ----
kill -TERM "$MAIN"
wait "$MAIN"; rc=$?
check "SIGTERM stops it cleanly (exit 0, 'stopped')" sh -c "test $rc = 0 && grep -q 'lumen serve: stopped' $T/main.err"
check "... its temporary folder removed" sh -c "test -z \"\$(ls -A $T/tmp)\""

# ---- the bearer key; addresses beyond loopback ----
if start key --api-key sekrit; then ok "a server with --api-key starts"; else no "a server with --api-key starts"; fi
KEYPID=$PID
expect "no key: 401" 401 'bearer key is required' GET /v1/models
expect "a wrong key: 401" 401 'bearer key is required' GET /v1/models -H 'Authorization: Bearer sekrib'
expect "the key: 200" 200 '"sd1"' GET /v1/models -H 'Authorization: Bearer sekrit'
expect "... a generation without it: 401" 401 'bearer key' POST /sdapi/v1/txt2img -d '{"prompt": "x"}'
if [ -f "$NM/openai/package.json" ] && command -v node >/dev/null 2>&1; then
  check "openai npm client with the key" env NODE_PATH="$NM" node "$T/client.cjs" "http://127.0.0.1:$PORT/v1" sekrit "$T/oak"
  check "... the same bytes" cmp "$T/oak0.png" "$T/oa0.png"
fi
kill -INT $KEYPID; wait $KEYPID; rc=$?
check "SIGINT stops it cleanly (exit 0)" test $rc = 0
"$L" serve --models "$T/models" --host 0.0.0.0 --port 0 >"$T/start.log" 2>&1; rc=$?
check "0.0.0.0 without a key is refused (exit 2, naming --api-key)" sh -c "test $rc = 2 && grep -q 'beyond loopback: give --api-key' $T/start.log"
"$L" serve --models "$T/nothing" >"$T/start.log" 2>&1; rc=$?
check "a missing --models folder (exit 2)" sh -c "test $rc = 2 && grep -q 'not a folder' $T/start.log"
"$L" serve --models "$T/models" --model ../sd1 >"$T/start.log" 2>&1; rc=$?
check "--model ../sd1 refused at start (exit 2)" sh -c "test $rc = 2 && grep -q 'no absolute path' $T/start.log"

"$L" serve --models "$T/models" --bogus >"$T/start.log" 2>&1; rc=$?
check "an unknown option (exit 2)" sh -c "test $rc = 2 && grep -q 'unknown option --bogus' $T/start.log"
"$L" serve --models "$T/models" --dtype f64 >"$T/start.log" 2>&1; rc=$?
check "--dtype f64 refused (exit 2)" sh -c "test $rc = 2 && grep -q 'f32, f16 or bf16' $T/start.log"
if [ $s = 0 ]; then echo "$p passed, $f failed"; else echo "$p passed, $f failed, $s skipped"; fi
[ $f = 0 ]
