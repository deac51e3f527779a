#version 450
// nn_attn_coop64_r4d.comp - nn_attn_coop.glsl for head dim 64, softmax in registers, 4 subgroups, K and V apart
#define HD 64
#define REGS
#define NSG 4
#define DUAL
#include "nn_attn_coop.glsl"
