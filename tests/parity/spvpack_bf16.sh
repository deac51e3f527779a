#!/bin/sh
# spvpack_bf16.sh - spvpack --bf16 (backends/vulkan/tools/spvpack.c), the
# rewrite that gives glslang 15's modules bfloat16 cooperative matrices:
# tests/parity/bf16_rules.comp compiled in each variant must be rewritten
# (OK, COOP) with the type, capabilities and extension SPV_KHR_bfloat16
# asks for (read back from the words), or refused naming what (ARITH, CMP,
# EXT, INEXACT).  Exits 77 (skipped) without glslang 15 or the packer.
BUILD=${BUILD:-build}
pack=$BUILD/gen/spvpack
glslang=$(sed -n 's/^GLSLANG15 := //p' "$BUILD/tools/glslang.mk" 2>/dev/null)
if [ ! -x "$pack" ] || [ -z "$glslang" ] || [ ! -x "$glslang" ]; then
    echo "spvpack_bf16.sh: no glslang 15 or no $pack; skipped"
    exit 77
fi
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }

# the module's instructions as "opcode operand..." lines (words in decimal)
words() { od -An -v -tu4 -w4 "$1" | awk 'NR > 5 { w[n++] = $1 } END {
    for (i = 0; i < n; ) { len = int(w[i] / 65536); op = w[i] % 65536; s = op
        for (k = 1; k < len; k++) s = s " " w[i + k]; print s; if (len < 1) break; i += len } }'; }

compile() {
    "$glslang" -V --target-env vulkan1.2 -S comp --quiet -D"$1" -o "$tmp/$1.spv" tests/parity/bf16_rules.comp \
        >"$tmp/$1.glslang" 2>&1 || { bad "$1: glslang: $(head -3 "$tmp/$1.glslang")"; return 1; }
}

for v in OK COOP; do
    compile $v || continue
    if ! "$pack" --bf16 "$tmp/$v.spv" "$tmp/$v.bf.spv" 2>"$tmp/$v.err"; then
        bad "$v: refused: $(cat "$tmp/$v.err")"
        continue
    fi
    words "$tmp/$v.bf.spv" >"$tmp/$v.txt"
    # OpTypeFloat 16 with encoding 0 (BFloat16KHR), none without
    grep -Eq '^22 [0-9]+ 16 0$' "$tmp/$v.txt" && ok || bad "$v: no OpTypeFloat 16 BFloat16KHR"
    grep -Eq '^22 [0-9]+ 16$' "$tmp/$v.txt" && bad "$v: an IEEE 16-bit float is left" || ok
    grep -q '^17 5116$' "$tmp/$v.txt" && ok || bad "$v: no OpCapability BFloat16TypeKHR"
    grep -q '^17 9$' "$tmp/$v.txt" && bad "$v: OpCapability Float16 is left" || ok
    # "SPV_KHR_bfloat16" as five little-endian words
    grep -q '^10 1599492179 1599227979 1869375074 909210721 0$' "$tmp/$v.txt" && ok ||
        bad "$v: no OpExtension SPV_KHR_bfloat16"
    if [ $v = COOP ]; then
        grep -q '^17 5118$' "$tmp/$v.txt" && ok || bad "$v: no OpCapability BFloat16CooperativeMatrixKHR"
    else
        grep -q '^17 5118$' "$tmp/$v.txt" && bad "$v: BFloat16CooperativeMatrixKHR without cooperative matrices" || ok
    fi
    # the constant -3.0: f16 0xc200 becomes bf16 0xc040
    grep -Eq '^43 [0-9]+ [0-9]+ 49216$' "$tmp/$v.txt" && ok || bad "$v: the constant -3.0 not re-encoded (0xc040)"
done

for v in ARITH:computes CMP:computes EXT:computes INEXACT:'is not a bfloat16 value'; do
    name=${v%%:*} want=${v#*:}
    compile $name || continue
    if "$pack" --bf16 "$tmp/$name.spv" "$tmp/$name.bf.spv" 2>"$tmp/$name.err"; then
        bad "$name: rewritten, should be refused"
    elif ! grep -q "$want" "$tmp/$name.err" || [ -e "$tmp/$name.bf.spv" ]; then
        bad "$name: refused without '$want' or left an output: $(cat "$tmp/$name.err")"
    else
        ok
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
