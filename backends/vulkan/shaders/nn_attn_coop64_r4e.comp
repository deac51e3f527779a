#version 450
// nn_attn_coop64_r4e.comp - nn_attn_coop.glsl for head dim 64, softmax in registers, 4 subgroups, K and V apart, the next K loaded early
#define HD 64
#define REGS
#define NSG 4
#define DUAL
#define EARLYK
#include "nn_attn_coop.glsl"
