#version 450
#define XQUAD
#define TH 16
#define WARPS 8
#include "conv_halo.glsl"
