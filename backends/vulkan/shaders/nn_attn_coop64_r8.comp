#version 450
// nn_attn_coop64_r8.comp - nn_attn_coop.glsl for head dim 64, softmax in registers, 8 subgroups
#define HD 64
#define REGS
#define NSG 8
#include "nn_attn_coop.glsl"
