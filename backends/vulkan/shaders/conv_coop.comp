#version 450
#define MM_CONV
#define MM_COOP
#include "matmul_coop.glsl"
