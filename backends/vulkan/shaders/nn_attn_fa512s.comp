#version 450
// nn_attn_fa512s.comp - nn_attn_fa.glsl for head dim 512, two workgroups per
// query block (256 output columns each)
#define HD 512
#define HV 256
#include "nn_attn_fa.glsl"
