#version 450
#define SH_SCALAR
#include "matmul_coop.glsl"
