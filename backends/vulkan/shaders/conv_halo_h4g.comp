#version 450
#define WGLOBAL
#define TH 4
#define WARPS 4
#define CK 32
#include "conv_halo.glsl"
