#!/bin/sh
# spirv.sh - the SPIR-V file (lumen-spirv.bin) is found where programs are
# run from (build/, build/tests/, an installed bin/ with ../share/lumen/,
# lumen.so under a stock lua5.4 from another folder), and a missing,
# damaged or foreign file means no Vulkan device with a message naming it,
# while the CPU keeps working (backends/vulkan/spirv.c, device.c); and
# LUMEN_VK_STATS=1 keeps the device working.
# Exits 77 (skipped) when the build has no Vulkan or no Vulkan device runs.
BUILD=${BUILD:-build}
pass=0 fail=0
top=$(pwd)
lumen="$top/$BUILD/lumen"
pack="$top/$BUILD/lumen-spirv.bin"
if [ ! -f "$pack" ] || [ ! -x "$lumen" ]; then
    echo "spirv.sh: no Vulkan build ($pack); skipped"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
code='print(lm.ones{2}+1)'

# where PROGRAM [VAR=VALUE...]: the device its tensor landed on (stderr kept in $tmp/err)
where() {
    prog=$1
    shift
    env "$@" LUMEN_DEVICE=vulkan "$prog" -e "$code" 2>"$tmp/err" | sed -n 's/^<tensor f32 \[2\] \(.*\)>$/\1/p'
}
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; sed 's/^/    /' "$tmp/err"; }

if [ "$(where "$lumen")" != vulkan:0 ]; then
    echo "spirv.sh: no Vulkan device for $lumen ($(cat "$tmp/err")); skipped"
    exit 77
fi

# build/tests/ finds build/lumen-spirv.bin (its parent)
mkdir -p "$tmp/b/tests"
cp "$lumen" "$tmp/b/tests/lumen"
cp "$pack" "$tmp/b/lumen-spirv.bin"
[ "$(where "$tmp/b/tests/lumen")" = vulkan:0 ] && ok || bad "a program one folder below the file"

# an installed layout: bin/lumen and share/lumen/lumen-spirv.bin
mkdir -p "$tmp/i/bin" "$tmp/i/share/lumen"
cp "$lumen" "$tmp/i/bin/lumen"
cp "$pack" "$tmp/i/share/lumen/lumen-spirv.bin"
[ "$(where "$tmp/i/bin/lumen")" = vulkan:0 ] && ok || bad "bin/ with ../share/lumen/"

# lumen.so under a stock lua5.4, run from another folder
if command -v lua5.4 >/dev/null && [ -f "$top/$BUILD/lumen.so" ]; then
    # a sanitizer build of lumen.so needs the ASan runtime loaded before lua5.4
    preload=
    ldd "$top/$BUILD/lumen.so" 2>/dev/null | grep -q libasan && preload=$(${CC:-cc} -print-file-name=libasan.so)
    got=$(cd "$tmp" && LUMEN_DEVICE=vulkan env ${preload:+LD_PRELOAD=$preload} lua5.4 -e "package.cpath='$top/$BUILD/?.so;'..package.cpath
        local lm = require 'lumen'; print(lm.ones{2}+1)" 2>"$tmp/err" |
        sed -n 's/^<tensor f32 \[2\] \(.*\)>$/\1/p')
    [ "$got" = vulkan:0 ] && ok || bad "lumen.so under lua5.4"
fi

# a program alone in a folder: the CPU, and a message naming where it looked
mkdir -p "$tmp/alone"
cp "$lumen" "$tmp/alone/lumen"
got=$(where "$tmp/alone/lumen")
if [ "$got" = cpu ] && grep -q "no usable SPIR-V file.*$tmp/alone/lumen-spirv.bin (not there)" "$tmp/err"; then
    ok
else
    bad "no file: got '$got'"
fi

# LUMEN_SPIRV names the file; a missing one is not replaced by another
got=$(where "$lumen" LUMEN_SPIRV="$tmp/none.bin")
[ "$got" = cpu ] && grep -q "$tmp/none.bin (not there)" "$tmp/err" && ok || bad "LUMEN_SPIRV missing: got '$got'"
got=$(where "$lumen" LUMEN_SPIRV="$pack")
[ "$got" = vulkan:0 ] && ok || bad "LUMEN_SPIRV=$pack: got '$got'"

# a damaged file: cut short, or not ours at all
head -c 1000 "$pack" >"$tmp/short.bin"
got=$(where "$lumen" LUMEN_SPIRV="$tmp/short.bin")
[ "$got" = cpu ] && grep -q "short.bin (damaged" "$tmp/err" && ok || bad "a file cut short: got '$got'"
printf 'not spirv' >"$tmp/junk.bin"
got=$(where "$lumen" LUMEN_SPIRV="$tmp/junk.bin")
[ "$got" = cpu ] && grep -q "junk.bin (not a Lumen SPIR-V file)" "$tmp/err" && ok || bad "junk: got '$got'"

# a file from another build (another id): refused
cp "$pack" "$tmp/other.bin"
printf 'XXXXXXXX' | dd of="$tmp/other.bin" bs=1 seek=8 conv=notrunc 2>/dev/null
got=$(where "$lumen" LUMEN_SPIRV="$tmp/other.bin")
[ "$got" = cpu ] && grep -q "other.bin (from another build" "$tmp/err" && ok || bad "another build's file: got '$got'"

# LUMEN_VK_STATS=1 (device.c, pipeline.c): the device still computes, and
# says once that it has no pipeline statistics or prints a line per pipeline
got=$(where "$lumen" LUMEN_VK_STATS=1)
nnone=$(grep -c "LUMEN_VK_STATS: .* has no pipeline statistics" "$tmp/err")
nstat=$(grep -c "^lumen: vulkan:0 pipeline [a-z_0-9]*.*: " "$tmp/err")
if [ "$got" = vulkan:0 ] && { [ "$nnone" = 1 ] || { [ "$nnone" = 0 ] && [ "$nstat" -ge 1 ]; }; }; then
    ok
else
    bad "LUMEN_VK_STATS=1: got '$got', $nnone 'no statistics' lines, $nstat pipeline lines"
fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
