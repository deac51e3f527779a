#version 450
// nn_attn_coop128_r4e.comp - nn_attn_coop.glsl for head dim 128, softmax in registers, 4 subgroups, K and V apart, the next K loaded early
#define HD 128
#define REGS
#define NSG 4
#define DUAL
#define EARLYK
#include "nn_attn_coop.glsl"
