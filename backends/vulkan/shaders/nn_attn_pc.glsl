// nn_attn_pc.glsl - the interface of the attention kernels dispatched from
// nn_attn_fa.c (nn_attn_fa*.comp and nn_attn_coop*.comp): the workgroup of
// NT invocations, the dtypes as specialization constants and the push
// constants, which must match nn_attn_fa.c's struct.
layout(local_size_x = NT) in;
layout(constant_id = 0) const uint DTQ = 0;
layout(constant_id = 1) const uint DTK = 0;
layout(constant_id = 2) const uint DTV = 0;
layout(constant_id = 3) const uint DTO = 0;

layout(push_constant) uniform PC {
    int Hq, Lq, Lk, nqb, grp;          // grp = Hq / Hk
    uint items, causal;                // items = B * Hq * nqb
    float scale;                       // scale * log2(e)
    int oq, ok, ov;                    // element offsets
    int sq[3], sk[3], sv[3];           // batch, head and row strides
} pc;
