#!/usr/bin/env python3
# spirv_layout.py SPV_DIR - two things in Lumen's SPIR-V modules that the
# Khronos validation layer (1.4.3xx: its spirv-val and its checks against
# the device's VkCooperativeMatrixPropertiesKHR) rejects on the H200, found
# without a GPU or a new spirv-val (Debian 12's 2023.1 cannot read the KHR
# cooperative-matrix modules):
#  1. a Function or Private variable whose type carries an ArrayStride
#     (glslang 15.1 gives a local int[N] the type of a block's int[N]);
#  2. a subgroup-scope bf16 accumulator matrix (spvpack --bf16 rewrites
#     every 16-bit float; devices list bf16 only as A and B beside f32 C).
# Each module is read as words (opcodes from the SPIR-V spec).  Then the
# checker is run on two small modules with one fault each, which it must
# refuse (a check that cannot fail checks nothing).  Prints
# "N passed, N failed"; exits 1 on any failure, 77 when there is no module.
import glob, os, struct, sys

OP_DECORATE, OP_TYPE_POINTER, OP_CONSTANT, OP_TYPE_FLOAT = 71, 32, 43, 22
OP_TYPE_STRUCT, OP_TYPE_ARRAY, OP_TYPE_RUNTIME_ARRAY, OP_TYPE_COOP_KHR = 30, 28, 29, 4456
DEC_ARRAY_STRIDE, SC_PRIVATE, SC_FUNCTION, SCOPE_SUBGROUP, USE_ACC, FP_BFLOAT16 = 6, 6, 7, 3, 2, 0


def faults(words):
    stride, var_types, consts, bf16, coop, members = set(), [], {}, set(), [], {}
    i = 5
    while i < len(words):
        op, n = words[i] & 0xFFFF, words[i] >> 16
        if n == 0:
            return ["a zero-length instruction at word %d" % i]
        a = words[i + 1:i + n]
        if op == OP_DECORATE and len(a) > 1 and a[1] == DEC_ARRAY_STRIDE:
            stride.add(a[0])
        elif op == OP_TYPE_POINTER and a[1] in (SC_PRIVATE, SC_FUNCTION):
            var_types.append(a[2])
        elif op == OP_CONSTANT:
            consts[a[1]] = a[2]
        elif op == OP_TYPE_FLOAT and len(a) > 2 and a[1] == 16 and a[2] == FP_BFLOAT16:
            bf16.add(a[0])
        elif op == OP_TYPE_COOP_KHR:
            coop.append(a)
        elif op == OP_TYPE_STRUCT:
            members[a[0]] = list(a[1:])
        elif op in (OP_TYPE_ARRAY, OP_TYPE_RUNTIME_ARRAY):
            members[a[0]] = [a[1]]
        i += n

    def strided(t, depth=0):
        return t in stride or (depth < 16 and any(strided(m, depth + 1) for m in members.get(t, [])))

    out = []
    if any(strided(t) for t in var_types):
        out.append("a Function/Private variable's type carries an ArrayStride")
    for c in coop:   # result, component type, scope, rows, columns, use
        if c[1] in bf16 and consts.get(c[2]) == SCOPE_SUBGROUP and consts.get(c[5]) == USE_ACC:
            out.append("a subgroup-scope bf16 accumulator matrix")
            break
    return out


def module(*insts):
    words = [0x07230203, 0x00010600, 0, 64, 0]
    for op, *ops in insts:
        words += [op | ((len(ops) + 1) << 16)] + list(ops)
    return words


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "build/gen/spv"
    files = sorted(glob.glob(os.path.join(d, "*.spv")))
    if not files:
        print("spirv_layout.py: no modules in %s; skipped" % d)
        return 77
    passed = failed = 0
    for f in files:
        data = open(f, "rb").read()
        found = faults(struct.unpack("<%dI" % (len(data) // 4), data))
        if found:
            failed += 1
            print("FAIL: %s: %s" % (os.path.basename(f), "; ".join(found)))
        else:
            passed += 1
    # the checker must refuse one fault of each kind
    int32, n2, arr, ptr = 1, 2, 3, 4
    bad1 = module((OP_DECORATE, arr, DEC_ARRAY_STRIDE, 4), (21, int32, 32, 1), (OP_CONSTANT, int32, n2, 2),
                  (OP_TYPE_ARRAY, arr, int32, n2), (OP_TYPE_POINTER, ptr, SC_FUNCTION, arr))
    f32, bf, c16, c3, c2, mat = 5, 6, 7, 8, 9, 10
    bad2 = module((21, int32, 32, 0), (OP_CONSTANT, int32, c16, 16), (OP_CONSTANT, int32, c3, SCOPE_SUBGROUP),
                  (OP_CONSTANT, int32, c2, USE_ACC), (OP_TYPE_FLOAT, bf, 16, FP_BFLOAT16),
                  (OP_TYPE_COOP_KHR, mat, bf, c3, c16, c16, c2))
    good = module((OP_DECORATE, arr, DEC_ARRAY_STRIDE, 4), (21, int32, 32, 1), (OP_CONSTANT, int32, n2, 2),
                  (OP_TYPE_ARRAY, arr, int32, n2), (OP_TYPE_FLOAT, f32, 32))
    for name, words, want in (("an ArrayStride local", bad1, 1), ("a bf16 accumulator", bad2, 1), ("a clean module", good, 0)):
        if len(faults(words)) == want:
            passed += 1
        else:
            failed += 1
            print("FAIL: the checker on %s found %s" % (name, faults(words) or "nothing"))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


sys.exit(main())
