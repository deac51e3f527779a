#version 450
#define WGLOBAL
#define CK 32
#include "conv_halo.glsl"
