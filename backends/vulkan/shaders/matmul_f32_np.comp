#version 450
#define PAD 0
#include "matmul_f32.glsl"
