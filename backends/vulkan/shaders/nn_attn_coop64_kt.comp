#version 450
// nn_attn_coop64_kt.comp - nn_attn_coop.glsl for head dim 64, variant SWAP_QK
#define HD 64
#define SWAP_QK 1
#include "nn_attn_coop.glsl"
