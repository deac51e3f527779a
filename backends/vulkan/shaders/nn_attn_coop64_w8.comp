#version 450
// nn_attn_coop64_w8.comp - nn_attn_coop.glsl for head dim 64, 8 subgroups (128 queries)
#define HD 64
#define NSG 8
#include "nn_attn_coop.glsl"
