#version 450
#define XQUAD
#define TH 16
#define WARPS 4
#include "conv_halo.glsl"
