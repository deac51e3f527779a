#version 450
#define HALO_SIMT
#define XQUAD
#include "conv_halo.glsl"
