#version 450
// nn_attn.comp - nn_attn.glsl for D and Dv up to 256
#define BQ 16
#define DMAX 256
#include "nn_attn.glsl"
