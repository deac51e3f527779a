#version 450
// nn_attn_coop64_r4q.comp - nn_attn_coop.glsl for head dim 64, softmax in registers, 4 subgroups, Q read from shared memory each key block
#define HD 64
#define REGS
#define NSG 4
#define QSHARED
#include "nn_attn_coop.glsl"
