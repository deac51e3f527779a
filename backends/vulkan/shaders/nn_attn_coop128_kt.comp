#version 450
// nn_attn_coop128_kt.comp - nn_attn_coop.glsl for head dim 128, variant SWAP_QK
#define HD 128
#define SWAP_QK 1
#include "nn_attn_coop.glsl"
