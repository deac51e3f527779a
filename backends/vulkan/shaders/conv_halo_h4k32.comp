#version 450
#define TH 4
#define WARPS 4
#define CK 32
#define MFMAX 2
#include "conv_halo.glsl"
