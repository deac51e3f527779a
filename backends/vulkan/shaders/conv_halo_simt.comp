#version 450
#define HALO_SIMT
#include "conv_halo.glsl"
