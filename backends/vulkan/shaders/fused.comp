#version 450
// fused.comp - a fused elementwise chain (compile's LM_OP_FUSED) as one
// dispatch: an interpreter over a small program (vkops.h, FZ_*) that the
// host writes once per distinct chain and geometry (backends/vulkan/fused.c).
// One pipeline serves every chain of a dimension count and register count.
//
// Each invocation loads its element of every input (strided, broadcast:
// stride 0) into registers, runs the steps, and writes the last step's value
// to the output: the chain reads its inputs and writes its output once.
// Registers live in shared memory, one column per invocation (dynamic
// register numbers would push a local array into slow local memory on most
// GPUs); the host packs the chain's values into NSLOT registers by liveness.
#include "fused.glsl"

layout(constant_id = 0) const int NDIM = 1;
layout(constant_id = 1) const int NSLOT = 4;

shared uint R[NSLOT * LOCAL];

uint rd(uint s) { return R[s * LOCAL + gl_LocalInvocationID.x]; }
void wr(uint s, uint x) { R[s * LOCAL + gl_LocalInvocationID.x] = x; }

uint run_step(uint b)
{
    uint mode = prog.w[b + FS_MODE];
    uint x1 = mode != EW_UNARY ? rd(prog.w[b + FS_SLOT + 1]) : 0u;
    uint x2 = mode == EW_WHERE ? rd(prog.w[b + FS_SLOT + 2]) : 0u;
    return fz_apply(mode, prog.w[b + FS_CODE], prog.w[b + FS_KIND], prog.w[b + FS_DTO], prog.w[b + FS_DT],
                    prog.w[b + FS_DT + 1], prog.w[b + FS_DT + 2], rd(prog.w[b + FS_SLOT]), x1, x2, b);
}

void element(uint i, uint nin, uint nsteps)
{
    int c[EW_MAXDIM];
    if (NDIM > 1) fz_coords(i, NDIM, c);
    for (uint k = 0u; k < nin; k++) {
        uint dt = prog.w[FZ_IN + k * FZ_IN_WORDS + FI_DT];
        uint x = load_raw(k, dt_bytes(dt), fz_index(k, i, c, NDIM));
        wr(prog.w[FZ_IN + k * FZ_IN_WORDS + FI_SLOT], reg_of_raw(x, dt));
    }
    uint r = 0u, b = FZ_STEP;
    for (uint s = 0u; s < nsteps; s++, b += FZ_STEP_WORDS) {
        r = run_step(b);
        if (s + 1u < nsteps) wr(prog.w[b + FS_OSLOT], r);
    }
    store_out(pc.out_off + int(i), prog.w[b - FZ_STEP_WORDS + FS_DTO], r);
}

void main()
{
    uint nin = prog.w[FZ_NIN], nsteps = prog.w[FZ_NSTEPS];
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride)
        element(i, nin, nsteps);
}
