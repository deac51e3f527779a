#!/bin/sh
# tests/lua/diff_vae.sh - comparison sessions on a whole model, the
# SD-style VAE decoder of bench/gpu (docs/COMPARE.md "A worked session"):
#  1. PyTorch: tools/torch_dump.py dumps the PyTorch decoder of
#     bench/gpu/vae.py (seeded random weights, latent 1x4x8x8) and
#     tests/lua/vae_torch.lua holds Lumen's run of the same weights against
#     it with lm.diff {reference = dump}: every PyTorch layer paired, each
#     within f32 rounding; `lumen diff` pairs the two dumps the same way;
#     then a planted fault (LUMEN_TEST_FAULT) must be found by both at the
#     layer it is planted in.  Skipped when /usr/bin/python3
#     has no torch (Debian's python3-torch, in DEPS_PKGS).
#  2. Vulkan: bench/diff_vae.lua diffs the decoder (latent 4x4) CPU f32
#     against Vulkan f16 and checks its per-stage table.  Skipped without a
#     Vulkan device.
# Exits 77 when both parts are skipped.
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
PY=${PYTHON:-/usr/bin/python3}
pass=0 fail=0 skipped=0
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

count() {   # adds the "N passed, N failed" line of $1 (a log) to the totals
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$1" | tail -1)
  if [ -z "$line" ]; then echo "FAIL $2: no summary"; fail=$((fail + 1)); return; fi
  echo "$2: $line"
  pass=$((pass + $(echo "$line" | cut -d' ' -f1)))
  fail=$((fail + $(echo "$line" | cut -d' ' -f3)))
}

if [ -x "$PY" ] && "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
  if "$PY" - "$tmp" >"$tmp/py.log" 2>&1 <<'PYEOF'
import sys
sys.path[:0] = ["bench/gpu", "tools"]
import torch, vae, torch_dump
d = sys.argv[1]
m = vae.make()
vae.save_file({"decoder." + k: v.contiguous() for k, v in m.state_dict().items()}, d + "/w.safetensors")
z = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(1))
vae.save_file({"latent": z}, d + "/io.safetensors")
names = torch_dump.dump(m, (z,), d + "/torch.safetensors")
print("torch %s: %d tensors dumped" % (torch.__version__, len(names)))
PYEOF
  then
    cat "$tmp/py.log"
    "$BUILD/lumen" tests/lua/vae_torch.lua "$tmp/w.safetensors" "$tmp/io.safetensors" \
      "$tmp/torch.safetensors" "$tmp/lumen.safetensors" >"$tmp/lua.log" 2>&1
    cat "$tmp/lua.log"
    count "$tmp/lua.log" "Lumen against PyTorch, layer by layer"
    # lumen diff pairs the two dumps by layer: each PyTorch tensor with the
    # last Lumen node of its name scope (cross-framework f32: rtol = atol = 1e-4)
    "$BUILD/lumen" diff "$tmp/torch.safetensors" "$tmp/lumen.safetensors" --rtol 1e-4 --atol 1e-4 >"$tmp/cli.log" 2>&1
    rc=$?
    if [ $rc = 0 ] && grep -q '^ok: 84 tensors, 0 out of tolerance, 0 unpaired$' "$tmp/cli.log"; then
      echo "lumen diff torch lumen: $(tail -1 "$tmp/cli.log")"; pass=$((pass + 1))
    else
      echo "FAIL lumen diff torch lumen (exit $rc):"; tail -3 "$tmp/cli.log"; fail=$((fail + 1))
    fi
    # the same checks with a wrong op planted: they must fail, first at the
    # layer whose silu went wrong (the silu is in the ResNet block's scope)
    LUMEN_TEST_FAULT=silu:cpu "$BUILD/lumen" tests/lua/vae_torch.lua "$tmp/w.safetensors" \
      "$tmp/io.safetensors" "$tmp/torch.safetensors" "$tmp/fault.safetensors" >"$tmp/fault.log" 2>&1
    rc=$?
    if [ $rc != 0 ] && grep -q 'first: [0-9]* mid_block.resnets.0.conv1$' "$tmp/fault.log"; then
      echo "lm.diff finds a planted silu fault at mid_block.resnets.0.conv1"; pass=$((pass + 1))
    else
      echo "FAIL planted silu fault (exit $rc):"; tail -3 "$tmp/fault.log"; fail=$((fail + 1))
    fi
    "$BUILD/lumen" diff "$tmp/torch.safetensors" "$tmp/fault.safetensors" --rtol 1e-4 --atol 1e-4 >"$tmp/cli.log" 2>&1
    rc=$?
    if [ $rc = 1 ] && grep -q '^first difference: 0003.conv2d.mid_block.resnets.0.conv1$' "$tmp/cli.log"; then
      echo "lumen diff finds it too: $(grep '^first' "$tmp/cli.log")"; pass=$((pass + 1))
    else
      echo "FAIL lumen diff on the planted fault (exit $rc):"; tail -3 "$tmp/cli.log"; fail=$((fail + 1))
    fi
  else
    cat "$tmp/py.log"; echo "FAIL the PyTorch dump"; fail=$((fail + 1))
  fi
else
  echo "$PY has no torch (Debian's python3-torch): the PyTorch comparison skipped"
  skipped=$((skipped + 1))
fi

if LUMEN_DEVICE=vulkan "$BUILD/lumen" -e 'assert(tostring(lm.device()):match("vulkan"))' >/dev/null 2>&1; then
  "$BUILD/lumen" bench/diff_vae.lua 4 cpu vulkan:f16 check >"$tmp/vk.log" 2>&1
  cat "$tmp/vk.log"
  count "$tmp/vk.log" "VAE decoder CPU f32 against Vulkan f16"
else
  echo "no Vulkan device: the CPU f32 against Vulkan f16 session skipped"
  skipped=$((skipped + 1))
fi

if [ $skipped = 2 ]; then exit 77; fi
echo "$pass passed, $fail failed, $skipped skipped"
[ $fail = 0 ]
