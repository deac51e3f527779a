#version 450
#define WGLOBAL
#define XQUAD
#define TH 8
#define WARPS 8
#define CK 32
#include "conv_halo.glsl"
