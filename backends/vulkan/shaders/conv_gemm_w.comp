#version 450
#define MM_CONV
#define WT 1
#include "matmul_f32.glsl"
