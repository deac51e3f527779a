#version 450
// nn_attn_coop64_r4.comp - nn_attn_coop.glsl for head dim 64, softmax in registers, 4 subgroups
#define HD 64
#define REGS
#define NSG 4
#include "nn_attn_coop.glsl"
