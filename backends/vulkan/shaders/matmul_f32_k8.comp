#version 450
#define BK 8
#include "matmul_f32.glsl"
