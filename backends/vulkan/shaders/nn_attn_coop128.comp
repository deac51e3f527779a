#version 450
// nn_attn_coop128.comp - nn_attn_coop.glsl for head dim 128
#define HD 128
#include "nn_attn_coop.glsl"
