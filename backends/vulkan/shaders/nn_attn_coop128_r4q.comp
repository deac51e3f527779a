#version 450
// nn_attn_coop128_r4q.comp - nn_attn_coop.glsl for head dim 128, softmax in registers, 4 subgroups, Q read from shared memory each key block
#define HD 128
#define REGS
#define NSG 4
#define QSHARED
#include "nn_attn_coop.glsl"
