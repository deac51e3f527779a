#version 450
// nn_attn_coop64.comp - nn_attn_coop.glsl for head dim 64
#define HD 64
#include "nn_attn_coop.glsl"
