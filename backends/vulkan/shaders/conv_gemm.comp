#version 450
#define MM_CONV
#include "matmul_f32.glsl"
