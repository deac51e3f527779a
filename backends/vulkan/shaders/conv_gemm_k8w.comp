#version 450
#define MM_CONV
#define BK 8
#define WT 1
#include "matmul_f32.glsl"
