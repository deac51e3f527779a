#version 450
// nn_attn512.comp - nn_attn.glsl for D and Dv up to 512 (8 queries a
// workgroup, so the q rows still fit 16 KiB of shared memory)
#define BQ 8
#define DMAX 512
#include "nn_attn.glsl"
