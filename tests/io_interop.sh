#!/bin/sh
# tests/io_interop.sh - files written by Lumen (build/tests/io_tool) read by
# PIL, numpy and a hand-written safetensors reader; then `lumen compare` and
# `lumen inspect` exit codes, when build/lumen exists.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh   # BUILD, p and f, relay, summary
dir=$(mktemp -d /tmp/lumen-interop.XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
if "$BUILD/tests/io_tool" write "$dir"; then p=$((p + 1)); else echo "FAIL: io_tool write"; f=$((f + 1)); fi
relay /usr/bin/python3 tests/ref/check_io_interop.py "$dir"

expect_rc() {   # expected-status description command...
  want=$1; what=$2; shift 2
  "$@" >"$dir/out.txt" 2>&1; rc=$?
  if [ "$rc" = "$want" ]; then p=$((p + 1)); else
    echo "FAIL: $what: exit $rc, expected $want"; cat "$dir/out.txt"; f=$((f + 1)); fi
}
F=tests/ref/fixtures/io
if [ -x "$BUILD/lumen" ]; then
  L="$BUILD/lumen"
  expect_rc 0 "compare a file with itself" "$L" compare $F/torch_dump.npz $F/torch_dump.npz
  expect_rc 0 "compare npz member with npy" "$L" compare $F/torch_dump.npz $F/torch_y.npy --only y
  expect_rc 0 "compare across formats" "$L" compare "$dir/rt.npz" "$dir/rt.safetensors" --only t_f
  expect_rc 1 "compare bf16 against f32 at f32 tolerance" "$L" compare $F/st_torch_w_bf16.npy $F/st_torch_w.npy --rtol 1e-6 --atol 0
  expect_rc 0 "compare bf16 against f32 at bf16 tolerance" "$L" compare $F/st_torch_w_bf16.npy $F/st_torch_w.npy --rtol 1e-2 --atol 1e-3
  expect_rc 1 "compare different sets" "$L" compare $F/npz_stored.npz $F/torch_dump.npz
  expect_rc 2 "compare a malformed file" "$L" compare $F/bad_st_overlap.safetensors $F/st_all.safetensors
  expect_rc 2 "compare usage" "$L" compare onlyone
  expect_rc 0 "inspect --stats" "$L" inspect $F/st_all.safetensors --stats
  if grep -q "metadata format = pt" "$dir/out.txt" && grep -q "^u8 " "$dir/out.txt"; then p=$((p + 1)); else
    echo "FAIL: inspect output"; cat "$dir/out.txt"; f=$((f + 1)); fi
else
  echo "note: $BUILD/lumen not built: command-line checks skipped"
fi
summary
