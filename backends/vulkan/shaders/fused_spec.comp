#version 450
// fused_spec.comp - a fused elementwise chain with its steps baked in as
// specialization constants: the driver folds every op switch and register
// number away, so the kernel is straight-line code with the registers in
// real registers (what generated GLSL would give, without a run-time shader
// compiler).  One pipeline per distinct chain (dtypes and ops; geometry and
// clamp bounds still come from the program buffer).  See fused.comp for
// the interpreter, which needs no pipeline per chain.
// Constants: 0 NDIM, 1 NIN, 2 NSTEPS, 3 + k input k (dtype | slot << 8),
// 19 + 3s step s: A (mode | code << 8 | kind << 16 | dto << 24),
// B (d0 | d1 << 8 | d2 << 16), C (slot0 | slot1 << 8 | slot2 << 16 | out slot << 24).
#include "fused.glsl"

layout(constant_id = 0) const int NDIM = 1;
layout(constant_id = 1) const uint NIN = 1u;
layout(constant_id = 2) const uint NSTEPS = 1u;
#define IN_C(K) layout(constant_id = 3 + K) const uint IN_##K = 0u;
IN_C(0) IN_C(1) IN_C(2) IN_C(3) IN_C(4) IN_C(5) IN_C(6) IN_C(7) IN_C(8) IN_C(9) IN_C(10) IN_C(11) IN_C(12) IN_C(13) IN_C(14) IN_C(15)
#define STEP_C(S) layout(constant_id = 19 + 3 * S) const uint SA_##S = 0u; \
    layout(constant_id = 20 + 3 * S) const uint SB_##S = 0u; \
    layout(constant_id = 21 + 3 * S) const uint SC_##S = 0u;
STEP_C(0) STEP_C(1) STEP_C(2) STEP_C(3) STEP_C(4) STEP_C(5) STEP_C(6) STEP_C(7)
STEP_C(8) STEP_C(9) STEP_C(10) STEP_C(11) STEP_C(12) STEP_C(13) STEP_C(14) STEP_C(15)
STEP_C(16) STEP_C(17) STEP_C(18) STEP_C(19) STEP_C(20) STEP_C(21) STEP_C(22) STEP_C(23)
STEP_C(24) STEP_C(25) STEP_C(26) STEP_C(27) STEP_C(28) STEP_C(29) STEP_C(30) STEP_C(31)

#define LOAD(K) \
    if (uint(K) < NIN) { \
        uint dt = IN_##K & 255u; \
        r[IN_##K >> 8] = reg_of_raw(load_raw(K, dt_bytes(dt), fz_index(K, i, c, NDIM)), dt); \
    }

#define STEP(S) \
    if (uint(S) < NSTEPS) { \
        uint v = fz_apply(SA_##S & 255u, (SA_##S >> 8) & 255u, (SA_##S >> 16) & 255u, SA_##S >> 24, \
                          SB_##S & 255u, (SB_##S >> 8) & 255u, (SB_##S >> 16) & 255u, r[SC_##S & 255u], \
                          r[(SC_##S >> 8) & 255u], r[(SC_##S >> 16) & 255u], FZ_STEP + S * FZ_STEP_WORDS); \
        if (uint(S) + 1u < NSTEPS) r[SC_##S >> 24] = v; \
        else store_out(pc.out_off + int(i), SA_##S >> 24, v); \
    }

void element(uint i)
{
    int c[EW_MAXDIM];
    if (NDIM > 1) fz_coords(i, NDIM, c);
    uint r[FZ_MAXIN + FZ_MAXSTEP];
    LOAD(0) LOAD(1) LOAD(2) LOAD(3) LOAD(4) LOAD(5) LOAD(6) LOAD(7)
    LOAD(8) LOAD(9) LOAD(10) LOAD(11) LOAD(12) LOAD(13) LOAD(14) LOAD(15)
    STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7)
    STEP(8) STEP(9) STEP(10) STEP(11) STEP(12) STEP(13) STEP(14) STEP(15)
    STEP(16) STEP(17) STEP(18) STEP(19) STEP(20) STEP(21) STEP(22) STEP(23)
    STEP(24) STEP(25) STEP(26) STEP(27) STEP(28) STEP(29) STEP(30) STEP(31)
}

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride)
        element(i);
}
