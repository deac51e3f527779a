// bf16_rules.comp - tests/parity/spvpack_bf16.sh's shader: one variant per
// use of float16_t that spvpack --bf16 must accept (OK: loads, stores,
// conversions, an exact constant, cooperative matrices) or refuse (ARITH,
// CMP, EXT: arithmetic, a comparison, an extended instruction on the type;
// INEXACT: a constant bf16 cannot hold).
#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#ifdef COOP
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#endif
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer B { float16_t h[64]; float f[]; } b;
void main()
{
    uint i = gl_GlobalInvocationID.x;
#if defined(ARITH)
    b.h[i] = b.h[i] * b.h[i + 1];
#elif defined(CMP)
    if (b.h[i] < b.h[i + 1]) b.f[i] = 1.0;
#elif defined(EXT)
    b.h[i] = abs(b.h[i + 1]);
#elif defined(INEXACT)
    b.h[i] = float16_t(0.1);
#else
    b.f[i] = float(b.h[i]) * 2.0;
    b.h[i] = float16_t(b.f[i + 1]);
    b.h[i + 2] = float16_t(-3.0);
#ifdef COOP
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a;
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> m;
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> c = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
    coopMatLoad(a, b.h, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(m, b.h, 0, 16, gl_CooperativeMatrixLayoutColumnMajor);
    c = coopMatMulAdd(a, m, c);
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> h = coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(c);
    coopMatStore(h, b.h, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
#endif
#endif
}
