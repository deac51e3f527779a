#version 450
#define CK 32
#define MFMAX 2
#include "conv_halo.glsl"
