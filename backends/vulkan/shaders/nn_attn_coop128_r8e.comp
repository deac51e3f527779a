#version 450
// nn_attn_coop128_r8e.comp - nn_attn_coop.glsl for head dim 128, softmax in registers, 8 subgroups, K and V apart, the next K loaded early
#define HD 128
#define REGS
#define NSG 8
#define DUAL
#define EARLYK
#include "nn_attn_coop.glsl"
