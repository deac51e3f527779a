#version 450
#define MM_CONV
#define PAD 0
#include "matmul_f32.glsl"
