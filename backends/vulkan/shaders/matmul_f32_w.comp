#version 450
#define WT 1
#include "matmul_f32.glsl"
