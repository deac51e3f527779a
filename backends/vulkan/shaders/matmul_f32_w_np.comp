#version 450
#define WT 1
#define PAD 0
#include "matmul_f32.glsl"
