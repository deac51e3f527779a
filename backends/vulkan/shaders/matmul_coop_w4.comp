#version 450
#define WARPS 4
#include "matmul_coop.glsl"
