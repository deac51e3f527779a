#version 450
#define HALO_SIMT
#define WGLOBAL
#define CK 32
#include "conv_halo.glsl"
