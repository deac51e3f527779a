#version 450
// nn_attn_fa256.comp - nn_attn_fa.glsl for head dim 256
#define HD 256
#include "nn_attn_fa.glsl"
