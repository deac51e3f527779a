#version 450
#define XQUAD
#include "conv_halo.glsl"
