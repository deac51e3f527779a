#version 450
// nn_attn_fa512.comp - nn_attn_fa.glsl for head dim 512
#define HD 512
#include "nn_attn_fa.glsl"
