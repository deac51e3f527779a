#version 450
#define WGLOBAL
#define XQUAD
#define CK 32
#include "conv_halo.glsl"
