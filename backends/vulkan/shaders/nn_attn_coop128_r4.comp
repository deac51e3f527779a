#version 450
// nn_attn_coop128_r4.comp - nn_attn_coop.glsl for head dim 128, softmax in registers, 4 subgroups
#define HD 128
#define REGS
#define NSG 4
#include "nn_attn_coop.glsl"
