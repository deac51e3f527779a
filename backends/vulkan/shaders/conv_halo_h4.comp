#version 450
#define TH 4
#define WARPS 4
#include "conv_halo.glsl"
